"""`NatsBackend`: JetStream's `Nats-Msg-Id` deduplication as a claim-only gate."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import StorageType, StreamConfig

from anarchon import Duration, SchemaMismatch, parse_duration
from anarchon.backends import Capability, ClaimOutcome, ClaimRequest, ClaimResult, Lease

from ._common import (
    NatsConnection,
    check_name,
    check_replicas,
    encode_token,
    stream_get_many,
    stream_publish_many,
)

__all__ = ["NatsBackend"]

_DUPLICATE_IN_PROCESS = 10158
"""JetStream's error code for "duplicate message id is in process" (a replicated stream)."""
_IN_PROCESS_WAITS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, None)


class NatsBackend(NatsConnection):
    """A claim-only backend: the first publish of a slot's `Nats-Msg-Id` wins; a duplicate is taken.
    Wins are announced on a core NATS subject."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM, Capability.ANNOUNCE})
    url_schemes: ClassVar[tuple[str, ...]] = ("nats", "tls")

    def __init__(
        self,
        servers_or_client: str | list[str] | Client,
        *,
        stream: str = "ANARCHON",
        duplicate_window: Duration = "2m",
        prefix: str = "anarchon",
        timeout: Duration = "5s",
        replicas: int = 1,
    ) -> None:
        self.stream = check_name("stream", stream)
        self.replicas = check_replicas(replicas)
        self.prefix = check_name("prefix", prefix)
        self._window_ms = parse_duration(duplicate_window, name="duplicate_window")
        if self._window_ms < 100:
            raise ValueError(f"invalid duplicate_window {duplicate_window!r}: JetStream needs at least 100ms")
        self._use_servers(servers_or_client, timeout, {"stream": stream, "duplicate_window": duplicate_window,
                                                       "prefix": prefix, "replicas": replicas})

    @classmethod
    def from_url(cls, url: str) -> NatsBackend:
        """Build from `nats://host:4222?stream=ANARCHON&duplicate_window=2m&prefix=anarchon&replicas=1`
        (`nats://a:4222,b:4222,c:4222?replicas=3` on a cluster)."""
        parts = urlsplit(url)
        options: dict[str, Any] = dict(parse_qsl(parts.query))
        unknown = set(options) - {"stream", "duplicate_window", "prefix", "replicas"}
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} in the NATS URL: use stream, "
                             "duplicate_window, prefix or replicas")
        return cls(urlunsplit(parts._replace(query="")), **options)

    @property
    def horizon_ms(self) -> int:
        """The stream's duplicate window: how long a claim's `Nats-Msg-Id` is remembered."""
        return self._window_ms

    def subject(self, namespace: str, job: str) -> str:
        """`<prefix>.<namespace>.<job>`, with odd names hashed so the subject is valid."""
        return f"{self.prefix}.{encode_token(namespace)}.{encode_token(job)}"

    @staticmethod
    def msg_id(namespace: str, job: str, slot: int) -> str:
        """`<namespace>:<job>:<slot>`, with odd names hashed (a hashed token is '=' and hex, no ':')."""
        return f"{encode_token(namespace)}:{encode_token(job)}:{slot}"

    def _wins_subject(self, namespace: str) -> str:
        return f"_anarchon.{self.stream}.won.{encode_token(namespace)}"

    def _expected(self) -> dict[str, Any]:
        window = self._window_ms / 1000
        return {"subjects": [f"{self.prefix}.>"], "duplicate_window": window, "max_age": window}

    async def _prepare(self) -> None:
        """Create the stream, or check that an existing one has the expected settings."""
        want = self._expected()
        with self._errors(f"open stream {self.stream!r} (is JetStream enabled?)"):
            try:
                info = await self._stream_or_create(StreamConfig(
                    name=self.stream, subjects=want["subjects"],
                    duplicate_window=want["duplicate_window"], max_age=want["max_age"],
                    storage=StorageType.FILE, num_replicas=self.replicas,
                    description="anarchon claim gates (Nats-Msg-Id deduplication)",
                ))
            except nats.js.errors.BadRequestError as exc:
                raise SchemaMismatch(
                    f"cannot create stream {self.stream!r} on {self.url}: {exc.description}; another "
                    f"stream may already capture '{self.prefix}.>': pass another prefix= or stream="
                ) from exc
        cfg = info.config
        wrong = []
        if want["subjects"][0] not in (cfg.subjects or []):
            wrong.append(f"subjects={cfg.subjects!r} (want {want['subjects']!r})")
        if round((cfg.duplicate_window or 0) * 1000) != self._window_ms:
            wrong.append(f"duplicate_window={cfg.duplicate_window}s (want {want['duplicate_window']}s)")
        if cfg.max_age and cfg.max_age < want["duplicate_window"]:
            wrong.append(f"max_age={cfg.max_age}s (want at least {want['duplicate_window']}s)")
        if wrong:
            raise SchemaMismatch(
                f"stream {self.stream!r} on {self.url} exists with other settings: {', '.join(wrong)}. "
                f"Pass matching options to NatsBackend, use another stream=, or delete it "
                f"(`nats stream rm {self.stream}`)"
            )

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Publish each claim with `Nats-Msg-Id: <namespace>:<job>:<slot>`, all at once; a duplicate
        PubAck means taken.

        Every duplicate is TAKEN, this owner's own earlier publish included: one WON per slot. The
        holders of the taken slots are read back in one more batch.
        """
        if not requests:
            return []
        messages = [(self.subject(r.namespace, r.job),
                     json.dumps({"owner": r.owner, "job": r.job, "slot": r.slot}).encode(),
                     {"Nats-Msg-Id": self.msg_id(r.namespace, r.job, r.slot)}) for r in requests]
        with self._errors(f"claim {requests[0].job!r} slot {requests[0].slot}"):
            acks = await stream_publish_many(self.client, messages, stream=self.stream,
                                             within=self._timeout)
        again = [i for i, ack in enumerate(acks) if isinstance(ack, Exception) and _retryable(ack)]
        if again:
            retried = await asyncio.gather(*(self._publish_again(messages[i]) for i in again),
                                           return_exceptions=True)
            for i, ack in zip(again, retried, strict=True):
                if isinstance(ack, BaseException) and not isinstance(ack, Exception):
                    raise ack
                acks[i] = ack
        done: list[tuple[int, bool]] = []
        for r, ack in zip(requests, acks, strict=True):
            if isinstance(ack, Exception):
                with self._errors(f"claim {r.job!r} slot {r.slot}"):
                    raise ack
            done.append(ack)
        taken = [i for i, (_, duplicate) in enumerate(done) if duplicate]
        with self._errors(f"claim {requests[0].job!r} slot {requests[0].slot}"):
            holders = dict(zip(taken, await self._holders([done[i][0] for i in taken]), strict=True))
        results = []
        for i, r in enumerate(requests):
            if i in holders:
                results.append(ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, holder=holders[i], attempt=1))
                continue
            lease = Lease(r.namespace, r.job, r.slot, 1, 0, r.owner, 0)
            results.append(ClaimResult(ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=r.owner,
                                       attempt=1))
        await self._announce(requests, results)
        return results

    async def _publish_again(self, message: tuple[str, bytes, dict[str, str]]) -> tuple[int, bool]:
        """Publish a claim again after a retryable answer, waiting longer before each next try.

        On a replicated stream, another publish of this id may still be being replicated (asked again
        once it is decided, it is a duplicate, or ours wins if it failed); "no responders" means no
        server stored it (a cluster still spreading a new stream's subjects), so sending it again
        cannot make a second copy.
        """
        ack: tuple[int, bool] | Exception = nats.errors.TimeoutError()
        for wait in _IN_PROCESS_WAITS:
            if wait is None:
                break
            await asyncio.sleep(wait)
            (ack,) = await stream_publish_many(self.client, [message], stream=self.stream,
                                               within=self._timeout)
            if not (isinstance(ack, Exception) and _retryable(ack)):
                break
        if isinstance(ack, Exception):
            raise ack
        return ack

    async def _holders(self, seqs: list[int]) -> list[str | None]:
        """The owner stored in the first message of each slot, or None when it is gone."""
        wanted = [seq for seq in seqs if seq]
        got = iter(await stream_get_many(self.client, self.stream, wanted, within=self._timeout)
                   if wanted else [])
        owners: list[str | None] = []
        for seq in seqs:
            msg = next(got) if seq else None
            if isinstance(msg, nats.js.errors.NotFoundError) or msg is None:
                owners.append(None)
                continue
            if isinstance(msg, Exception):
                raise msg
            try:
                owner = json.loads(msg.data or b"{}").get("owner")
            except ValueError:
                owner = None
            owners.append(owner if isinstance(owner, str) else None)
        return owners


def _retryable(exc: Exception) -> bool:
    """True for a publish's answer that a later try of the same message may change (see
    `NatsBackend._publish_again`)."""
    if isinstance(exc, nats.js.errors.APIError) and exc.err_code == _DUPLICATE_IN_PROCESS:
        return True
    return (isinstance(exc, nats.js.errors.NoStreamResponseError)
            and isinstance(exc.__context__, nats.errors.NoRespondersError))
