"""`NatsKVBackend`: the DESIGN §3 lease state machine on JetStream Key-Value (nats-server 2.9+).

Two buckets, both plain JetStream streams in the Key-Value layout (`KV_<bucket>`, subjects
`$KV.<bucket>.<key>`, one message kept per key), written with compare-and-set publishes
(`Nats-Expected-Last-Subject-Sequence`):

- `<bucket>` has a TTL (the stream's MaxAge) equal to the lease. Its entry for a job is the **live
  lease**: `{slot, attempt, owner}`. The server deletes it once it is older than the TTL by the
  server's clock, so "the lease expired" is decided by the store alone.
- `<bucket>_state` has no TTL. Its entry for a job is the **record**: `{slot, attempt, token, owner,
  status, fingerprint}`, i.e. the attempt count and done/failed/released, which must outlive a lease.
  Its `token` is the fencing token: 1 for a job's first claim, +1 on each claim after (DESIGN §3).

A claim reads both, decides by the table, then wins only if (1) it creates the lease entry (or
replaces the live one it read, for `overlap="replace"`) and (2) it replaces the record it read.
Both are compare-and-set, so a decision made on stale reads fails and is made again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from anarchon import BackendError, ConfigError, SchemaMismatch
from anarchon._duration import Duration, parse_duration
from anarchon.backends import (
    BackendBase,
    Capability,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobState,
    JobStatus,
    Lease,
    Overlap,
    ReleaseOutcome,
)

from ._common import WRONG_LAST_SEQUENCE, Connection, check_name, encode_token, raise_backend_error

__all__ = ["NatsKVBackend"]

_EXPECT = "Nats-Expected-Last-Subject-Sequence"
_KV_OP = "KV-Operation"
_ROUNDS = 8
"""Compare-and-set rounds per claim before answering TAKEN (each lost round means another claim won)."""


class _Conflict(Exception):
    """A compare-and-set publish found another revision."""


@dataclass(frozen=True, slots=True)
class _Entry:
    """A key's latest message; `value` is None for a delete marker or no message (then `last` is 0)."""

    value: dict[str, Any] | None
    last: int
    time_ms: int


class NatsKVBackend(BackendBase):
    """A lease backend on JetStream Key-Value: create, compare-and-set update, TTL expiry (no push)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM, Capability.LEASE})
    url_schemes: ClassVar[tuple[str, ...]] = ("nats-kv", "nats-kv+tls")

    def __init__(
        self,
        servers_or_client: str | list[str] | Client,
        *,
        bucket: str = "anarchon",
        lease: Duration = "30s",
        timeout: Duration = "5s",
    ) -> None:
        if isinstance(servers_or_client, str):
            servers_or_client = _plain_url(servers_or_client)
        elif isinstance(servers_or_client, list):
            servers_or_client = [_plain_url(s) for s in servers_or_client]
        self._conn = Connection(servers_or_client, ("nats", "tls"))
        self.bucket = check_name("bucket", bucket)
        self.state_bucket = f"{bucket}_state"
        check_name("bucket", self.state_bucket)
        self.lease_ms = parse_duration(lease, name="lease")
        if self.lease_ms < 100:
            raise ValueError(f"invalid lease {lease!r}: the bucket TTL must be at least 100ms")
        self._timeout = parse_duration(timeout, name="timeout") / 1000
        self._js: JetStreamContext | None = None

    @classmethod
    def from_url(cls, url: str) -> NatsKVBackend:
        """Build from `nats-kv://host:4222?bucket=anarchon&lease=30s` (`nats-kv+tls://` for TLS)."""
        parts = urlsplit(url)
        options: dict[str, Any] = dict(parse_qsl(parts.query))
        unknown = set(options) - {"bucket", "lease"}
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)} in the NATS KV URL: use bucket or lease")
        return cls(urlunsplit(parts._replace(query="")), **options)

    @property
    def url(self) -> str:
        """The server(s), passwords redacted."""
        return self._conn.url

    @property
    def fixed_lease_ms(self) -> int:
        """The one lease length this bucket allows (its TTL); claims and renews must ask for it."""
        return self.lease_ms

    def key(self, namespace: str, job: str) -> str:
        """The key of one job in both buckets, with odd names hashed so the key is valid."""
        return f"{encode_token(namespace)}.{encode_token(job)}"

    # -- connecting ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, then create both buckets or check that existing ones have the expected TTL."""
        client = await self._conn.open(self._timeout)
        self._js = client.jetstream(timeout=self._timeout)
        await self._ensure_bucket(self.bucket, self.lease_ms)
        await self._ensure_bucket(self.state_bucket, None)

    async def _ensure_bucket(self, bucket: str, ttl_ms: int | None) -> None:
        js = self._js
        assert js is not None
        stream = f"KV_{bucket}"
        try:
            try:
                info = await js.stream_info(stream)
            except nats.js.errors.NotFoundError:
                ttl = None if ttl_ms is None else ttl_ms / 1000
                info = await js.add_stream(StreamConfig(
                    name=stream, subjects=[f"$KV.{bucket}.>"], max_msgs_per_subject=1,
                    max_age=ttl, duplicate_window=min(120.0, ttl or 120.0), discard=DiscardPolicy.NEW,
                    allow_rollup_hdrs=True, deny_delete=True, storage=StorageType.FILE,
                    description="anarchon leases" if ttl_ms else "anarchon job records",
                ))
        except BackendError:
            raise
        except Exception as exc:
            raise_backend_error(self.url, exc, f"open bucket {bucket!r} (is JetStream enabled?)")
        have = round((info.config.max_age or 0) * 1000)
        if have != (ttl_ms or 0):
            fix = (f"use NatsKVBackend(bucket=..., lease='{have}ms') to match, another bucket, or delete it "
                   f"(`nats kv rm {bucket}`)") if ttl_ms else f"delete it (`nats kv rm {bucket}`)"
            raise SchemaMismatch(
                f"bucket {bucket!r} on {self.url} has TTL {have} ms, but this backend needs "
                f"{ttl_ms or 0} ms ({'the lease' if ttl_ms else 'none: records must not expire'}); {fix}"
            )

    async def close(self) -> None:
        """Close the connection if this backend opened it."""
        self._js = None
        await self._conn.close()

    # -- the primitives --------------------------------------------------------------------------

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise BackendError(f"{self!r} is not open: call `await backend.open()` (Scheduler.start does)")
        return self._js

    async def _get(self, bucket: str, key: str) -> _Entry:
        js = self._jetstream()
        try:
            msg = await js.get_msg(f"KV_{bucket}", subject=f"$KV.{bucket}.{key}")
        except nats.js.errors.NotFoundError:
            return _Entry(None, 0, 0)
        time_ms = round(msg.time.timestamp() * 1000) if msg.time else 0
        op = (msg.headers or {}).get(_KV_OP)
        if op in ("DEL", "PURGE"):
            return _Entry(None, msg.seq or 0, time_ms)
        return _Entry(json.loads(msg.data or b"{}"), msg.seq or 0, time_ms)

    async def _put(self, bucket: str, key: str, value: dict[str, Any] | None, last: int) -> int:
        """Write `value` (None: a delete marker) only if the key's last revision is `last`."""
        js = self._jetstream()
        headers = {_EXPECT: str(last)}
        if value is None:
            headers[_KV_OP] = "DEL"
        try:
            payload = b"" if value is None else json.dumps(value).encode()
            ack = await js.publish(f"$KV.{bucket}.{key}", payload, stream=f"KV_{bucket}", headers=headers)
        except nats.js.errors.APIError as exc:
            if exc.err_code == WRONG_LAST_SEQUENCE:
                raise _Conflict from exc
            raise
        return int(ack.seq or 0)

    async def _time_of(self, bucket: str, seq: int) -> int:
        """The store's clock when revision `seq` was written, epoch ms."""
        msg = await self._jetstream().get_msg(f"KV_{bucket}", seq=seq)
        return round(msg.time.timestamp() * 1000) if msg.time else 0

    # -- claim -------------------------------------------------------------------------------------

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Decide by the DESIGN §3 table (see `LeaseBackend.claim`), with compare-and-set writes."""
        r = request
        self._check_lease(r.lease_ms, r.job)
        if r.overlap is Overlap.ALLOW:
            raise ConfigError(
                f"NatsKVBackend keeps one lease per job, so it cannot run slots of {r.job!r} side by side: "
                "overlap='allow' is not supported; use 'skip', 'buffer_one' or 'replace'"
            )
        try:
            for _ in range(_ROUNDS):
                result = await self._claim_round(r)
                if result is not None:
                    return result
        except BackendError:
            raise
        except Exception as exc:
            raise_backend_error(self.url, exc, f"claim {r.job!r} slot {r.slot}")
        holder = await self._get(self.bucket, self.key(r.namespace, r.job))
        owner = holder.value.get("owner") if holder.value else None
        return ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, holder=owner)

    def _check_lease(self, lease_ms: int, job: str) -> None:
        if lease_ms != self.lease_ms:
            raise ConfigError(
                f"job {job!r} asks for a {lease_ms} ms lease, but NatsKVBackend(bucket={self.bucket!r}) has "
                f"a fixed lease of {self.lease_ms} ms (the bucket's TTL): give the Scheduler and every job "
                f"lease='{self.lease_ms}ms', or use another bucket with NatsKVBackend(lease=...)"
            )

    async def _claim_round(self, r: ClaimRequest) -> ClaimResult | None:
        """One read-decide-write round; None when a compare-and-set lost and the round must be redone."""
        key = self.key(r.namespace, r.job)
        rec_entry = await self._get(self.state_bucket, key)
        live = await self._get(self.bucket, key)
        rec, held = rec_entry.value, live.value
        holder = held.get("owner") if held else None
        expires = live.time_ms + self.lease_ms if held else None

        def answer(outcome: ClaimOutcome, **extra: Any) -> ClaimResult:
            return ClaimResult(
                outcome, r.job, r.slot, holder=holder if held else (rec or {}).get("owner"),
                attempt=int((rec or {}).get("attempt", 0)), fingerprint=(rec or {}).get("fingerprint"),
                record_slot=(rec or {}).get("slot"), **extra,
            )

        # A lease entry that does not match the record belongs to a claim still in flight (or one
        # that died between its two writes): it blocks every claim until it is gone or ages out.
        matches = bool(held and rec and held.get("slot") == rec.get("slot")
                       and held.get("attempt") == rec.get("attempt") and rec.get("status") == "running")
        if held and not matches:
            if int(held.get("slot", 0)) > r.slot:
                return answer(ClaimOutcome.STALE)
            return answer(ClaimOutcome.TAKEN, expires_at=expires)
        if rec is None:
            return await self._win(r, key, rec_entry, live, attempt=1, revoke=False, previous=None)
        slot = int(rec["slot"])
        status = JobStatus(rec["status"])
        if r.slot == slot:
            if held:
                return answer(ClaimOutcome.TAKEN, expires_at=expires)
            if status in (JobStatus.DONE, JobStatus.FAILED):
                return answer(ClaimOutcome.DONE)
            # Released, or running with no live lease (it aged out): a takeover, if attempts remain.
            if int(rec["attempt"]) >= r.max_attempts:
                return answer(ClaimOutcome.EXHAUSTED, previous_status=status)
            return await self._win(r, key, rec_entry, live, attempt=int(rec["attempt"]) + 1, revoke=False,
                                   previous=status)
        if r.slot < slot:
            return answer(ClaimOutcome.STALE)
        if held:  # an older slot still runs under a live lease
            if r.overlap in (Overlap.SKIP, Overlap.BUFFER_ONE):
                return answer(ClaimOutcome.SKIPPED, expires_at=expires)
            return await self._win(r, key, rec_entry, live, attempt=1, revoke=True, previous=None)
        return await self._win(r, key, rec_entry, live, attempt=1, revoke=False, previous=None)

    async def _win(
        self, r: ClaimRequest, key: str, rec_entry: _Entry, live: _Entry, *, attempt: int, revoke: bool,
        previous: JobStatus | None,
    ) -> ClaimResult | None:
        rec = rec_entry.value
        value = {"slot": r.slot, "attempt": attempt, "owner": r.owner}
        try:
            # Create the lease: last=0 (never written or aged out) or the delete marker's revision.
            # For overlap="replace", overwrite the live lease read above, which revokes it.
            revision = await self._put(self.bucket, key, value, live.last)
        except _Conflict:
            return None
        now = await self._time_of(self.bucket, revision)
        if r.slot > now + r.max_skew_ms:
            await self._drop(key, revision)
            return ClaimResult(ClaimOutcome.EARLY, r.job, r.slot, now=now)
        # The job's token: the record's plus one (DESIGN §3). The record is written compare-and-set
        # against the one read, so no two wins can take the same token.
        token = int(rec.get("token", 0)) + 1 if rec else 1
        record = {"slot": r.slot, "attempt": attempt, "token": token, "owner": r.owner, "status": "running",
                  "fingerprint": r.fingerprint}
        try:
            await self._put(self.state_bucket, key, record, rec_entry.last)
        except _Conflict:
            await self._drop(key, revision)
            return None
        expires_at = now + self.lease_ms
        lease = Lease(r.namespace, r.job, r.slot, attempt, token, r.owner, expires_at)
        return ClaimResult(
            ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=r.owner, attempt=attempt,
            expires_at=expires_at, now=now, previous_status=previous,
            fingerprint=rec.get("fingerprint") if rec else None,
            record_slot=int(rec["slot"]) if rec else None,
        )

    async def _drop(self, key: str, revision: int) -> None:
        """Delete a lease entry this instance wrote at `revision`, unless something replaced it."""
        try:
            await self._put(self.bucket, key, None, revision)
        except _Conflict:
            pass

    # -- renew and release ---------------------------------------------------------------------

    async def _owned(self, lease: Lease) -> tuple[str, _Entry] | None:
        """The record's entry when it still names this lease's slot, token and owner and is running."""
        key = self.key(lease.namespace, lease.job)
        entry = await self._get(self.state_bucket, key)
        rec = entry.value
        if (rec is None or rec.get("slot") != lease.slot or rec.get("token") != lease.token
                or rec.get("owner") != lease.owner or rec.get("status") != "running"):
            return None
        return key, entry

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        """Extend the lease entry to a full TTL (see `LeaseBackend.renew`).

        An entry that aged out while nobody took the slot over is created again, as the reference
        model renews an expired lease that nobody took over.
        """
        self._check_lease(lease_ms, lease.job)
        try:
            owned = await self._owned(lease)
            if owned is None:
                return None
            key = owned[0]
            live = await self._get(self.bucket, key)
            mine = {"slot": lease.slot, "attempt": lease.attempt, "owner": lease.owner}
            if live.value is not None and live.value != mine:
                return None
            try:
                revision = await self._put(self.bucket, key, mine, live.last)
            except _Conflict:
                return None
            expires_at = await self._time_of(self.bucket, revision) + self.lease_ms
        except Exception as exc:
            raise_backend_error(self.url, exc, f"renew {lease.job!r} slot {lease.slot}")
        return Lease(lease.namespace, lease.job, lease.slot, lease.attempt, lease.token, lease.owner,
                     expires_at)

    async def release(self, lease: Lease, outcome: ReleaseOutcome) -> bool:
        """Record done, failed or released, then delete the lease entry (see `LeaseBackend.release`)."""
        status = {ReleaseOutcome.DONE: "done", ReleaseOutcome.FAILED: "failed",
                  ReleaseOutcome.HANDOVER: "released"}[outcome]
        try:
            owned = await self._owned(lease)
            if owned is None:
                return False
            key, entry = owned
            assert entry.value is not None
            try:
                await self._put(self.state_bucket, key, {**entry.value, "status": status}, entry.last)
            except _Conflict:
                return False
            live = await self._get(self.bucket, key)
            if live.value == {"slot": lease.slot, "attempt": lease.attempt, "owner": lease.owner}:
                await self._drop(key, live.last)
        except Exception as exc:
            raise_backend_error(self.url, exc, f"release {lease.job!r} slot {lease.slot}")
        return True

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Not supported: NATS offers no read of the server's clock (capability `inspect` is absent)."""
        raise NotImplementedError("NatsKVBackend lacks the 'inspect' capability")

    async def jobs(self, namespace: str) -> list[JobState]:
        """Not supported (capability `inspect` is absent)."""
        raise NotImplementedError("NatsKVBackend lacks the 'inspect' capability")


def _plain_url(url: str) -> str:
    """Turn `nats-kv://` into `nats://` and `nats-kv+tls://` into `tls://` for the client."""
    scheme, sep, rest = url.partition("://")
    mapped = {"nats-kv": "nats", "nats-kv+tls": "tls"}.get(scheme.lower(), scheme)
    return f"{mapped}{sep}{rest}"
