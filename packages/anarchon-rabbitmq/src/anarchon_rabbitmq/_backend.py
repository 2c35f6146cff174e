"""`RabbitMQBackend`: one durable classic gate queue per (namespace, job, slot)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractRobustConnection

from anarchon import BackendError, BackendUnavailable, Duration, SchemaMismatch, parse_duration
from anarchon.backends import (
    BackendBase,
    Capability,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    Lease,
    redact_url,
)

from ._names import check_prefix, queue_name

__all__ = ["RabbitMQBackend"]


class RabbitMQBackend(BackendBase):
    """A claim-only backend: the first confirmed publish into a slot's one-message gate queue wins."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM})
    url_schemes: ClassVar[tuple[str, ...]] = ("amqp", "amqps")

    def __init__(
        self,
        url_or_connection: str | AbstractRobustConnection,
        *,
        prefix: str = "anarchon",
        horizon: Duration = "5m",
        channels: int = 4,
        timeout: Duration = "10s",
    ) -> None:
        if isinstance(url_or_connection, str) and urlsplit(url_or_connection).scheme.lower() not in (
            self.url_schemes
        ):
            raise ValueError(
                f"invalid RabbitMQ URL {redact_url(url_or_connection)!r}: use "
                "amqp://user:pass@host:5672/vhost or amqps://…"
            )
        self.prefix = check_prefix(prefix)
        self._horizon_ms = parse_duration(horizon, name="horizon")
        if channels < 1:
            raise ValueError(f"invalid channels={channels!r}: use 1 or more")
        self._pool_size = channels
        self._timeout = parse_duration(timeout, name="timeout") / 1000
        self._idle: asyncio.Queue[AbstractChannel] | None = None
        self._created = 0
        self._use(url_or_connection, AbstractConnection,
                  {"prefix": prefix, "horizon": horizon, "channels": channels, "timeout": timeout})

    @classmethod
    def from_url(cls, url: str) -> RabbitMQBackend:
        """Build from `amqp://user:pass@host/vhost?prefix=…&horizon=5m`; other query keys go to aio-pika."""
        parts = urlsplit(url)
        ours: dict[str, Any] = {}
        rest = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in ("prefix", "horizon"):
                ours[key] = value
            else:
                rest.append((key, value))
        return cls(urlunsplit(parts._replace(query=urlencode(rest))), **ours)

    @property
    def url(self) -> str:
        """The broker's URL, password redacted."""
        if self._target is not None:
            return redact_url(self._target)
        return redact_url(str(getattr(self._client, "url", "amqp://<connection>")))

    @property
    def horizon_ms(self) -> int:
        """The gate queue's `x-expires`: a claim is remembered at least this long after the last one."""
        return self._horizon_ms

    def queue_name(self, namespace: str, job: str, slot: int) -> str:
        """The gate queue's name for one slot (odd namespace or job names are hashed)."""
        return queue_name(self.prefix, namespace, job, slot)

    # -- connection ------------------------------------------------------------------------------

    async def _connect(self) -> AbstractRobustConnection:
        """A robust connection, which reconnects by itself."""
        try:
            async with asyncio.timeout(self._timeout):
                return await aio_pika.connect_robust(self._target)
        except Exception as exc:
            raise BackendUnavailable(
                f"cannot connect to RabbitMQ at {self.url}: {_describe(exc)}; is the broker running "
                "and the URL right?"
            ) from exc

    async def _disconnect(self, client: AbstractRobustConnection) -> None:
        await client.close()

    async def _prepare(self) -> None:
        """Check that one channel works."""
        self._idle = asyncio.Queue()
        self._created = 0
        async with self._channel():
            pass

    async def _shutdown(self) -> None:
        """Close the pooled channels."""
        idle, self._idle = self._idle, None
        while idle is not None and not idle.empty():
            ch = idle.get_nowait()
            try:
                await ch.close()
            except Exception:
                pass

    def _translate(self, exc: Exception, doing: str) -> BackendError:
        """aio-pika's and aiormq's errors, and socket errors, as anarchon's."""
        if isinstance(exc, (ConnectionError, OSError, TimeoutError, aiormq.exceptions.AMQPError,
                            aiormq.exceptions.ChannelInvalidStateError)):
            return BackendUnavailable(f"cannot {doing} on RabbitMQ at {self.url}: {_describe(exc)}")
        return BackendError(f"cannot {doing} on RabbitMQ at {self.url}: {_describe(exc)}")

    @asynccontextmanager
    async def _channel(self) -> AsyncIterator[AbstractChannel]:
        """Borrow a confirming channel from the pool; a channel the broker closed is replaced."""
        if self._idle is None or self._client is None:
            raise BackendError(f"{self!r} is not open: call `await backend.open()` (Scheduler.start does)")
        idle = self._idle
        ch: AbstractChannel | None = None
        with self._errors("open a channel"):
            async with asyncio.timeout(self._timeout):
                while ch is None:
                    if not idle.empty():
                        ch = idle.get_nowait()
                        if ch.is_closed:
                            self._created -= 1
                            ch = None
                    elif self._created < self._pool_size:
                        self._created += 1
                        try:
                            ch = await self._client.channel(publisher_confirms=True,
                                                            on_return_raises=True)
                        except BaseException:
                            self._created -= 1
                            raise
                    else:
                        ch = await idle.get()
                        if ch.is_closed:
                            self._created -= 1
                            ch = None
        try:
            yield ch
        finally:
            if self._idle is idle:
                idle.put_nowait(ch)

    # -- the claim ---------------------------------------------------------------------------

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim each slot: declare its gate queue and publish one message into it, every slot's two
        frames pipelined on one confirming channel; the broker's ack means won, its nack taken.

        The declaration is sent with `nowait` and the publish right behind it, without waiting for
        either answer: a channel's frames are handled in order, so the queue exists when the publish
        reaches it, and a batch costs one round trip however many slots it holds.
        """
        if not requests:
            return []
        async with self._channel() as ch:
            try:
                async with asyncio.timeout(self._timeout):
                    amqp = await ch.get_underlay_channel()
                    return list(await asyncio.gather(*(self._claim(amqp, r) for r in requests)))
            except BackendError:
                raise
            except Exception as exc:
                raise self._translate(exc, f"claim {len(requests)} slot(s)") from exc

    def _arguments(self) -> dict[str, Any]:
        return {"x-queue-type": "classic", "x-max-length": 1, "x-overflow": "reject-publish",
                "x-expires": self._horizon_ms}

    async def _claim(self, amqp: aiormq.abc.AbstractChannel, r: ClaimRequest) -> ClaimResult:
        name = self.queue_name(r.namespace, r.job, r.slot)
        body = json.dumps({"owner": r.owner, "job": r.job, "slot": r.slot}).encode()
        try:
            # Straight on aiormq's channel: aio-pika's robust channel would also remember every queue
            # it declares, to declare it again after a reconnection (one more per slot, forever).
            await amqp.queue_declare(name, durable=True, arguments=self._arguments(), nowait=True)
            await amqp.basic_publish(body, routing_key=name, properties=_PROPERTIES, mandatory=True)
        except aiormq.exceptions.PublishError as exc:
            raise BackendError(
                f"the gate queue {name!r} vanished between its declaration and the publish on {self.url}; "
                "the claim will be retried"
            ) from exc
        except aiormq.exceptions.DeliveryError as exc:
            if isinstance(getattr(exc, "frame", None), aiormq.spec.Basic.Nack):
                return ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, attempt=1)
            raise self._translate(exc, f"publish to {name!r}") from exc
        except aiormq.exceptions.ChannelPreconditionFailed as exc:
            raise SchemaMismatch(
                f"the gate queue {name!r} on {self.url} exists with other arguments ({exc}): another "
                f"instance uses a different horizon than {self._horizon_ms} ms or prefix; give every "
                "instance the same `horizon`, or use another `prefix`"
            ) from exc
        except BackendError:
            raise
        except Exception as exc:
            raise self._translate(exc, f"claim {name!r}") from exc
        lease = Lease(r.namespace, r.job, r.slot, 1, 0, r.owner, 0)
        return ClaimResult(ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=r.owner, attempt=1)


_PROPERTIES = aiormq.spec.Basic.Properties(delivery_mode=2, app_id="anarchon")
"""A persistent message: in a durable queue, the gate survives a broker restart."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
