"""Read and control the jobs of a namespace from any process, whether a scheduler runs there or not.

The `anarchon` command and the status page (anarchon-dashboard) are built on this module; so can an
admin endpoint of your own:

    from anarchon.inspect import Inspector

    async def report() -> None:
        async with Inspector("sqlite:///jobs.db", namespace="myapp") as jobs:
            overview = await jobs.overview()
            for job in overview.jobs:
                print(job.name, job.status, job.paused, job.next_slot, job.last_outcome)
            await jobs.pause("nightly-report")

`Inspector` takes a store's URL (any installed driver) or a backend object. What it can show depends on
the store's capabilities: records need `inspect`, pauses and triggers `control`, schedules, replicas and
runs `history`. A part the store cannot feed is left out, and `Overview.notes` says why.

A job is what the store knows of it: the replicas that register it (the catalogue each publishes), its
lease record, its controls and its runs. Schedules kept in the store are a second kind of job
(`JobView.origin` is `"schedule"`, `JobView.stored` the schedule); `Overview.tasks` names the live
replicas of each task, and `Overview.orphans` the stored schedules whose task no live replica has.
`Inspector._jobs_of` is the one place that gathers a namespace's jobs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, cast

from ._context import TRIGGER_SUFFIX
from ._controls import trigger_key
from ._errors import ConfigError, JobRegistered, UnknownJob
from ._history import CATALOGUE_TTL_MS, next_slot_of, schedule_of
from ._job import check_name
from ._plugins import backend_for_url
from ._schedules import Every, Schedule
from ._stored import StoredSchedule, public
from .backends import (
    Capability,
    CatalogueEntry,
    ControlBackend,
    ForgetBackend,
    HistoryBackend,
    InspectBackend,
    JobControl,
    JobState,
    JobStatus,
    RunRecord,
    ScheduleBackend,
    redact_url,
)

__all__ = [
    "MISSED",
    "MISSED_WINDOW_MS",
    "RUNS_READ",
    "TRIGGER_SUFFIX",
    "Inspector",
    "JobView",
    "Overview",
    "trigger_key",
]

MISSED = "missed"
"""The outcome of a history entry for a slot that no replica ran (see docs/operations.md)."""
MISSED_WINDOW_MS = 86_400_000
"""How far back `JobView.missed` counts missed slots unless told otherwise: one day."""
RUNS_READ = 25
"""How many of each job's newest history entries an overview reads unless told otherwise."""
SCHEDULES_READ = 1000
"""How many stored schedules (the first by id) an overview reads."""


@dataclass(frozen=True, slots=True)
class JobView:
    """Everything the store knows of one job, read at one time."""

    name: str
    namespace: str
    now: int
    """The time of the read, epoch ms (the store's, where its records tell it)."""
    origin: Literal["code", "schedule"] = "code"
    """Where the job is defined: `code` (registered by replicas) or `schedule` (kept in the store)."""
    record: JobState | None = None
    """Its newest lease record; None when no slot was ever claimed (or the store keeps none)."""
    trigger_record: JobState | None = None
    """The record of its newest claimed trigger, if any."""
    control: JobControl = field(default_factory=JobControl)
    """Its cluster-wide controls: paused, and the id of its newest trigger."""
    entries: tuple[CatalogueEntry, ...] = ()
    """One registration per live replica that registers it (schedule, options, next slot)."""
    runs: tuple[RunRecord, ...] = ()
    """Its newest history entries, newest first: runs, trigger runs (`RunRecord.job` ends with
    `TRIGGER_SUFFIX`) and missed slots (outcome `missed`)."""
    missed_window_ms: int = MISSED_WINDOW_MS
    stored: StoredSchedule | None = None
    """The stored schedule, for a job of origin `schedule`."""
    task_live: bool = True
    """For a stored schedule: whether a live replica has registered its task (else no one claims it)."""

    @property
    def paused(self) -> bool:
        """True while the job is paused on every replica (its controls, or a stored schedule's flag)."""
        return self.control.paused or (self.stored is not None and self.stored.paused)

    @property
    def pending_trigger(self) -> bool:
        """True when a trigger was issued that no replica has claimed yet."""
        claimed = self.trigger_record.slot if self.trigger_record is not None else 0
        return self.control.trigger > claimed

    @property
    def status(self) -> str:
        """Its record's status (running, done, failed, released), or `never run`."""
        return "never run" if self.record is None else str(self.record.status)

    @property
    def holder(self) -> str | None:
        """The instance that runs it now under a live lease, if any."""
        r = self.record
        return r.owner if r is not None and r.status is JobStatus.RUNNING and r.expires_at > r.now else None

    @property
    def instances(self) -> list[str]:
        """The live replicas that register it."""
        return [e.instance for e in self.entries]

    @property
    def entry(self) -> CatalogueEntry | None:
        """One of its registrations (during a rolling deploy replicas may differ; the last one listed)."""
        return self.entries[-1] if self.entries else None

    @property
    def schedule(self) -> str | None:
        """Its schedule in words, e.g. "every 10s", as a replica published it or the store keeps it."""
        if self.stored is not None:
            return self.stored.description
        return None if self.entry is None else self.entry.schedule

    def _schedule(self) -> Schedule | None:
        """The stored schedule's, or the one a registration's fingerprint names (the last one listed)."""
        if self.stored is not None:
            return self.stored.schedule
        found = next((e.fingerprint for e in reversed(self.entries) if e.fingerprint), "")
        return schedule_of(found) if found else None

    @property
    def every_ms(self) -> int | None:
        """The interval of an `every` schedule, None for any other."""
        found = self._schedule()
        return found.interval_ms if isinstance(found, Every) else None

    @property
    def next_slot(self) -> int | None:
        """Its next slot after `now` (the earliest the replicas publish, or the stored schedule's)."""
        if self.stored is not None:
            return None if self.stored.paused else self.stored.schedule.next_slot(self.now)
        found = [n for n in (next_slot_of(e, self.now) for e in self.entries) if n is not None]
        return min(found, default=None)

    def upcoming(self, n: int) -> list[int]:
        """Its next `n` slots after `now`, computed from the published schedule ([] when unknown)."""
        schedule = self._schedule()
        slots: list[int] = []
        after = self.now
        while schedule is not None and len(slots) < n:
            slot = schedule.next_slot(after)
            if slot is None:
                break
            slots.append(slot)
            after = slot
        if not slots and n > 0 and self.next_slot is not None:
            slots.append(self.next_slot)
        return slots

    @property
    def last_run(self) -> RunRecord | None:
        """Its newest run that ended (done, failed, handover or lost), triggers included."""
        return next((r for r in self.runs if r.outcome != MISSED), None)

    @property
    def last_success(self) -> RunRecord | None:
        """Its newest run that ended `done`, among the runs read."""
        return next((r for r in self.runs if r.outcome == "done"), None)

    @property
    def last_success_at(self) -> int | None:
        """When its newest successful run ended, epoch ms (None when none is among the runs read)."""
        run = self.last_success
        return None if run is None else run.started_at + run.duration_ms

    @property
    def missed(self) -> int:
        """Slots that no replica ran within `missed_window_ms` before `now`, among the entries read."""
        since = self.now - self.missed_window_ms
        return sum(1 for r in self.runs if r.outcome == MISSED and r.slot >= since)


@dataclass(frozen=True, slots=True)
class Overview:
    """Every job of a namespace, as read in one pass."""

    namespace: str
    store: str
    """The store's URL, password redacted."""
    now: int
    """The time of the read, epoch ms (the store's, where its records tell it)."""
    capabilities: frozenset[Capability]
    jobs: tuple[JobView, ...]
    """Sorted by name."""
    notes: tuple[str, ...] = ()
    """What the store cannot show, and why (a capability it lacks)."""
    tasks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each task a live replica registers, with those replicas."""

    @property
    def orphans(self) -> list[JobView]:
        """The stored schedules (among those read) whose task no live replica has: nobody claims them."""
        return [j for j in self.jobs if j.stored is not None and not j.task_live]

    def job(self, name: str) -> JobView | None:
        """The view of job `name`, or None."""
        return next((j for j in self.jobs if j.name == name), None)

    @property
    def recent(self) -> list[RunRecord]:
        """Every job's history entries read, newest first."""
        runs = [r for j in self.jobs for r in j.runs]
        runs.sort(key=lambda r: (r.started_at, r.slot, r.attempt), reverse=True)
        return runs


def _capabilities(backend: object) -> frozenset[Capability]:
    return frozenset(getattr(backend, "capabilities", frozenset()))


class Inspector:
    """Reads and controls the jobs of one namespace of one store.

    `store` is a URL or a backend. The store is opened by `open()` (or `async with`) and closed by
    `aclose()` when `close` says so: by default when this inspector made the backend from a URL.
    """

    def __init__(self, store: str | Any, *, namespace: str = "anarchon", close: bool | None = None) -> None:
        if not isinstance(namespace, str) or not namespace.strip():
            raise ConfigError(f"invalid namespace {namespace!r}: give the scheduler's namespace (its "
                              "namespace= option; 'anarchon' unless set)")
        self.backend: Any = backend_for_url(store) if isinstance(store, str) else store
        self.namespace = namespace
        self._close = isinstance(store, str) if close is None else close
        self._opened = False

    def __repr__(self) -> str:
        return f"Inspector({self.url!r}, namespace={self.namespace!r})"

    @property
    def url(self) -> str:
        """The store's URL, password redacted."""
        return redact_url(str(getattr(self.backend, "url", type(self.backend).__name__)))

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What the store declares."""
        return _capabilities(self.backend)

    async def open(self) -> None:
        """Open the store (idempotent)."""
        if not self._opened:
            await self.backend.open()
            self._opened = True

    async def aclose(self) -> None:
        """Close the store if this inspector owns it."""
        if self._opened and self._close:
            await self.backend.close()
        self._opened = False

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def require(self, capability: Capability, what: str, fix: str) -> None:
        """Raise `ConfigError` saying the store cannot do `what` unless it declares `capability`."""
        caps = self.capabilities
        if capability not in caps:
            names = ", ".join(sorted(str(c) for c in caps)) or "none"
            raise ConfigError(
                f"{self.url} {what}: {type(self.backend).__name__} does not declare the '{capability}' "
                f"capability (it has: {names}); {fix}"
            )

    # -- reads ------------------------------------------------------------------------------------

    async def records(self) -> list[JobState]:
        """The newest lease record of every job (trigger records included), sorted by name."""
        self.require(Capability.INSPECT, "cannot be inspected", "claim-only stores keep no per-job record "
                     "to show")
        await self.open()
        return await cast(InspectBackend, self.backend).jobs(self.namespace)

    async def history(self, job: str, limit: int = 20) -> list[RunRecord]:
        """`job`'s newest history entries, newest first, at most `limit`."""
        self.require(Capability.HISTORY, "keeps no run history", "use SQLite, PostgreSQL or Redis for a "
                     "history")
        await self.open()
        return await cast(HistoryBackend, self.backend).history(self.namespace, job, limit)

    async def overview(self, *, runs: int = RUNS_READ, missed_window_ms: int = MISSED_WINDOW_MS) -> Overview:
        """Every job of the namespace: records, controls, registrations and the newest `runs` entries
        of each job's history. What the store cannot show is left out, and `Overview.notes` says why."""
        caps = self.capabilities
        await self.open()
        name = type(self.backend).__name__
        notes: list[str] = []
        states: list[JobState] = []
        if Capability.INSPECT in caps:
            states = await cast(InspectBackend, self.backend).jobs(self.namespace)
        else:
            notes.append(f"{name} keeps no per-job record (it lacks the 'inspect' capability): holders "
                         "and leases are not shown")
        controls: dict[str, JobControl] = {}
        if Capability.CONTROL in caps:
            controls = await cast(ControlBackend, self.backend).controls(self.namespace)
        else:
            notes.append(f"{name} stores no controls (it lacks the 'control' capability): pause, resume "
                         "and trigger are not available")
        catalogue: list[CatalogueEntry] = []
        if Capability.HISTORY in caps:
            catalogue = await cast(HistoryBackend, self.backend).catalogue(self.namespace)
        else:
            notes.append(f"{name} keeps no job catalogue or run history (it lacks the 'history' "
                         "capability): schedules, next runs and runs are not shown")
        stored: list[StoredSchedule] = []
        if Capability.SCHEDULES in caps:
            records = await cast(ScheduleBackend, self.backend).list_schedules(
                self.namespace, limit=SCHEDULES_READ + 1)
            if len(records) > SCHEDULES_READ:
                notes.append(f"only the first {SCHEDULES_READ} stored schedules (by id) are shown: "
                             "anarchon schedules ls pages through them all")
            stored = [public(r) for r in records[:SCHEDULES_READ]]
        tasks: dict[str, list[str]] = {}
        for entry in catalogue:
            if entry.kind == "task":
                tasks.setdefault(entry.job, []).append(entry.instance)
        catalogue = [e for e in catalogue if e.kind != "task"]
        # The store's time as its records were read; with no record to read it from, this machine's.
        now = max((s.now for s in states), default=0) or int(time.time() * 1000)
        jobs = await self._jobs_of(states, controls, catalogue, now, runs=runs if Capability.HISTORY in caps
                                  else 0, missed_window_ms=missed_window_ms, stored=stored, tasks=set(tasks))
        return Overview(self.namespace, self.url, now, caps, tuple(jobs), tuple(notes),
                        {t: tuple(i) for t, i in sorted(tasks.items())})

    async def _jobs_of(self, states: Sequence[JobState], controls: dict[str, JobControl],
                      catalogue: Sequence[CatalogueEntry], now: int, *, runs: int,
                      missed_window_ms: int = MISSED_WINDOW_MS, stored: Sequence[StoredSchedule] = (),
                      tasks: set[str] | None = None) -> list[JobView]:
        """The namespace's jobs from what was read: every name with a record, controls, a registration
        or a stored schedule, each with its newest `runs` history entries."""
        schedules = {s.id: s for s in stored}
        records: dict[str, JobState] = {}
        triggers: dict[str, JobState] = {}
        for state in states:
            if state.job.endswith(TRIGGER_SUFFIX):
                triggers[state.job.removesuffix(TRIGGER_SUFFIX)] = state
            else:
                records[state.job] = state
        entries: dict[str, list[CatalogueEntry]] = {}
        for entry in catalogue:
            entries.setdefault(entry.job, []).append(entry)
        names = sorted({*records, *triggers, *controls, *entries, *schedules})
        found: dict[str, list[RunRecord]] = {}
        if runs > 0:
            store = cast(HistoryBackend, self.backend)
            keys = [*names, *(trigger_key(n) for n in names if n in triggers)]
            # One read per job (the store has no namespace-wide one), sent together.
            read = await asyncio.gather(*(store.history(self.namespace, key, runs) for key in keys))
            for key, got in zip(keys, read, strict=True):
                found.setdefault(key.removesuffix(TRIGGER_SUFFIX), []).extend(got)
        views = []
        for name in names:
            history = found.get(name, [])
            history.sort(key=lambda r: (r.started_at, r.slot, r.attempt), reverse=True)
            schedule = schedules.get(name)
            live = schedule is None or tasks is None or schedule.task in tasks
            views.append(JobView(name, self.namespace, now, "code" if schedule is None else "schedule",
                                 records.get(name), triggers.get(name), controls.get(name, JobControl()),
                                 tuple(entries.get(name, ())), tuple(history), missed_window_ms, schedule,
                                 live))
        return views

    async def job(self, name: str, *, runs: int = RUNS_READ,
                  missed_window_ms: int = MISSED_WINDOW_MS) -> JobView | None:
        """One job's view, or None when the store knows nothing of it (read for that job alone: a few
        calls, however many jobs the namespace holds)."""
        check_name(name)
        caps = self.capabilities
        await self.open()
        states: list[JobState] = []
        if Capability.INSPECT in caps:
            store = cast(InspectBackend, self.backend)
            for key in (name, trigger_key(name)):
                state = await store.inspect(self.namespace, key)
                if state is not None:
                    states.append(state)
        controls: dict[str, JobControl] = {}
        if Capability.CONTROL in caps:
            found = (await cast(ControlBackend, self.backend).controls(self.namespace)).get(name)
            controls = {} if found is None else {name: found}
        catalogue: list[CatalogueEntry] = []
        tasks: set[str] = set()
        if Capability.HISTORY in caps:
            for entry in await cast(HistoryBackend, self.backend).catalogue(self.namespace):
                if entry.kind == "task":
                    tasks.add(entry.job)
                elif entry.job == name:
                    catalogue.append(entry)
        stored: list[StoredSchedule] = []
        if Capability.SCHEDULES in caps:
            [record] = await cast(ScheduleBackend, self.backend).get_schedules(self.namespace, [name])
            stored = [] if record is None else [public(record)]
        now = max((s.now for s in states), default=0) or int(time.time() * 1000)
        views = await self._jobs_of(states, controls, catalogue, now, missed_window_ms=missed_window_ms,
                                    runs=runs if Capability.HISTORY in caps else 0, stored=stored,
                                    tasks=tasks)
        return next((v for v in views if v.name == name), None)

    async def known(self) -> list[str]:
        """The jobs of the namespace that a control accepts: registered by a live replica (the
        catalogue) or claimed at least once (a record), sorted."""
        caps = self.capabilities
        await self.open()
        names: set[str] = set()
        if Capability.HISTORY in caps:
            names |= {e.job for e in await cast(HistoryBackend, self.backend).catalogue(self.namespace)
                      if e.kind != "task"}
        if Capability.INSPECT in caps:
            names |= {s.job for s in await cast(InspectBackend, self.backend).jobs(self.namespace)
                      if not s.job.endswith(TRIGGER_SUFFIX)}
        return sorted(names)

    async def stored(self) -> list[str]:
        """Every job of the namespace with a record, controls or a registration, sorted."""
        caps = self.capabilities
        await self.open()
        names = set(await self.known())
        if Capability.CONTROL in caps:
            names |= set(await cast(ControlBackend, self.backend).controls(self.namespace))
        if Capability.INSPECT in caps:
            names |= {s.job.removesuffix(TRIGGER_SUFFIX)
                      for s in await cast(InspectBackend, self.backend).jobs(self.namespace)}
        return sorted(names)

    async def check_known(self, job: str, verb: str) -> None:
        """Raise `UnknownJob` unless `known()` holds `job` (a store that keeps neither records nor a
        catalogue cannot tell, and is taken at its word)."""
        if not self.capabilities & {Capability.INSPECT, Capability.HISTORY}:
            return
        known = await self.known()
        if job not in known and Capability.SCHEDULES in self.capabilities:
            [found] = await cast(ScheduleBackend, self.backend).get_schedules(self.namespace, [job])
            if found is not None:
                return  # a stored schedule: a job of the namespace, run or not
        if job not in known:
            raise UnknownJob(
                f"cannot {verb} {job!r}: no job {job!r} in namespace {self.namespace!r} (known: "
                f"{_listing(known)}); check the name and the namespace, or force it for a job not "
                "deployed yet (--force, or force=True)"
            )

    # -- controls ---------------------------------------------------------------------------------

    async def pause(self, job: str, *, force: bool = False) -> JobControl:
        """Pause `job` on every replica: its slots are skipped until it is resumed.

        A job the namespace does not know (`known()`) is refused with `UnknownJob`, a typo most
        likely; `force=True` pauses it all the same, e.g. before it is first deployed."""
        return await self._set(job, "pause", force, paused=True)

    async def resume(self, job: str, *, force: bool = False) -> JobControl:
        """Resume a paused `job` on every replica, from its next slot (`force` as for `pause`; a job
        that the store holds paused is always accepted: undoing a pause is safe)."""
        return await self._set(job, "resume", force, paused=False)

    async def trigger(self, job: str, *, force: bool = False) -> JobControl:
        """Run `job` once now, on exactly one replica; the new trigger's id is `JobControl.trigger`
        (`force` as for `pause`)."""
        return await self._set(job, "trigger", force, trigger=True)

    async def _set(self, job: str, verb: str, force: bool, *, paused: bool | None = None,
                   trigger: bool = False) -> JobControl:
        check_name(job)
        if Capability.CONTROL not in self.capabilities:
            raise ConfigError(
                f"cannot {verb} {job!r}: {self.backend!r} does not store controls (it lacks the 'control' "
                "capability); use a backend that declares Capability.CONTROL: SQLite, PostgreSQL or Redis"
            )
        await self.open()
        store = cast(ControlBackend, self.backend)
        if not force and not (verb == "resume" and (await store.controls(self.namespace)).get(
                job, JobControl()).paused):
            await self.check_known(job, verb)
        return await store.set_control(self.namespace, job, paused=paused, trigger=trigger)

    # -- forget and namespaces --------------------------------------------------------------------

    async def forget(self, job: str, *, force: bool = False) -> bool:
        """Delete everything the store keeps of `job` (records, its triggers' too, controls, history,
        registrations); True when anything was deleted.

        Refused with `JobRegistered` while a live replica registers the job (its registration lives
        until `CATALOGUE_TTL_MS` after that replica's last publication), unless `force=True`: a job that
        runs again after it is forgotten starts over at token 1."""
        check_name(job)
        self.require(Capability.FORGET, f"cannot forget {job!r}",
                     "use a store that declares it: SQLite, PostgreSQL, Redis or MemoryBackend")
        await self.open()
        if not force and Capability.HISTORY in self.capabilities:
            entries = await cast(HistoryBackend, self.backend).catalogue(self.namespace)
            holders = [e.instance for e in entries if e.job == job]
            if holders:
                raise JobRegistered(
                    f"cannot forget {job!r} in namespace {self.namespace!r}: live replicas register it "
                    f"({_listing(holders)}); remove it from their code and restart them, wait "
                    f"{CATALOGUE_TTL_MS // 60_000} minutes for their registrations to lapse, then forget "
                    "it; or force it (--force, or force=True)"
                )
        store = cast(ForgetBackend, self.backend)
        gone = await store.forget(self.namespace, job)
        return await store.forget(self.namespace, trigger_key(job)) or gone

    async def namespaces(self) -> dict[str, int]:
        """Every namespace of the store (not only this inspector's), with how many jobs each holds (a
        record, controls or a registration)."""
        self.require(Capability.FORGET, "cannot list its namespaces",
                     "use a store that declares it: SQLite, PostgreSQL, Redis or MemoryBackend")
        await self.open()
        counts: dict[str, int] = {}
        for namespace in await cast(ForgetBackend, self.backend).namespaces():
            other = Inspector(self.backend, namespace=namespace, close=False)
            other._opened = True
            counts[namespace] = len(await other.stored())
        return counts


def _listing(names: Sequence[str], most: int = 10) -> str:
    """`a, b, c` (at most `most` names, then how many more), or `none`."""
    if not names:
        return "none"
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown}, … and {len(names) - most} more"
