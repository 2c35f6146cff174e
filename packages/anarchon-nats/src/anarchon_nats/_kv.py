"""`NatsKVBackend`: the lease state machine on JetStream Key-Value (nats-server 2.9+).

Two buckets, both plain JetStream streams in the Key-Value layout (`KV_<bucket>`, subjects
`$KV.<bucket>.<key>`, one message kept per key), written with compare-and-set publishes
(`Nats-Expected-Last-Subject-Sequence`):

- `<bucket>` has a TTL (the stream's MaxAge) equal to the lease. Its entry for a job is the **live
  lease**: `{slot, attempt, owner}`. The server deletes it once it is older than the TTL by the
  server's clock, so "the lease expired" is decided by the store alone.
- `<bucket>_state` has no TTL. Its entry for a job is the **record**: `{slot, attempt, token, owner,
  status, fingerprint}`, i.e. the attempt count and done/failed/released, which must outlive a lease.
  Its `token` is the fencing token: 1 for a job's first claim, +1 on each claim after.

A claim reads both, applies the claim table (`anarchon.backends.decide`), then wins only if (1) it
creates the lease entry (or replaces the live one it read, for `overlap="replace"`, or one left by
a release) and (2) it replaces the record it read. Both are compare-and-set, so a decision made on
stale reads fails and is made again. A lease entry equal to an ended record's is what a release
left: it is no lease.

A winner keeps the revisions it wrote (the record's and the lease entry's). Renewals and releases of
that lease write against them without reading: a write that succeeds proves nothing changed since,
so the lease is still the record's (`decide_renew` and `decide_release` would allow it). Only a
write that finds another revision reads both entries and decides by those rules.

A claim need not read either: the backend knows, per job it has claimed, the latest record and
lease entry it has seen (its own reads and writes, and the releases other replicas announce on
`_anarchon.KV_<bucket>.ended`). When that knowledge leads to a write, the claim writes against those
revisions at once, as it would against fresh reads; a revision that is no longer the store's fails
its write, and the claim reads afresh. An answer that writes nothing (taken, done, skipped, stale)
is only ever given on fresh reads.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from anarchon import ConfigError, Duration, SchemaMismatch, parse_duration
from anarchon.backends import (
    Capability,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobStatus,
    Lease,
    LeaseBackendBase,
    LeaseRecord,
    Overlap,
    ReleaseOutcome,
    decide,
    decide_release,
    decide_renew,
)

from ._common import (
    WRONG_LAST_SEQUENCE,
    NatsConnection,
    Stored,
    as_ack,
    as_stored,
    check_name,
    check_replicas,
    encode_token,
    get_request,
    per_key,
    publish_request,
    request_joined,
    stream_get,
)

__all__ = ["NatsKVBackend"]

log = logging.getLogger("anarchon.nats")

_EXPECT = "Nats-Expected-Last-Subject-Sequence"
_KV_OP = "KV-Operation"
_ROUNDS = 8
"""Compare-and-set rounds per claim before answering TAKEN (each lost round means another claim won)."""
REPLICATED_EXPIRY_SLACK_MS = 1_000
"""How much later than the TTL the leader of a replicated bucket may age a lease entry out."""


class _Conflict(Exception):
    """A compare-and-set publish found another revision."""

    latest: Stored | None = None
    """The key's latest message, when it was read in the same step (it may predate that revision)."""


@dataclass(frozen=True, slots=True)
class _Held:
    """A lease this instance won or renewed: what it wrote, at which revisions (no read needed to end it)."""

    lease: Lease
    record: dict[str, Any]
    record_rev: int
    entry_rev: int
    entry_ms: int
    """The store time of the lease entry's revision `entry_rev`."""

    def matches(self, lease: Lease) -> bool:
        """True if `lease` is this one (its expiry aside)."""
        held = self.lease
        return (held.slot, held.attempt, held.token, held.owner) == (
            lease.slot, lease.attempt, lease.token, lease.owner)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A key's latest message; `value` is None for a delete marker or no message (then `last` is 0)."""

    value: dict[str, Any] | None
    last: int
    time_ms: int


@dataclass(slots=True, eq=False)
class _Claim:
    """One claim of a wave, as its rounds go: what was read and written, and its answer."""

    r: ClaimRequest
    key: str
    read: tuple[_Entry, _Entry] | None = None
    """The job's record and lease entry, read for this round."""
    result: ClaimResult | None = None
    error: Exception | None = None
    head: LeaseRecord | None = None
    token: int = 0
    first: LeaseRecord | None = None
    """The record the first decision would write."""
    entry_rev: int = 0
    """The revision of the lease entry this round wrote (0: none)."""
    entry_ms: int = 0
    record: dict[str, Any] | None = None
    won: ClaimResult | None = None
    known: bool = False
    """`read` is what this backend last knew of the job (`NatsKVBackend._known`), not a read of this
    claim: only a decision to write is taken on it, checked by the writes' compare-and-set."""


class NatsKVBackend(NatsConnection, LeaseBackendBase):
    """A lease backend on JetStream Key-Value: create, compare-and-set update, TTL expiry; wins are
    announced on a core NATS subject (no push of releases)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.CLAIM, Capability.LEASE, Capability.ANNOUNCE})
    url_schemes: ClassVar[tuple[str, ...]] = ("nats-kv", "nats-kv+tls")

    def __init__(
        self,
        servers_or_client: str | list[str] | Client,
        *,
        bucket: str = "anarchon",
        lease: Duration = "30s",
        timeout: Duration = "5s",
        replicas: int = 1,
    ) -> None:
        self.replicas = check_replicas(replicas)
        if isinstance(servers_or_client, str):
            servers_or_client = _plain_url(servers_or_client)
        elif isinstance(servers_or_client, list):
            servers_or_client = [_plain_url(s) for s in servers_or_client]
        self.bucket = check_name("bucket", bucket)
        self.state_bucket = f"{bucket}_state"
        check_name("bucket", self.state_bucket)
        self.lease_ms = parse_duration(lease, name="lease")
        if self.lease_ms < 100:
            raise ValueError(f"invalid lease {lease!r}: the bucket TTL must be at least 100ms")
        self._use_servers(servers_or_client, timeout,
                          {"bucket": bucket, "lease": lease, "replicas": replicas})
        self._held: dict[str, _Held] = {}
        """Per key, the lease this instance holds there, as it wrote it (one per job: claims of a job's
        next slot replace it, a release removes it)."""
        self._known: dict[str, tuple[_Entry, _Entry, float]] = {}
        """Per key this backend has claimed, the latest record and lease entry it knows of (read,
        written, or announced by the replica that released it), and when it learned them (monotonic s)."""
        self._hearing = False
        """Whether it listens to the releases other replicas announce (from its first claim on)."""

    @classmethod
    def from_url(cls, url: str) -> NatsKVBackend:
        """Build from `nats-kv://host:4222?bucket=anarchon&lease=30s&replicas=1` (`nats-kv+tls://` for
        TLS; `nats-kv://a:4222,b:4222,c:4222?replicas=3` on a cluster)."""
        parts = urlsplit(url)
        options: dict[str, Any] = dict(parse_qsl(parts.query))
        unknown = set(options) - {"bucket", "lease", "replicas"}
        if unknown:
            raise ValueError(
                f"unknown option(s) {sorted(unknown)} in the NATS KV URL: use bucket, lease or replicas")
        return cls(urlunsplit(parts._replace(query="")), **options)

    @property
    def fixed_lease_ms(self) -> int:
        """The one lease length this bucket allows (its TTL); claims and renews must ask for it."""
        return self.lease_ms

    @property
    def expiry_slack_ms(self) -> int:
        """How much later than its TTL a lease may end: on a replicated bucket the stream leader ages
        the lease entry out with a timer of its own (`REPLICATED_EXPIRY_SLACK_MS`), else 0."""
        return REPLICATED_EXPIRY_SLACK_MS if self.replicas > 1 else 0

    def key(self, namespace: str, job: str) -> str:
        """The key of one job in both buckets, with odd names hashed so the key is valid."""
        return f"{encode_token(namespace)}.{encode_token(job)}"

    # -- connecting ------------------------------------------------------------------------------

    async def _prepare(self) -> None:
        """Create both buckets, or check that existing ones have the expected TTL."""
        self._known.clear()
        self._hearing = False
        await self._ensure_bucket(self.bucket, self.lease_ms)
        await self._ensure_bucket(self.state_bucket, None)

    async def _ensure_bucket(self, bucket: str, ttl_ms: int | None) -> None:
        ttl = None if ttl_ms is None else ttl_ms / 1000
        with self._errors(f"open bucket {bucket!r} (is JetStream enabled?)"):
            info = await self._stream_or_create(StreamConfig(
                name=f"KV_{bucket}", subjects=[f"$KV.{bucket}.>"], max_msgs_per_subject=1,
                max_age=ttl, duplicate_window=min(120.0, ttl or 120.0), discard=DiscardPolicy.NEW,
                allow_rollup_hdrs=True, deny_delete=True, storage=StorageType.FILE,
                num_replicas=self.replicas,
                description="anarchon leases" if ttl_ms else "anarchon job records",
            ))
        have = round((info.config.max_age or 0) * 1000)
        if have != (ttl_ms or 0):
            fix = (f"use NatsKVBackend(bucket=..., lease='{have}ms') to match, another bucket, or delete it "
                   f"(`nats kv rm {bucket}`)") if ttl_ms else f"delete it (`nats kv rm {bucket}`)"
            raise SchemaMismatch(
                f"bucket {bucket!r} on {self.url} has TTL {have} ms, but this backend needs "
                f"{ttl_ms or 0} ms ({'the lease' if ttl_ms else 'none: records must not expire'}); {fix}"
            )

    # -- the primitives --------------------------------------------------------------------------

    @staticmethod
    def _get_request(bucket: str, key: str) -> tuple[str, bytes, None]:
        """The request that reads the key's latest message in `bucket`."""
        return get_request(f"KV_{bucket}", f"$KV.{bucket}.{key}")

    async def _get(self, bucket: str, key: str) -> _Entry:
        (reply,) = await request_joined(self.client, [get_request(f"KV_{bucket}", f"$KV.{bucket}.{key}")],
                                        self._timeout)
        return self._read(reply)

    @staticmethod
    def _entry_of(msg: Stored) -> _Entry:
        """A key's latest message as its entry."""
        if msg.headers.get(_KV_OP) in ("DEL", "PURGE"):
            return _Entry(None, msg.seq, msg.time_ms)
        return _Entry(json.loads(msg.data or b"{}"), msg.seq, msg.time_ms)

    async def _get_both(self, key: str) -> tuple[_Entry, _Entry]:
        """The key's record and its lease entry, both requests sent at once (one write, one wake-up).

        The two reads are no snapshot, sent one after the other or not: every decision that writes
        is checked by compare-and-set against the revisions read.
        """
        return (await self._read_keys([key]))[key]

    async def _read_keys(self, keys: Sequence[str]) -> dict[str, tuple[_Entry, _Entry]]:
        """Per key, its record and its lease entry (as `_get_both`), every request sent at once."""
        requests = []
        for key in keys:
            requests.append(get_request(f"KV_{self.state_bucket}", f"$KV.{self.state_bucket}.{key}"))
            requests.append(get_request(f"KV_{self.bucket}", f"$KV.{self.bucket}.{key}"))
        replies = [self._read(reply) for reply in await request_joined(self.client, requests, self._timeout)]
        return {key: (replies[2 * i], replies[2 * i + 1]) for i, key in enumerate(keys)}

    def _read(self, reply: Any) -> _Entry:
        """A read's reply as the key's entry (raises what the read raised)."""
        got = as_stored(reply)
        if isinstance(got, nats.js.errors.NotFoundError):
            return _Entry(None, 0, 0)
        if isinstance(got, Exception):
            raise got
        return self._entry_of(got)

    def _put_request(self, bucket: str, key: str, value: dict[str, Any] | None,
                     last: int) -> tuple[str, bytes, dict[str, str]]:
        """The request that writes `value` (None: a delete marker) only if the key's last revision is
        `last`."""
        headers = {_EXPECT: str(last)}
        if value is None:
            headers[_KV_OP] = "DEL"
        payload = b"" if value is None else json.dumps(value).encode()
        return publish_request(f"$KV.{bucket}.{key}", payload, headers, f"KV_{bucket}")

    @staticmethod
    def _written(reply: Any) -> int:
        """A write's reply as the revision written; `_Conflict` when the key had another revision."""
        ack = as_ack(reply)
        if isinstance(ack, nats.js.errors.APIError) and ack.err_code in WRONG_LAST_SEQUENCE:
            raise _Conflict from ack
        if isinstance(ack, Exception):
            raise ack
        return ack[0]

    async def _put(self, bucket: str, key: str, value: dict[str, Any] | None, last: int) -> int:
        """Write `value` (None: a delete marker) only if the key's last revision is `last`."""
        (reply,) = await request_joined(self.client, [self._put_request(bucket, key, value, last)],
                                     self._timeout)
        return self._written(reply)

    async def _put_timed(self, bucket: str, key: str, value: dict[str, Any], last: int) -> tuple[int, int]:
        """`_put`, and the store time of that write: (revision, epoch ms).

        The key's latest message is read in the same flush as the write. The server answers it after
        storing the write in practice (on one server); when it answered before, or with another
        revision, the write's own revision is read afterwards. Only a read of that revision gives
        the time, so the order of the two answers never matters to what is decided.
        """
        put, get = await request_joined(self.client, [
            self._put_request(bucket, key, value, last),
            get_request(f"KV_{bucket}", f"$KV.{bucket}.{key}")], self._timeout)
        read = as_stored(get)
        try:
            written = self._written(put)
        except _Conflict as exc:
            if isinstance(read, Stored):
                exc.latest = read
            raise
        if isinstance(read, Stored) and read.seq == written:
            return written, read.time_ms
        return written, await self._time_of(bucket, written)

    async def _time_of(self, bucket: str, seq: int) -> int:
        """The store's clock when revision `seq` was written, epoch ms."""
        return (await stream_get(self.client, f"KV_{bucket}", seq=seq, within=self._timeout)).time_ms

    # -- claim -------------------------------------------------------------------------------------

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim each slot by the claim table (see `LeaseBackend.claim`), with compare-and-set writes:
        one job's slots in order, different jobs in step with each other.

        A job's first request in the batch goes in the first wave, its second in the second, and so
        on. Within a wave every job's claim takes the same steps at once, each step one batch of
        requests: the reads of every job, then every lease entry's write, then every record's. A job
        whose state the backend knows (`_recall`) skips the reads when that state leads to a write.
        """
        for r in requests:
            self._check_claim(r)
        if not self._hearing:
            self._hearing = True
            try:
                with self._errors("listen to released leases"):
                    self._wins_subs.append(await self.client.subscribe(self._ended_subject(), cb=self._heard))
            except BaseException:
                self._hearing = False
                raise
        waves: list[list[int]] = []
        seen: dict[str, int] = {}
        for i, r in enumerate(requests):
            key = self.key(r.namespace, r.job)
            n = seen[key] = seen.get(key, -1) + 1
            if n == len(waves):
                waves.append([])
            waves[n].append(i)
        results: list[ClaimResult | None] = [None] * len(requests)
        try:
            for wave in waves:
                claims = [_Claim(requests[i], self.key(requests[i].namespace, requests[i].job)) for i in wave]
                with self._errors(f"claim {claims[0].r.job!r} slot {claims[0].r.slot}"):
                    await self._claim_wave(claims)
                for i, c in zip(wave, claims, strict=True):
                    results[i] = c.result
        finally:
            # Wins decided before a failure are announced too: they hold, failed batch or not.
            await self._announce(requests, results)
        return [r for r in results if r is not None]

    def _wins_subject(self, namespace: str) -> str:
        return f"_anarchon.KV_{self.bucket}.won.{encode_token(namespace)}"

    # -- what is known of each job ---------------------------------------------------------------

    def _ended_subject(self) -> str:
        """The core NATS subject of the bucket's announced releases (see `_announce_ended`)."""
        return f"_anarchon.KV_{self.bucket}.ended"

    def _remember(self, key: str, rec: _Entry, live: _Entry, *, newer_only: bool = False) -> None:
        """Keep `rec` and `live` as what is known of the job; with `newer_only`, only if they are newer
        revisions than the ones known."""
        known = self._known.get(key)
        if newer_only and (known is None or (rec.last, live.last) <= (known[0].last, known[1].last)):
            return
        self._known[key] = (rec, live, time.monotonic())

    def _recall(self, c: _Claim) -> None:
        """Take what is known of the claim's job as its read, if that is likely still the store's.

        A lease entry is taken only while it cannot have aged out (learned less than half a lease
        ago); an absent one, or a record, only a write replaces. Whatever is taken, the writes check
        it by compare-and-set: a stale one costs a round of fresh reads, never a wrong decision.
        """
        known = self._known.get(c.key)
        if known is None:
            return
        rec, live, learned = known
        if live.value is not None and time.monotonic() - learned > self.lease_ms / 2000:
            return
        c.read, c.known = (rec, live), True

    def _forget(self, key: str) -> None:
        self._known.pop(key, None)

    async def _heard(self, msg: Msg) -> None:
        """Releases announced by a replica (`_announce_ended`): newer revisions of known jobs."""
        try:
            items = json.loads(msg.data)
            for key, rec_rev, rec, entry_rev, entry, entry_ms in items:
                if key in self._known:
                    self._remember(key, _Entry(rec, int(rec_rev), int(entry_ms)),
                                   _Entry(entry, int(entry_rev), int(entry_ms)), newer_only=True)
        except Exception as exc:  # a malformed message only costs the reads it would have saved
            log.debug("ignored a malformed release announcement on %s: %s", msg.subject, exc)

    async def _announce_ended(self, ended: list[list[Any]]) -> None:
        """Publish the records that releases wrote, and the lease entries they left, for the next
        claims of those jobs to start from (at most once: a lost message costs a round of reads)."""
        try:
            payload = json.dumps(ended, separators=(",", ":")).encode()
            await self.client.publish(self._ended_subject(), payload)
        except Exception as exc:
            log.debug("could not announce %d release(s) on %s: %s", len(ended), self.url, exc)

    def _check_claim(self, r: ClaimRequest) -> None:
        self._check_lease(r.lease_ms, r.job)
        if r.overlap is Overlap.ALLOW:
            raise ConfigError(
                f"NatsKVBackend keeps one lease per job, so it cannot run slots of {r.job!r} side by side: "
                "overlap='allow' is not supported; use 'skip', 'buffer_one' or 'replace'"
            )

    def _check_lease(self, lease_ms: int, job: str) -> None:
        if lease_ms != self.lease_ms:
            raise ConfigError(
                f"job {job!r} asks for a {lease_ms} ms lease, but NatsKVBackend(bucket={self.bucket!r}) has "
                f"a fixed lease of {self.lease_ms} ms (the bucket's TTL): give the Scheduler and every job "
                f"lease='{self.lease_ms}ms', or use another bucket with NatsKVBackend(lease=...)"
            )

    async def _claim_wave(self, claims: list[_Claim]) -> None:
        """Answer claims of different jobs, each in read-decide-write rounds, all rounds in step.

        NATS tells the time only of a message it stored, so the table (`decide`) is applied twice:
        on the latest store time read, to learn whether to write at all, then, after the lease entry
        is written, on that entry's time, which also judges EARLY. The record is then written
        compare-and-set against the one read, so no two wins can take the same token. A claim whose
        compare-and-set lost reads again in the next round; after `_ROUNDS` it answers TAKEN.

        A request that fails (a timeout) fails its claim only; the others go on to their answers (so
        no other claim is left between its two writes), then the first failure is raised.
        """
        for c in claims:
            self._recall(c)
        for _ in range(_ROUNDS):
            open_ = [c for c in claims if c.result is None and c.error is None]
            if not open_:
                break
            for c in open_:
                if c.known and not self._plan(c):
                    c.read, c.known = None, False  # read afresh with the others, in this round
            await self._claim_reads([c for c in open_ if c.read is None])
            writing = [c for c in open_ if c.error is None and (c.known or self._plan(c))]
            if writing:
                await self._write_entries(writing)
                written = [c for c in writing if c.entry_rev]
                if written:
                    await self._write_records(written)
            for c in open_:
                c.read, c.known = None, False
        left = [c for c in claims if c.result is None and c.error is None]
        if left:
            replies = await request_joined(self.client, [self._get_request(self.bucket, c.key) for c in left],
                                           self._timeout)
            for c, reply in zip(left, replies, strict=True):
                try:
                    held = self._read(reply).value
                except Exception as exc:
                    c.error = exc
                    continue
                c.result = ClaimResult(ClaimOutcome.TAKEN, c.r.job, c.r.slot,
                                       holder=held.get("owner") if held else None)
        for c in claims:
            if c.error is not None:
                with self._errors(f"claim {c.r.job!r} slot {c.r.slot}"):
                    raise c.error

    async def _claim_reads(self, claims: list[_Claim]) -> None:
        """Read the record and the lease entry of each claim's job, all in one batch."""
        if not claims:
            return
        requests = []
        for c in claims:
            requests.append(self._get_request(self.state_bucket, c.key))
            requests.append(self._get_request(self.bucket, c.key))
        replies = await request_joined(self.client, requests, self._timeout)
        for i, c in enumerate(claims):
            try:
                c.read = (self._read(replies[2 * i]), self._read(replies[2 * i + 1]))
            except Exception as exc:
                c.error = exc
            else:
                self._remember(c.key, *c.read)

    def _plan(self, c: _Claim) -> bool:
        """Decide on the reads (the table on the latest store time read); True if the lease entry is to
        be written, else the claim is answered."""
        assert c.read is not None
        rec_entry, live = c.read
        held = live.value
        head = self._record(rec_entry, live)
        c.head, c.entry_rev, c.record = head, 0, None
        # On what was known (`c.known`), only a write is decided: any answer is given on fresh reads.
        if held and (head is None or head.expires_at == 0) and not self._ended(head, held):
            # A lease entry that does not match the record belongs to a claim still in flight (or one
            # that died between its two writes): it blocks every claim until it is gone or ages out.
            if not c.known:
                c.result = self._in_flight(c.r, live, held)
            return False
        c.token = 0 if head is None else head.token
        first = decide(head, c.r, max(rec_entry.time_ms, live.time_ms), token=c.token, check_early=False)
        if first.write is None:
            if not c.known:
                c.result = replace(first.result, now=None)  # a past store time, not the store's now
            return False
        c.first = first.write
        return True

    async def _write_entries(self, claims: list[_Claim]) -> None:
        """Write each claim's lease entry, each with a read of the key's latest message (the entry's
        store time when it is that revision, else the holder when another claim wrote first)."""
        requests: list[tuple[str, bytes, dict[str, str] | None]] = []
        for c in claims:
            assert c.read is not None and c.first is not None
            # Create the entry: last=0 (never written or aged out) or the revision read (a delete
            # marker, an entry a release left, or for overlap="replace" the live entry it revokes).
            requests.append(self._put_request(self.bucket, c.key, self._entry(c.first), c.read[1].last))
            requests.append(self._get_request(self.bucket, c.key))
        replies = await request_joined(self.client, requests, self._timeout)
        timeless: list[_Claim] = []
        for i, c in enumerate(claims):
            try:
                self._entry_written(c, replies[2 * i], replies[2 * i + 1], timeless)
            except Exception as exc:
                c.error = exc
        if timeless:
            # The read was answered before the write was stored: read the write's own revision.
            got = await request_joined(self.client, [get_request(f"KV_{self.bucket}", c.entry_rev)
                                                     for c in timeless], self._timeout)
            for c, reply in zip(timeless, got, strict=True):
                try:
                    c.entry_ms = self._stored(reply).time_ms
                except Exception as exc:
                    c.error = exc

    def _entry_written(self, c: _Claim, put: Any, get: Any, timeless: list[_Claim]) -> None:
        read = as_stored(get)
        try:
            c.entry_rev = self._written(put)
        except _Conflict:
            assert c.read is not None
            self._forget(c.key)
            # Most often another claim of this slot has just created the entry: its entry alone
            # answers, as while that claim is in flight. Anything else is decided on fresh reads,
            # and so is a claim on known state: the entry that replaced the known one may be long
            # ended (released, say), which only a fresh read of the record tells.
            if not c.known and isinstance(read, Stored) and read.seq != c.read[1].last:
                theirs = self._entry_of(read).value
                if (theirs and theirs.get("owner") != c.r.owner and int(theirs.get("slot", 0)) >= c.r.slot
                        and not self._ended(c.head, theirs)):
                    c.result = self._in_flight(c.r, self._entry_of(read), theirs)
            return
        if isinstance(read, Stored) and read.seq == c.entry_rev:
            c.entry_ms = read.time_ms
        else:
            timeless.append(c)

    async def _write_records(self, claims: list[_Claim]) -> None:
        """Decide each claim again on its lease entry's store time, then write its record (or delete
        the entry again), all in one batch; delete the entries of claims whose record lost."""
        requests: list[tuple[str, bytes, dict[str, str]]] = []
        recording: list[tuple[_Claim, bool]] = []  # per request, its claim and whether it writes the record
        for c in claims:
            if c.error is not None:
                continue
            assert c.first is not None
            decision = decide(c.head, c.r, c.entry_ms, token=c.token)
            w = decision.write
            if w is None or (w.slot, w.attempt, w.token) != (c.first.slot, c.first.attempt, c.first.token):
                requests.append(self._put_request(self.bucket, c.key, None, c.entry_rev))
                recording.append((c, False))
                self._forget(c.key)
                if w is None and not c.known:
                    c.result = decision.result
                continue
            assert c.read is not None
            c.record = {"slot": w.slot, "attempt": w.attempt, "token": w.token, "owner": w.owner,
                        "status": w.status.value, "fingerprint": w.fingerprint}
            c.won = decision.result
            requests.append(self._put_request(self.state_bucket, c.key, c.record, c.read[0].last))
            recording.append((c, True))
        if not requests:
            return
        replies = await request_joined(self.client, requests, self._timeout)
        drops: list[tuple[str, bytes, dict[str, str]]] = []
        dropping: list[_Claim] = []
        for (c, is_record), reply in zip(recording, replies, strict=True):
            try:
                if is_record:
                    if not self._recorded(c, reply):
                        drops.append(self._put_request(self.bucket, c.key, None, c.entry_rev))
                        dropping.append(c)
                else:
                    self._dropped(reply)
            except Exception as exc:
                c.error = exc
        if drops:
            dropped = await request_joined(self.client, drops, self._timeout)
            for c, reply in zip(dropping, dropped, strict=True):
                try:
                    self._dropped(reply)
                except Exception as exc:
                    c.error = exc

    def _recorded(self, c: _Claim, reply: Any) -> bool:
        """A record's write: the claim won, or (False) another wrote the record first."""
        try:
            record_rev = self._written(reply)
        except _Conflict:
            self._forget(c.key)
            return False
        assert c.won is not None and c.record is not None and c.first is not None
        won = c.won.lease
        if won is not None:
            self._held[c.key] = _Held(won, c.record, record_rev, c.entry_rev, won.expires_at - self.lease_ms)
        self._remember(c.key, _Entry(c.record, record_rev, c.entry_ms),
                       _Entry(self._entry(c.first), c.entry_rev, c.entry_ms))
        c.result = c.won
        return True

    def _dropped(self, reply: Any) -> None:
        """A drop's reply: another revision means something replaced the entry, which is left."""
        try:
            self._written(reply)
        except _Conflict:
            pass

    def _stored(self, reply: Any) -> Stored:
        got = as_stored(reply)
        if isinstance(got, Exception):
            raise got
        return got

    def _in_flight(self, r: ClaimRequest, live: _Entry, held: dict[str, Any]) -> ClaimResult:
        """The answer while another claim's lease entry `held` blocks the job: STALE behind a newer
        slot, else TAKEN until the entry ages out."""
        if int(held.get("slot", 0)) > r.slot:
            return ClaimResult(ClaimOutcome.STALE, r.job, r.slot, holder=held.get("owner"))
        return ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, holder=held.get("owner"),
                           expires_at=live.time_ms + self.lease_ms)

    def _record(self, entry: _Entry, live: _Entry) -> LeaseRecord | None:
        """The job's record as the lease rules see it: its lease runs until the lease entry's time plus
        the TTL while that entry is the record's own; otherwise it has expired (`expires_at` 0)."""
        rec = entry.value
        if rec is None:
            return None
        record = LeaseRecord(int(rec["slot"]), int(rec["attempt"]), int(rec.get("token", 0)),
                             str(rec["owner"]), JobStatus(rec["status"]), 0, str(rec.get("fingerprint", "")),
                             entry.time_ms)
        if record.status is JobStatus.RUNNING and live.value == self._entry(record):
            record = replace(record, expires_at=live.time_ms + self.lease_ms)
        return record

    @classmethod
    def _ended(cls, head: LeaseRecord | None, held: dict[str, Any]) -> bool:
        """True if the lease entry `held` is the one of a run the record `head` says has ended.

        A release of a lease this instance won leaves its entry to age out: the record alone ends
        the lease. No claim in flight writes such an entry (a claim writes a new slot or attempt),
        so a claim replaces it as if it were gone.
        """
        return head is not None and head.status is not JobStatus.RUNNING and held == cls._entry(head)

    @staticmethod
    def _entry(rec: LeaseRecord | Lease) -> dict[str, Any]:
        """The lease entry of a record or a lease."""
        return {"slot": rec.slot, "attempt": rec.attempt, "owner": rec.owner}

    async def _end_entry(self, key: str, lease: Lease, revision: int) -> None:
        """Delete the lease entry of `lease` (its own revision is probably `revision`); leave another's."""
        try:
            await self._put(self.bucket, key, None, revision)
            return
        except _Conflict:
            pass  # written again (by a renewal in flight) or gone
        live = await self._get(self.bucket, key)
        if live.value == self._entry(lease):
            await self._drop(key, live.last)

    async def _drop(self, key: str, revision: int) -> None:
        """Delete a lease entry this instance wrote at `revision`, unless something replaced it."""
        try:
            await self._put(self.bucket, key, None, revision)
        except _Conflict:
            pass

    # -- renew and release ---------------------------------------------------------------------

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew each lease (see `LeaseBackend.renew`) by writing its lease entry again, a full TTL.

        An entry that aged out is not created again: a lease that expired is lost, even when nobody
        took the slot over. A renewal whose write lands after the lease ended deletes that write.
        """
        return await per_key(renewals, lambda item: (item[0].namespace, item[0].job),
                             lambda item: self._renew(*item))

    async def _renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        self._check_lease(lease_ms, lease.job)
        key = self.key(lease.namespace, lease.job)
        with self._errors(f"renew {lease.job!r} slot {lease.slot}"):
            held = self._held.get(key)
            if held is not None and held.matches(lease):
                try:
                    written = await self._put_timed(self.bucket, key, self._entry(lease), held.entry_rev)
                except _Conflict:
                    pass  # the entry was replaced or aged out: decide on fresh reads
                else:
                    # The entry was still this lease's own revision, so the record was still its own.
                    return await self._renewed(key, lease, held, *written)
            entry, live = await self._get_both(key)
            if live.value is not None and live.value != self._entry(lease):
                return None  # another claim's entry, in flight
            rec = self._record(entry, live)
            if decide_renew(rec, lease, lease_ms, max(entry.time_ms, live.time_ms)).lease is None:
                return None
            try:
                written = await self._put_timed(self.bucket, key, self._entry(lease), live.last)
            except _Conflict:
                return None
            if rec is None or entry.value is None:
                return None  # not reached: decide_renew allowed it
            return await self._renewed(key, lease, _Held(lease, entry.value, entry.last, live.last,
                                                         rec.expires_at - self.lease_ms), *written)

    async def _renewed(self, key: str, lease: Lease, held: _Held, revision: int, now: int) -> Lease | None:
        """Judge a renewal written at `revision`, at store time `now`; remember it if it counts."""
        record = self._record(_Entry(held.record, held.record_rev, 0),
                              _Entry(self._entry(lease), held.entry_rev, held.entry_ms))
        renewed = decide_renew(record, lease, self.lease_ms, now).lease
        if renewed is None:
            if self._held.get(key) is held:
                del self._held[key]
            await self._drop(key, revision)  # written after the lease ended: it revives nothing
            return None
        current = self._held.get(key)
        if current is None or current is held or current.matches(lease):
            self._held[key] = _Held(lease, held.record, held.record_rev, revision, now)
        known = self._known.get(key)
        if known is not None and known[0].last == held.record_rev:
            self._remember(key, known[0], _Entry(self._entry(lease), revision, now))
        return renewed

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """Record each run's end (see `LeaseBackend.release`); one job's releases in order, different
        jobs concurrently.

        A release of a lease this backend won writes only the record, and leaves the lease entry to
        age out (a claim replaces an entry that matches an ended record); any other release reads
        both entries first, and deletes the lease entry after the record. When the batch has one
        release per job, the record writes of the leases this backend won go out as one batch of
        requests, with no task per release.
        """
        announce: list[list[Any]] = []
        keys = [self.key(lease.namespace, lease.job) for lease, _ in releases]
        results: list[bool | None] = [None] * len(releases)
        failures: list[tuple[Lease, Exception]] = []
        try:
            if len(set(keys)) == len(keys):
                await self._release_held(releases, keys, results, failures, announce)
            rest = [i for i, done in enumerate(results) if done is None]
            if rest:
                answers = await per_key([releases[i] for i in rest],
                                        lambda item: (item[0].namespace, item[0].job),
                                        lambda item: self._release(*item, announce))
                for i, answer in zip(rest, answers, strict=True):
                    results[i] = answer
        finally:
            if announce:
                await self._announce_ended(announce)
        for lease, exc in failures[:1]:
            with self._errors(f"release {lease.job!r} slot {lease.slot}"):
                raise exc
        return [bool(done) for done in results]

    async def _release_held(self, releases: Sequence[tuple[Lease, ReleaseOutcome]], keys: list[str],
                            results: list[bool | None], failures: list[tuple[Lease, Exception]],
                            announce: list[list[Any]]) -> None:
        """The releases of leases this backend won, one per job: every record's compare-and-set in one
        batch (see `_release`). One whose write found another revision is left undecided (None)."""
        sending: list[tuple[int, _Held, dict[str, Any]]] = []
        for i, ((lease, outcome), key) in enumerate(zip(releases, keys, strict=True)):
            held = self._held.get(key)
            if held is not None and held.matches(lease):
                del self._held[key]
                sending.append((i, held, {**held.record, "status": outcome.status.value}))
        if not sending:
            return
        replies = await request_joined(self.client, [
            self._put_request(self.state_bucket, keys[i], record, held.record_rev)
            for i, held, record in sending], self._timeout)
        for (i, held, record), reply in zip(sending, replies, strict=True):
            lease = releases[i][0]
            try:
                record_rev = self._written(reply)
            except _Conflict:
                self._forget(keys[i])  # changed since: decided on fresh reads (`_release`)
            except Exception as exc:
                self._forget(keys[i])
                results[i] = False
                failures.append((lease, exc))
            else:
                results[i] = True
                self._released(keys[i], lease, held, record, record_rev, announce)

    def _released(self, key: str, lease: Lease, held: _Held, record: dict[str, Any], record_rev: int,
                  announce: list[list[Any]]) -> None:
        """Remember, and announce, what the release of a lease this backend won wrote."""
        if lease.expires_at > held.entry_ms + self.lease_ms:
            # Renewed elsewhere since (on the keeper's connection): only that connection knows the
            # entry's revision now.
            self._forget(key)
            return
        left = self._entry(lease)
        self._remember(key, _Entry(record, record_rev, held.entry_ms),
                       _Entry(left, held.entry_rev, held.entry_ms))
        announce.append([key, record_rev, record, held.entry_rev, left, held.entry_ms])

    async def _release(self, lease: Lease, outcome: ReleaseOutcome, announce: list[list[Any]]) -> bool:
        key = self.key(lease.namespace, lease.job)
        with self._errors(f"release {lease.job!r} slot {lease.slot}"):
            held = self._held.get(key)
            if held is not None and held.matches(lease):
                del self._held[key]
                record = {**held.record, "status": outcome.status.value}
                try:
                    # The record is still the one this lease's claim wrote, so `decide_release`
                    # allows it (running, same token and owner). The lease entry is left to age
                    # out: it matches a record that has ended, so the next claim replaces it.
                    record_rev = await self._put(self.state_bucket, key, record, held.record_rev)
                except _Conflict:
                    self._forget(key)  # changed since: decide on fresh reads
                else:
                    self._released(key, lease, held, record, record_rev, announce)
                    return True
            self._forget(key)
            entry, live = await self._get_both(key)
            decision = decide_release(self._record(entry, live), lease, outcome,
                                      max(entry.time_ms, live.time_ms), newest=True)
            if decision.write is None or entry.value is None:
                return False
            try:
                ended = {**entry.value, "status": decision.write.status.value}
                await self._put(self.state_bucket, key, ended, entry.last)
            except _Conflict:
                return False
            if live.value == self._entry(lease):
                await self._end_entry(key, lease, live.last)
        return True


def _plain_url(url: str) -> str:
    """Turn `nats-kv://` into `nats://` and `nats-kv+tls://` into `tls://` for the client."""
    scheme, sep, rest = url.partition("://")
    mapped = {"nats-kv": "nats", "nats-kv+tls": "tls"}.get(scheme.lower(), scheme)
    return f"{mapped}{sep}{rest}"
