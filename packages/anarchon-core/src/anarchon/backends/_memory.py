"""In-process backends: the reference model of DESIGN §3 and §4.

`MemoryBackend` is what the conformance kit compares every driver against: its claims apply
`decide` (the state-machine table, in `_decide.py`) to records in a dict. Several backends over one
`MemoryStore` act as several connections to one store (several replicas in one process).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

from .._clock import Clock, SystemClock
from .._duration import Duration, parse_duration
from ._base import BackendBase
from ._decide import LeaseRecord, decide
from ._protocols import (
    Capability,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobState,
    JobStatus,
    Lease,
    ReleaseCallback,
    ReleaseOutcome,
)

__all__ = ["MemoryBackend", "MemoryClaimBackend", "MemoryStore"]


_ENDED = {
    ReleaseOutcome.DONE: JobStatus.DONE,
    ReleaseOutcome.FAILED: JobStatus.FAILED,
    ReleaseOutcome.HANDOVER: JobStatus.RELEASED,
}


@dataclass(slots=True)
class _Job:
    token: int = 0
    current: LeaseRecord | None = None
    # Older slots under overlap="allow" still running, or released for handover: kept so they can
    # be renewed or taken over. A new slot drops those no longer running.
    others: dict[int, LeaseRecord] = field(default_factory=dict)

    def put(self, rec: LeaseRecord) -> None:
        """Store `rec` in place of the record of its slot (the newest one, or an older one)."""
        if self.current is not None and self.current.slot == rec.slot:
            self.current = rec
        else:
            self.others[rec.slot] = rec


@dataclass(slots=True)
class _Subscription:
    namespace: str
    callback: ReleaseCallback
    loop: asyncio.AbstractEventLoop
    backend: object


class MemoryStore:
    """The shared state behind one or more in-process backends."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.lock = threading.Lock()
        self.jobs: dict[tuple[str, str], _Job] = {}
        self.gates: dict[tuple[str, str, int], tuple[str, int]] = {}
        self.subscriptions: list[_Subscription] = []
        self.calls = 0
        """Store operations served: the round trips a real store would see."""


class MemoryBackend(BackendBase):
    """The lease state machine of DESIGN §3 in process memory: the reference model.

    `notify=False` makes it behave like a backend without push, so backups poll.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.CLAIM, Capability.LEASE, Capability.NOTIFY, Capability.CLAIM_MANY, Capability.INSPECT,
         Capability.RELEASE_MANY, Capability.RENEW_MANY}
    )
    url_schemes: ClassVar[tuple[str, ...]] = ("memory",)

    def __init__(
        self, store: MemoryStore | None = None, *, clock: Clock | None = None, notify: bool = True
    ) -> None:
        self.store = store if store is not None else MemoryStore(clock)
        if clock is not None and store is not None and store.clock is not clock:
            raise ValueError("pass the clock to MemoryStore(clock=...) when sharing a store")
        self.notify = notify
        if not notify:
            self.capabilities = frozenset(self.capabilities - {Capability.NOTIFY})  # type: ignore[misc]

    @classmethod
    def from_url(cls, url: str) -> MemoryBackend:
        """`memory://` gives a fresh, private store."""
        return cls()

    def sibling(self) -> MemoryBackend:
        """A new backend on the same store: a second connection, for a lease keeper in another thread."""
        return MemoryBackend(self.store, notify=self.notify)

    @property
    def url(self) -> str:
        """A memory store has no address."""
        return "memory://"

    # -- the state machine -------------------------------------------------------------------

    def _now(self) -> int:
        return self.store.clock.now_ms()

    def _claim(self, r: ClaimRequest) -> ClaimResult:
        store = self.store
        store.calls += 1
        now = self._now()
        key = (r.namespace, r.job)
        job = store.jobs.get(key)
        head = None if job is None else job.current
        kept = None if job is None else job.others.get(r.slot)
        decision = decide(head, r, now, token=0 if job is None else job.token, kept=kept)
        write = decision.write
        if write is None:
            return decision.result
        job = store.jobs.setdefault(key, _Job())
        job.token = write.token
        if decision.new_slot:
            job.others = {s: o for s, o in job.others.items() if o.status is JobStatus.RUNNING}
            if decision.keep_previous and head is not None:
                job.others[head.slot] = head
            job.current = write
        else:
            job.put(write)
        return decision.result

    def _find(self, lease: Lease) -> tuple[_Job, LeaseRecord] | None:
        """The job and the running record `lease` still holds, if it does."""
        job = self.store.jobs.get((lease.namespace, lease.job))
        if job is None:
            return None
        rec = job.current if job.current and job.current.slot == lease.slot else job.others.get(lease.slot)
        if (rec is None or rec.token != lease.token or rec.owner != lease.owner
                or rec.status is not JobStatus.RUNNING):
            return None
        return job, rec

    # -- the protocol --------------------------------------------------------------------------

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Claim one slot (see `LeaseBackend.claim`)."""
        with self.store.lock:
            return self._claim(request)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch under one lock acquisition: one 'round trip'."""
        with self.store.lock:
            self.store.calls += 1 - len(requests)
            return [self._claim(r) for r in requests]

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        """Extend a lease still owned by its holder (see `LeaseBackend.renew`)."""
        return (await self.renew_many([(lease, lease_ms)]))[0]

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Extend a batch of leases in one call (see `RenewManyBackend.renew_many`)."""
        results: list[Lease | None] = []
        with self.store.lock:
            self.store.calls += 1
            now = self._now()
            for lease, lease_ms in renewals:
                found = self._find(lease)
                if found is None:
                    results.append(None)
                    continue
                job, rec = found
                job.put(replace(rec, expires_at=now + lease_ms, updated_at=now))
                results.append(Lease(lease.namespace, lease.job, lease.slot, lease.attempt, lease.token,
                                     lease.owner, now + lease_ms))
        return results

    async def release(self, lease: Lease, outcome: ReleaseOutcome) -> bool:
        """End a run (see `LeaseBackend.release`), and push it to subscribers."""
        return (await self.release_many([(lease, outcome)]))[0]

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End a batch of runs in one call (see `ReleaseManyBackend.release_many`)."""
        results: list[bool] = []
        pushed: list[Lease] = []
        with self.store.lock:
            self.store.calls += 1
            now = self._now()
            for lease, outcome in releases:
                found = self._find(lease)
                if found is None:
                    results.append(False)
                    continue
                job, rec = found
                if rec is not job.current and outcome is not ReleaseOutcome.HANDOVER:
                    # An older slot kept under overlap=allow that is over: forget it. One handed
                    # over stays (released) for a backup to take over, until a newer slot starts.
                    del job.others[rec.slot]
                else:
                    job.put(replace(rec, status=_ENDED[outcome], updated_at=now))
                results.append(True)
                if outcome is ReleaseOutcome.HANDOVER:
                    pushed.append(lease)
            subscriptions = list(self.store.subscriptions)
        if self.notify:
            for lease in pushed:
                for sub in subscriptions:
                    if sub.namespace == lease.namespace and not sub.loop.is_closed():
                        sub.loop.call_soon_threadsafe(sub.callback, lease.job, lease.slot)
        return results

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Read one job's newest record."""
        with self.store.lock:
            self.store.calls += 1
            entry = self.store.jobs.get((namespace, job))
            if entry is None or entry.current is None:
                return None
            return self._state(namespace, job, entry.current)

    async def jobs(self, namespace: str) -> list[JobState]:
        """Read every job's newest record in a namespace."""
        with self.store.lock:
            self.store.calls += 1
            return [
                self._state(ns, name, entry.current)
                for (ns, name), entry in sorted(self.store.jobs.items())
                if ns == namespace and entry.current is not None
            ]

    def _state(self, namespace: str, job: str, rec: LeaseRecord) -> JobState:
        return JobState(
            namespace, job, rec.slot, rec.attempt, rec.token, rec.owner, rec.status,
            rec.expires_at, rec.fingerprint, rec.updated_at, self._now(),
        )

    async def subscribe(self, namespace: str, callback: ReleaseCallback) -> None:
        """Push releases in `namespace` to `callback` (only when `notify` is on)."""
        with self.store.lock:
            self.store.subscriptions.append(
                _Subscription(namespace, callback, asyncio.get_running_loop(), self)
            )

    async def close(self) -> None:
        """Drop this connection's subscriptions."""
        with self.store.lock:
            self.store.subscriptions = [s for s in self.store.subscriptions if s.backend is not self]


class MemoryClaimBackend(BackendBase):
    """A claim-only in-process backend (DESIGN §4): one winner per (job, slot), nothing more."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM, Capability.CLAIM_MANY})
    url_schemes: ClassVar[tuple[str, ...]] = ("memory-claim",)

    def __init__(
        self, store: MemoryStore | None = None, *, clock: Clock | None = None,
        horizon: Duration | None = None,
    ) -> None:
        self.store = store if store is not None else MemoryStore(clock)
        self._horizon = None if horizon is None else parse_duration(horizon, name="horizon")

    @classmethod
    def from_url(cls, url: str) -> MemoryClaimBackend:
        """`memory-claim://` gives a fresh, private store."""
        return cls()

    @property
    def url(self) -> str:
        """A memory store has no address."""
        return "memory-claim://"

    @property
    def horizon_ms(self) -> int | None:
        """The configured dedupe horizon (None: remembers every claim)."""
        return self._horizon

    def _claim(self, r: ClaimRequest) -> ClaimResult:
        now = self.store.clock.now_ms()
        key = (r.namespace, r.job, r.slot)
        if self._horizon is not None:
            # Forget gates past the horizon, as a real store's expiry would.
            entry = self.store.gates.get(key)
            if entry is not None and now - entry[1] >= self._horizon:
                del self.store.gates[key]
        entry = self.store.gates.get(key)
        if entry is not None:
            return ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, holder=entry[0], attempt=1, now=now)
        self.store.gates[key] = (r.owner, now)
        lease = Lease(r.namespace, r.job, r.slot, 1, 0, r.owner, 0)
        return ClaimResult(ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=r.owner, attempt=1, now=now)

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """One winner per (namespace, job, slot) within the horizon."""
        with self.store.lock:
            self.store.calls += 1
            return self._claim(request)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch in one 'round trip'."""
        with self.store.lock:
            self.store.calls += 1
            return [self._claim(r) for r in requests]
