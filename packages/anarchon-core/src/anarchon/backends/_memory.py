"""In-process backends: the reference models of a lease backend and of a claim-only one.

`MemoryBackend` is what the conformance kit compares every driver against: it applies the lease
rules (`decide`, `decide_renew`, `decide_release`, in `_decide.py`) to records in a dict. Several
backends over one `MemoryStore` act as several connections to one store (several replicas in one
process).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Generic, Literal, TypeVar

from .._clock import Clock, SystemClock
from .._duration import Duration, parse_duration
from .._speed import STATUS_RUNNING as _RUNNING
from ._base import BackendBase, LeaseBackendBase, check_expect, check_schedule_batch
from ._decide import decide, decide_release, decide_renew
from ._protocols import (
    CONTROLS_CHANGED,
    ERROR_LIMIT,
    SCHEDULES_CHANGED,
    Capability,
    CatalogueEntry,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobControl,
    JobState,
    Lease,
    LeaseRecord,
    ReleaseCallback,
    ReleaseOutcome,
    RunRecord,
    ScheduleRecord,
    ScheduleWrite,
    ScheduleWriteResult,
    WinsCallback,
    schedule_partition,
)

__all__ = ["MemoryBackend", "MemoryClaimBackend", "MemoryStore"]


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

    def get(self, slot: int) -> LeaseRecord | None:
        """The record of `slot`: the newest one, or an older one kept under overlap=allow."""
        if self.current is not None and self.current.slot == slot:
            return self.current
        return self.others.get(slot)


_C = TypeVar("_C", ReleaseCallback, WinsCallback)


@dataclass(slots=True)
class _Subscription(Generic[_C]):
    namespace: str
    callback: _C
    loop: asyncio.AbstractEventLoop
    backend: object


class MemoryStore:
    """The shared state behind one or more in-process backends."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.lock = threading.Lock()
        self.jobs: dict[tuple[str, str], _Job] = {}
        self.gates: dict[tuple[str, str, int], tuple[str, int]] = {}
        self.subscriptions: list[_Subscription[ReleaseCallback]] = []
        self.win_subscriptions: list[_Subscription[WinsCallback]] = []
        self.controls: dict[tuple[str, str], JobControl] = {}
        self.catalogue: dict[tuple[str, str, str], tuple[CatalogueEntry, int]] = {}
        """(namespace, job, instance) -> (entry, expires_at in store time)."""
        self.history: dict[tuple[str, str], dict[tuple[int, int], RunRecord]] = {}
        """(namespace, job) -> {(slot, attempt): run}, at most `keep` runs each."""
        self.schedules: dict[str, dict[str, ScheduleRecord]] = {}
        """namespace -> {id: stored schedule}."""
        self.schedule_versions: dict[str, int] = {}
        """namespace -> its change counter."""
        self.calls = 0
        """Store operations served: the round trips a real store would see."""


class MemoryBackend(LeaseBackendBase):
    """The lease state machine in process memory: the reference model.

    `notify=False` makes it behave like a backend without push, so backups poll; `announce=False`
    like one that does not push wins, so every replica claims every slot.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.CLAIM, Capability.LEASE, Capability.NOTIFY, Capability.INSPECT, Capability.CONTROL,
         Capability.HISTORY, Capability.ANNOUNCE, Capability.FORGET, Capability.SCHEDULES}
    )
    url_schemes: ClassVar[tuple[str, ...]] = ("memory",)

    def __init__(
        self, store: MemoryStore | None = None, *, clock: Clock | None = None, notify: bool = True,
        announce: bool = True,
    ) -> None:
        self.store = store if store is not None else MemoryStore(clock)
        if clock is not None and store is not None and store.clock is not clock:
            raise ValueError("pass the clock to MemoryStore(clock=...) when sharing a store")
        self.notify = notify
        self.announce = announce
        off = {c for c, on in ((Capability.NOTIFY, notify), (Capability.ANNOUNCE, announce)) if not on}
        if off:
            self.capabilities = frozenset(self.capabilities - off)  # type: ignore[misc]

    @classmethod
    def from_url(cls, url: str) -> MemoryBackend:
        """`memory://` gives a fresh, private store."""
        return cls()

    def sibling(self) -> MemoryBackend:
        """A new backend on the same store: a second connection, for a lease keeper in another thread."""
        return MemoryBackend(self.store, notify=self.notify, announce=self.announce)

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
            if job.others:
                job.others = {s: o for s, o in job.others.items() if o.status is _RUNNING}
            if decision.keep_previous and head is not None:
                job.others[head.slot] = head
            job.current = write
        else:
            job.put(write)
        return decision.result

    # -- the protocol --------------------------------------------------------------------------

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch under one lock acquisition: one 'round trip' (see `LeaseBackend.claim`)."""
        with self.store.lock:
            self.store.calls += 1 - len(requests)
            results = [self._claim(r) for r in requests]
            subscriptions = list(self.store.win_subscriptions) if self.announce else []
        if subscriptions:
            # One push per (namespace, owner) of the batch, as a store pushes a batch's wins.
            wins: dict[tuple[str, str], list[tuple[str, int]]] = {}
            for r, result in zip(requests, results, strict=True):
                if result.lease is not None and not result.reissued:
                    wins.setdefault((r.namespace, r.owner), []).append((r.job, r.slot))
            for (namespace, owner), won in wins.items():
                for sub in subscriptions:
                    if sub.namespace == namespace and not sub.loop.is_closed():
                        sub.loop.call_soon_threadsafe(sub.callback, owner, won)
        return results

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew a batch of leases in one call (see `LeaseBackend.renew`)."""
        results: list[Lease | None] = []
        with self.store.lock:
            self.store.calls += 1
            now = self._now()
            for lease, lease_ms in renewals:
                job = self.store.jobs.get((lease.namespace, lease.job))
                decision = decide_renew(None if job is None else job.get(lease.slot), lease, lease_ms, now)
                if job is not None and decision.write is not None:
                    job.put(decision.write)
                results.append(decision.lease)
        return results

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End a batch of runs in one call (see `LeaseBackend.release`), and push handovers."""
        results: list[bool] = []
        pushed: list[Lease] = []
        with self.store.lock:
            self.store.calls += 1
            now = self._now()
            for lease, outcome in releases:
                job = self.store.jobs.get((lease.namespace, lease.job))
                rec = None if job is None else job.get(lease.slot)
                decision = decide_release(rec, lease, outcome, now,
                                          newest=job is not None and rec is job.current)
                if job is not None and decision.forget:
                    del job.others[lease.slot]
                elif job is not None and decision.write is not None:
                    job.put(decision.write)
                results.append(decision.released)
                if decision.push:
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
        return JobState.of(rec, namespace=namespace, job=job, now=self._now())

    async def set_control(self, namespace: str, job: str, *, paused: bool | None = None,
                          trigger: bool = False) -> JobControl:
        """Set a job's paused flag and/or issue a trigger, and push the change (see `ControlBackend`)."""
        with self.store.lock:
            self.store.calls += 1
            key = (namespace, job)
            old = self.store.controls.get(key, JobControl())
            new = JobControl(
                paused=old.paused if paused is None else paused,
                trigger=max(self._now(), old.trigger + 1) if trigger else old.trigger,
            )
            self.store.controls[key] = new
            subscriptions = list(self.store.subscriptions)
        if self.notify:
            for sub in subscriptions:
                if sub.namespace == namespace and not sub.loop.is_closed():
                    sub.loop.call_soon_threadsafe(sub.callback, job, CONTROLS_CHANGED)
        return new

    async def controls(self, namespace: str) -> dict[str, JobControl]:
        """Read every controlled job's controls in a namespace."""
        with self.store.lock:
            self.store.calls += 1
            return {job: c for (ns, job), c in self.store.controls.items() if ns == namespace}

    async def publish_catalogue(self, namespace: str, entries: Sequence[CatalogueEntry], ttl_ms: int) -> None:
        """Upsert one entry per (job, instance), stamped with store time (see `HistoryBackend`)."""
        with self.store.lock:
            self.store.calls += 1
            now = self._now()
            catalogue = self.store.catalogue
            for key in [k for k, (_e, expires) in catalogue.items() if expires <= now]:
                del catalogue[key]
            for entry in entries:
                stamped = replace(entry, options=dict(entry.options), seen_at=now)
                catalogue[(namespace, entry.job, entry.instance)] = (stamped, now + ttl_ms)

    async def catalogue(self, namespace: str) -> list[CatalogueEntry]:
        """Every live entry in a namespace, by job then instance."""
        with self.store.lock:
            self.store.calls += 1
            now = self._now()
            return [
                replace(entry, options=dict(entry.options))
                for (ns, _job, _instance), (entry, expires) in sorted(self.store.catalogue.items())
                if ns == namespace and expires > now
            ]

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        """Append ended runs; each job keeps its newest `keep` (see `HistoryBackend`)."""
        with self.store.lock:
            self.store.calls += 1
            touched: set[str] = set()
            for run in runs:
                kept = self.store.history.setdefault((namespace, run.job), {})
                short = len(run.error) <= ERROR_LIMIT  # (frozen: kept as it is unless cut)
                kept[(run.slot, run.attempt)] = run if short else replace(run, error=run.error[:ERROR_LIMIT])
                touched.add(run.job)
            for job in touched:
                kept = self.store.history[(namespace, job)]
                if len(kept) > keep:
                    for key in sorted(kept)[:len(kept) - keep]:
                        del kept[key]

    async def history(self, namespace: str, job: str, limit: int) -> list[RunRecord]:
        """A job's newest runs, newest first, at most `limit`."""
        with self.store.lock:
            self.store.calls += 1
            kept = self.store.history.get((namespace, job), {})
            return [kept[key] for key in sorted(kept, reverse=True)[:max(limit, 0)]]

    async def forget(self, namespace: str, job: str) -> bool:
        """Delete everything kept of `job` in `namespace` (see `ForgetBackend`)."""
        with self.store.lock:
            self.store.calls += 1
            key = (namespace, job)
            found = [self.store.jobs.pop(key, None), self.store.controls.pop(key, None),
                     self.store.history.pop(key, None)]
            entries = [k for k in self.store.catalogue if k[:2] == key]
            for k in entries:
                del self.store.catalogue[k]
            return bool(entries) or any(f is not None for f in found)

    async def namespaces(self) -> list[str]:
        """Every namespace that holds anything."""
        with self.store.lock:
            self.store.calls += 1
            now = self._now()
            held = {ns for ns, _ in self.store.jobs} | {ns for ns, _ in self.store.controls}
            held |= {ns for ns, _ in self.store.history}
            held |= {ns for ns, kept in self.store.schedules.items() if kept}
            held |= {ns for (ns, _, _), (_, expires) in self.store.catalogue.items() if expires > now}
            return sorted(held)

    # -- schedules as data -------------------------------------------------------------------------

    async def put_schedule(self, namespace: str, write: ScheduleWrite, *,
                           expect: int | Literal["absent", "any"]) -> ScheduleWriteResult:
        """Write a schedule by `expect` (see `ScheduleBackend.put_schedule`)."""
        check_expect(expect)
        with self.store.lock:
            self.store.calls += 1
            return self._put_schedule(namespace, write, expect, self._now())

    async def put_schedules(self, namespace: str, writes: Sequence[ScheduleWrite], *,
                            expect: Literal["absent", "any"]) -> list[ScheduleWriteResult]:
        """Write many schedules, each judged alone, in order, in one step (see
        `ScheduleBackend.put_schedules`)."""
        check_schedule_batch(writes, expect)
        if not writes:
            return []
        with self.store.lock:
            self.store.calls += 1
            now = self._now()
            return [self._put_schedule(namespace, write, expect, now) for write in writes]

    def _put_schedule(self, namespace: str, write: ScheduleWrite, expect: int | Literal["absent", "any"],
                      now: int) -> ScheduleWriteResult:
        """One write by `expect`, under the store's lock."""
        kept = self.store.schedules.setdefault(namespace, {})
        current = kept.get(write.id)
        if (expect == "absent" and current is not None) or (
                isinstance(expect, int) and (current is None or current.version != expect)):
            return ScheduleWriteResult(False, current)
        version = self._schedules_changed(namespace, write.id)
        record = ScheduleRecord(
            write.id, write.task, write.spec, write.args, write.options, write.paused, write.next_due,
            version=version, created_at=now if current is None else current.created_at, updated_at=now)
        kept[write.id] = record
        return ScheduleWriteResult(True, record)

    async def remove_schedule(self, namespace: str, schedule_id: str, *, expect: int | None = None
                              ) -> ScheduleWriteResult:
        """Remove a schedule (see `ScheduleBackend.remove_schedule`)."""
        with self.store.lock:
            self.store.calls += 1
            kept = self.store.schedules.get(namespace, {})
            current = kept.get(schedule_id)
            if current is None or (expect is not None and current.version != expect):
                return ScheduleWriteResult(False, current)
            del kept[schedule_id]
            self._schedules_changed(namespace, schedule_id)
            return ScheduleWriteResult(True, current)

    def _schedules_changed(self, namespace: str, schedule_id: str) -> int:
        """Bump the namespace's change counter and push the change (under the store's lock); return the
        counter's new value."""
        version = self.store.schedule_versions[namespace] = self.store.schedule_versions.get(namespace, 0) + 1
        if self.notify:
            for sub in self.store.subscriptions:
                if sub.namespace == namespace and not sub.loop.is_closed():
                    sub.loop.call_soon_threadsafe(sub.callback, schedule_id, SCHEDULES_CHANGED)
        return version

    async def get_schedules(self, namespace: str, ids: Sequence[str]) -> list[ScheduleRecord | None]:
        """The schedules with these ids, in order."""
        with self.store.lock:
            self.store.calls += 1
            kept = self.store.schedules.get(namespace, {})
            return [kept.get(i) for i in ids]

    async def list_schedules(self, namespace: str, *, after: str = "", limit: int, task: str | None = None,
                             prefix: str = "") -> list[ScheduleRecord]:
        """A page of schedules by id (see `ScheduleBackend.list_schedules`)."""
        with self.store.lock:
            self.store.calls += 1
            kept = self.store.schedules.get(namespace, {})
            page = sorted(r for r in kept if r > after and r.startswith(prefix)
                          and (task is None or kept[r].task == task))[:max(limit, 0)]
            return [kept[r] for r in page]

    async def due_schedules(self, namespace: str, *, until: int, tasks: Sequence[str] | None = None,
                            partitions: Sequence[int] | None = None, after: tuple[int, str] | None = None,
                            limit: int) -> list[ScheduleRecord]:
        """A page of the due index (see `ScheduleBackend.due_schedules`)."""
        with self.store.lock:
            self.store.calls += 1
            kept = self.store.schedules.get(namespace, {})
            wanted = None if tasks is None else set(tasks)
            parts = None if partitions is None else set(partitions)
            due = sorted((r.next_due, r.id) for r in kept.values()
                         if r.next_due is not None and r.next_due <= until
                         and (wanted is None or r.task in wanted)
                         and (parts is None or schedule_partition(r.id) in parts))
            page = [key for key in due if after is None or key > after][:max(limit, 0)]
            return [kept[schedule_id] for _, schedule_id in page]

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        """Move schedules forward in the due index (see `ScheduleBackend.advance_schedules`)."""
        with self.store.lock:
            self.store.calls += 1
            kept = self.store.schedules.get(namespace, {})
            for schedule_id, version, next_due in moves:
                current = kept.get(schedule_id)
                if current is None or current.version != version or current.next_due is None:
                    continue
                if next_due is None or next_due > current.next_due:
                    kept[schedule_id] = replace(current, next_due=next_due)

    async def schedules_version(self, namespace: str) -> int:
        """The namespace's change counter."""
        with self.store.lock:
            self.store.calls += 1
            return self.store.schedule_versions.get(namespace, 0)

    async def subscribe(self, namespace: str, callback: ReleaseCallback) -> None:
        """Push releases in `namespace` to `callback` (only when `notify` is on)."""
        with self.store.lock:
            self.store.subscriptions.append(
                _Subscription(namespace, callback, asyncio.get_running_loop(), self)
            )

    async def subscribe_wins(self, namespace: str, callback: WinsCallback) -> None:
        """Push the claims won in `namespace` to `callback` (only when `announce` is on)."""
        with self.store.lock:
            self.store.win_subscriptions.append(
                _Subscription(namespace, callback, asyncio.get_running_loop(), self)
            )

    async def close(self) -> None:
        """Drop this connection's subscriptions."""
        with self.store.lock:
            self.store.subscriptions = [s for s in self.store.subscriptions if s.backend is not self]
            self.store.win_subscriptions = [s for s in self.store.win_subscriptions if s.backend is not self]


class MemoryClaimBackend(BackendBase):
    """A claim-only in-process backend: one winner per (job, slot) within the horizon, nothing more."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM})
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

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch in one 'round trip'."""
        with self.store.lock:
            self.store.calls += 1
            return [self._claim(r) for r in requests]
