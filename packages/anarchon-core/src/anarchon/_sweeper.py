"""The sweep: which stored schedules are due soon, and which of them can this replica run?

A replica never loads every stored schedule. Once a heartbeat (and at once when the store pushes a
change) it reads the page(s) of the store's due index that fall within the next `window`, and plans
each schedule found whose task it has as a job of its own, bounded to that window
(`Planner.add(until=...)`): from then on the job is claimed, leased, run, watched and taken over
like a code job. A job whose slots are all behind it, that watches nothing, runs nothing and has no
claim in flight is planned no more.

The due index moves on once a slot is settled, never before: its run ended done or failed, or the store
answered done, stale, exhausted or skipped for good (`settled`). A slot whose run was handed over, or
whose runner crashed, stays in the index, so whichever replica sweeps next (one that started after the
crash included) claims it again as a takeover, as it would a code job's slot.

The replicas share the stored schedules without a leader, by partition of the due index
(`schedule_partition`). Each reads which replicas have each task (the job catalogue's task entries,
read every `MEMBERS_EVERY_MS`), and each partition goes to the replica that ranks it first among them
(rendezvous hashing: one that joins or leaves moves only its own share). A sweep reads the due window
of this replica's partitions only; every `backup_ms` (a third of a heartbeat, at most a second) it
also reads the schedules overdue by `backup_ms` in the partitions of the replicas gone silent (no win
of theirs pushed in two `backup_ms`; every other replica where the store pushes no wins), and plans
those too. So the replicas read disjoint rows, each slot is claimed by one replica in the normal case
(a replica busy with a herd is not helped into claiming its slots twice), and a dead replica's slots
start late by at most three `backup_ms`, within a heartbeat. Where the store pushes wins, a replica
silent for a heartbeat is presumed gone once a backup read finds a slot of its partitions overdue that
is due after its last win heard (a slot it never claimed, not one it is still running): the shares are
worked out again without it, so its partitions are read in the due window from then on and their slots
start on time, not a backup read late, until its catalogue entries expire. A win of its heard again,
or its tasks published again (read with the members), give it its partitions back. The views of the
replicas may differ for a while (a replica started or died, or froze): a slot is then claimed twice
(the store still picks one winner) or late, never lost. Without a catalogue (`history=0`, or a store
that keeps none) every replica plans every due schedule.

A settled slot's move of the due index is written within `MIN_GAP_S`, not at the next sweep, so that
the other replicas' backup reads do not find it overdue.

Writes reach every replica within a heartbeat (at once where the store pushes them): each record the
window returns is compared with the version planned, and when the namespace's change counter moved,
the planned schedules that the window did not return and that have a boundary queued are read again
by id (written to a time beyond the window, or removed). So a write costs the replicas no reads of
the schedules it did not touch, pushed or not. A changed one is planned in place of the old
(`Planner.replace`: the slots the old one watches stay watched), a removed or paused one queues no
more boundaries; the runs in progress of either end as they would.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from ._context import JobContext
from ._errors import AnarchonError
from ._job import Job
from ._logs import SkipSummary, qualname, short
from ._planner import Planner
from ._schedules import At, Cron, Every
from ._settings import Settings
from ._stored import decode_spec, resolve_stored
from ._wakeup import Wakeup
from .backends import (
    SCHEDULE_PARTITIONS,
    Capability,
    HistoryBackend,
    ScheduleBackend,
    ScheduleRecord,
    schedule_partition,
)

__all__ = ["MEMBERS_EVERY_MS", "MIN_GAP_S", "PAGE", "Share", "Sweeper", "Task", "owner", "shares",
           "task_call"]

DEFAULT_CATCH_UP_MS = 300_000
"""Catch-up of a schedule no replica here can run (its own option is not known here)."""
PAGE = 1000
"""Schedules read from the due index per round trip."""
PEEK = 100
"""Schedules of every task read by the minute's look for tasks this replica lacks."""
PEEK_EVERY_MS = 60_000
MIN_GAP_S = 0.2
"""The shortest time between two sweeps, however many writes are pushed meanwhile."""
MEMBERS_EVERY_MS = 30_000
"""How often a replica reads which replicas have each task (the catalogue's task entries)."""
BACKUP_MAX_MS = 1000
"""The longest `backup_ms`: how long after its due time another replica's schedule is planned here too."""


def owner(key: str, members: tuple[str, ...]) -> str:
    """The replica among `members` that sweeps `key` (a partition's number) first: the one that ranks
    it highest (rendezvous hashing: a replica that joins or leaves moves only its own share)."""
    salt = b"\x00" + key.encode()
    return max(members, key=lambda member: zlib.crc32(member.encode() + salt))


@dataclass(frozen=True, slots=True)
class Share:
    """What one sweep reads for some tasks: their due window in `mine` (None: every partition), and
    what is overdue in `others`: each other replica's partitions."""

    tasks: tuple[str, ...]
    mine: tuple[int, ...] | None
    others: tuple[tuple[str, tuple[int, ...]], ...]

    def silent(self, heard: Callable[[str], int | None], since: int) -> list[int]:
        """The partitions of the other replicas that no win was heard from after `since` (the
        clock's ms), or ever."""
        out: list[int] = []
        for member, parts in self.others:
            at = heard(member)
            if at is None or at < since:
                out += parts
        return out


def shares(members: Mapping[str, tuple[str, ...]], me: str) -> list[Share]:
    """This replica's share of the due index, per group of tasks that the same replicas have."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for task, ids in sorted(members.items()):
        groups.setdefault(ids, []).append(task)
    out = []
    for ids, tasks in groups.items():
        if len(ids) < 2:
            out.append(Share(tuple(tasks), None, ()))
            continue
        owners = [owner(str(p), ids) for p in range(SCHEDULE_PARTITIONS)]
        others = tuple((member, tuple(p for p, o in enumerate(owners) if o == member))
                       for member in ids if member != me)
        out.append(Share(tuple(tasks), tuple(p for p, o in enumerate(owners) if o == me),
                         tuple((member, parts) for member, parts in others if parts)))
    return out


@dataclass(frozen=True, slots=True)
class Task:
    """A handler registered by name (`Scheduler.task`), run for the stored schedules that name it."""

    name: str
    handler: Callable[..., Any]
    is_async: bool


class _AsyncCall:
    """A task's handler with one schedule's arguments bound: what a stored schedule's job runs."""

    __slots__ = ("__qualname__", "args", "handler")

    def __init__(self, handler: Callable[..., Any], args: dict[str, Any]) -> None:
        self.handler, self.args = handler, args
        self.__qualname__ = qualname(handler)

    async def __call__(self, ctx: JobContext) -> None:
        await self.handler(ctx, **self.args)


class _SyncCall:
    """`_AsyncCall` for a plain-function task (it runs in a worker thread)."""

    __slots__ = ("__qualname__", "args", "handler")

    def __init__(self, handler: Callable[..., Any], args: dict[str, Any]) -> None:
        self.handler, self.args = handler, args
        self.__qualname__ = qualname(handler)

    def __call__(self, ctx: JobContext) -> Any:
        return self.handler(ctx, **self.args)


def task_call(task: Task, args: dict[str, Any], schedule_id: str) -> Callable[..., Any]:
    """`task`'s handler with `args` bound; `AnarchonError` naming both when they do not fit."""
    problem = _misfit(task.handler, tuple(sorted(args)))
    if problem:
        raise AnarchonError(f"the args of schedule {schedule_id!r} do not fit task {task.name!r} "
                            f"({qualname(task.handler)}): {problem}")
    return _AsyncCall(task.handler, args) if task.is_async else _SyncCall(task.handler, args)


@functools.lru_cache(maxsize=4096)
def _misfit(handler: Callable[..., Any], names: tuple[str, ...]) -> str:
    """Why a call of `handler` with a context and these keyword arguments would fail ("" if it would
    not): the same for the many schedules of one task that pass the same names."""
    try:
        inspect.signature(handler).bind(None, **dict.fromkeys(names))
    except TypeError as exc:
        return str(exc)
    except ValueError:  # no signature to check (a builtin): the call will tell
        pass
    return ""


@dataclass(slots=True)
class _Planned:
    version: int
    job: Job
    retired: bool = False
    """Removed, paused or no longer runnable here: no boundaries, kept only while its slots settle."""


class Sweeper:
    """The stored schedules due soon, planned as this replica's jobs."""

    def __init__(self, backend: ScheduleBackend, settings: Settings, planner: Planner, *,
                 tasks: Mapping[str, Task], code_jobs: Mapping[str, Job], running: Callable[[str], bool],
                 skips: SkipSummary, forget: Callable[[str], None] = lambda name: None,
                 heard: Callable[[str], int | None] = lambda instance: None,
                 overdue: Callable[[str, int, int | None], None] = lambda name, version, first: None,
                 announced: bool = False) -> None:
        """`running(name)`: whether a run of job `name` is in progress here; `forget(name)`: a job is
        planned no more (the engine drops what it kept of it); `heard(instance)`: when a win of that
        replica was last pushed (None: never, or the store pushes none); `overdue(name, version, first)`: a
        schedule is planned, `first` its first slot not settled if already due (missed slots);
        `announced`: the store pushes wins (`heard` tells when), so a silent replica can be presumed gone."""
        self._backend = backend
        self._settings = settings
        self._log: logging.Logger = settings.log
        self._planner = planner
        self._tasks = tasks
        self._code = code_jobs
        self._running = running
        self._forget = forget
        self._overdue = overdue
        self._heard = heard
        self._announced = announced
        self._skips = skips
        self.window_ms = max(2 * settings.heartbeat_ms, 2000)
        """How far ahead a sweep reads the due index: two heartbeats (at least 2 s), so a slot is
        planned at least one sweep before it is due."""
        self._planned: dict[str, _Planned] = {}
        self._version: int | None = None
        self._wake = Wakeup()
        self._said: set[tuple[str, str, int]] = set()
        """What was said once already: (what, schedule id or task, version)."""
        self._wanted: set[str] = set()
        """Stored schedules asked for by name (`job(fetch=True)`), to read at the next sweep."""
        self._peek_at = 0
        """When the sweep next looks at the due schedules of every task (the clock's ms)."""
        self._peeked = -1
        """The change counter at that look."""
        self._moves: dict[str, tuple[str, int, int | None]] = {}
        """Moves of the due index for slots settled since they were last written, by schedule id."""
        self._failing = False
        self._poked = False
        self.backup_ms = min(settings.heartbeat_ms // 3, BACKUP_MAX_MS)
        """How overdue another replica's schedule must be before this replica plans it too, and how
        often it looks for those."""
        self._catalogue = (cast(HistoryBackend, backend)
                           if settings.history > 0 and Capability.HISTORY in backend.capabilities else None)
        self._shares = [Share(tuple(sorted(tasks)), None, ())]
        """What a sweep reads (every partition until the replicas are known)."""
        self._members_due: int | None = None
        """When the members are read next (the clock's ms); None: at the next sweep."""
        self._members: dict[str, tuple[str, ...]] | None = None
        """The replicas that have each task, as last read from the catalogue (None: not read yet)."""
        self._gone: dict[str, int] = {}
        """Replicas presumed gone (silent, their share overdue), and since when (the clock's ms)."""
        self._last_win: dict[str, int] = {}
        """When a win of each other replica was last heard (the clock's ms), kept as long as it is listed."""
        self.sweeps = 0
        """Sweeps done (for tests and metrics)."""

    def job(self, name: str, *, fetch: bool = False) -> Job | None:
        """The job of stored schedule `name` while it is planned here; with `fetch`, one that is not is
        read at the next sweep (a trigger of a schedule not due soon), and planned from then on."""
        planned = self._planned.get(name)
        if planned is None and fetch:
            self._wanted.add(name)
        return None if planned is None else planned.job

    @property
    def planned(self) -> int:
        """How many stored schedules are planned here now."""
        return len(self._planned)

    def poke(self, schedule_id: str | None = None) -> None:
        """The store pushed a write (of `schedule_id`): sweep now, not at the next heartbeat."""
        self._poked = True
        self._wake.set()

    def settled(self, name: str, slot: int) -> None:
        """Slot `slot` of stored schedule `name` is settled here (its run ended done or failed, or the
        store's answer leaves nothing to run): the due index moves past it at the next sweep."""
        planned = self._planned.get(name)
        if planned is None:
            return
        nxt = planned.job.schedule.next_slot(slot)
        known = self._moves.get(name)
        if known is None or known[1] != planned.version or (known[2] is not None and (
                nxt is None or nxt > known[2])):
            self._moves[name] = (name, planned.version, nxt)
            self._wake.set()  # written within MIN_GAP_S (see `run`)

    async def run(self) -> None:
        """Sweep once a heartbeat, and when poked (a burst of pushed writes makes one sweep, at most
        one per `MIN_GAP_S`); between sweeps, look at the others' overdue schedules every `backup_ms`
        and write the settled slots' moves within `MIN_GAP_S`. A store error is logged, never
        raised. (The engine sweeps once before.)"""
        clock = self._settings.clock
        heartbeat_ms = self._settings.heartbeat_ms
        gap_s = min(MIN_GAP_S, heartbeat_ms / 2000)
        sweep_at = clock.now_ms() + heartbeat_ms
        backup_at = clock.now_ms() + self.backup_ms
        while True:
            await asyncio.sleep(gap_s)
            now = clock.now_ms()
            await self._wake.wait(max(0, min(sweep_at, backup_at) - now) / 1000)
            self._wake.clear()
            now = clock.now_ms()
            try:
                if self._poked or now >= sweep_at:
                    self._poked = False
                    sweep_at, backup_at = now + heartbeat_ms, now + self.backup_ms
                    await self.sweep()
                elif now >= backup_at:
                    backup_at = now + self.backup_ms
                    await self.backups(now)
                else:
                    await self._write_moves()
            except Exception as exc:  # the store is away: the claims say so too; once here
                self._log.log(logging.DEBUG if self._failing else logging.WARNING,
                              "sweeping the stored schedules of namespace %r failed: %s",
                              self._settings.namespace, short(exc))
                self._failing = True
            else:
                self._failing = False

    async def sweep(self) -> None:
        """Read what is due within the window and what changed; plan it; move the due index on."""
        backend, ns = self._backend, self._settings.namespace
        version = await backend.schedules_version(ns)
        now = self._settings.clock.now_ms()
        if self._catalogue is not None and (self._members_due is None or now >= self._members_due):
            await self._read_members(now)
        self._readmit()
        until = now + self.window_ms
        seen: set[str] = set()
        moves: dict[str, tuple[str, int, int | None]] = {}
        for share in self._shares:
            # This replica's partitions: the due window. (A schedule of another's, planned here before
            # this replica knew of that one, is not extended: it drains within the window.)
            await self._read(share.tasks, share.mine, until, now, until, seen, moves)
            await self._backup(share, now, until, seen, moves)
        if now >= self._peek_at or version != self._peeked:
            # After a write, and once a minute, a look at the due schedules of every task: those of a
            # task this replica lacks (a rolling deploy) are said once; they are never read at each sweep.
            self._peek_at, self._peeked = now + PEEK_EVERY_MS, version
            for record in await backend.due_schedules(ns, until=until, limit=PEEK):
                if record.task not in self._tasks:
                    self._runnable(record)  # (says why not, once)
        if self._wanted:
            wanted, self._wanted = sorted(self._wanted - seen), set()
            for found in await backend.get_schedules(ns, wanted) if wanted else []:
                if found is not None and found.next_due is not None:
                    seen.add(found.id)
                    self._consider(found, now, now)  # planned, with no boundary beyond now
        if version != self._version:
            await self._reread(seen)
            self._version = version
        settled, self._moves = self._moves, {}
        moves.update(settled)
        if moves:
            await backend.advance_schedules(ns, list(moves.values()))
        for schedule_id in [i for i, p in self._planned.items() if i not in seen or p.retired]:
            if self._done(schedule_id):
                self._unplan(schedule_id)
        self.sweeps += 1

    def _queued(self, schedule_id: str) -> bool:
        """Whether a planned schedule has a boundary queued (a claim to come)."""
        plan = self._planner.plan_of(schedule_id)
        return plan is not None and plan.next_due is not None

    def _done(self, schedule_id: str) -> bool:
        """Whether a planned schedule has nothing left here: no boundary queued, no slot watched, no
        run in progress, no claim in flight."""
        plan = self._planner.plan_of(schedule_id)
        return plan is None or (self._planner.idle(plan, plan.job.options.lease_ms)
                                and not self._running(schedule_id))

    async def _reread(self, seen: set[str]) -> None:
        """After a write (the change counter moved): read again the planned schedules that this sweep's
        window did not return and that have a boundary queued, and plan their changes. (The window's
        records were compared with the planned version as they were read; a schedule written to a time
        beyond the window, or removed, is not in it but would still claim the boundary queued. A run or
        a watch of a slot claimed before goes on as it would.)"""
        ids = [i for i, p in self._planned.items() if i not in seen and not p.retired and self._queued(i)]
        if not ids:
            return
        for schedule_id, record in zip(ids, await self._backend.get_schedules(self._settings.namespace, ids),
                                       strict=True):
            planned = self._planned.get(schedule_id)
            if planned is None:
                continue
            if record is None or record.paused:
                self._retire(schedule_id, planned)
            elif record.version != planned.version:
                self._changed(record, planned)

    async def backups(self, now: int) -> None:
        """Plan the schedules of the others' partitions overdue by `backup_ms`, and write the settled
        slots' moves: between two sweeps."""
        seen: set[str] = set()
        moves: dict[str, tuple[str, int, int | None]] = {}
        until = now + self.window_ms
        self._readmit()
        for share in self._shares:
            await self._backup(share, now, until, seen, moves)
        self._moves.update(moves)
        await self._write_moves()

    async def _backup(self, share: Share, now: int, until: int, seen: set[str],
                      moves: dict[str, tuple[str, int, int | None]]) -> None:
        """Plan what is overdue by `backup_ms` in the partitions of the replicas gone silent: no win
        of theirs heard in two `backup_ms` (all of them, where the store pushes no wins)."""
        if self._announced:
            for member, _ in share.others:
                heard = self._heard(member)
                if heard is not None and heard > self._last_win.get(member, -1):
                    self._last_win[member] = heard
        silent = share.silent(self._heard, now - 2 * self.backup_ms)
        if silent:
            found: dict[int, int] | None = {} if self._announced and self._members is not None else None
            await self._read(share.tasks, tuple(silent), now - self.backup_ms, now, until, seen, moves,
                             found)
            if found:
                self._presume_gone(share, found, now)

    def _presume_gone(self, share: Share, overdue: dict[int, int], now: int) -> None:
        """Presume gone each other replica of `share` that no win was heard from in a heartbeat and that
        left a slot due after its last win unclaimed (`overdue`: the latest due time a backup read found
        in each partition); share the partitions out again without it."""
        since = now - self._settings.heartbeat_ms
        gone = []
        for member, parts in share.others:
            last = self._last_win.get(member)
            if last is not None and last >= since:
                continue
            latest = max((overdue[p] for p in parts if p in overdue), default=None)
            if latest is not None and (last is None or latest > last):
                self._gone[member] = now
                gone.append(member)
        for member in gone:
            self._log.debug("replica %r left its stored schedules due %d ms ago unclaimed and no win of "
                            "its was heard in a heartbeat: presumed gone, its partitions are shared out "
                            "among the others until it is heard again", member, self.backup_ms)
        if gone:
            self._reshare()
            # Its partitions are read at once, not at the next sweep: until then neither the window
            # nor the backup read (it is no longer another's share) would find their slots.
            self._poked = True
            self._wake.set()

    def _readmit(self) -> None:
        """Give its partitions back to each replica presumed gone whose win was heard since."""
        back = [m for m, at in self._gone.items() if (heard := self._heard(m)) is not None and heard > at]
        for member in back:
            del self._gone[member]
            self._log.debug("a win of replica %r was heard: its partitions are its own again", member)
        if back:
            self._reshare()

    def _reshare(self) -> None:
        """Work out this replica's share from the members last read, without those presumed gone."""
        if self._members is None:
            return
        view = {task: tuple(i for i in ids if i not in self._gone) for task, ids in self._members.items()}
        self._shares = shares(view, self._settings.instance_id)

    async def _write_moves(self) -> None:
        """Move the due index past the slots settled here since the last write."""
        moves, self._moves = self._moves, {}
        if moves:
            await self._backend.advance_schedules(self._settings.namespace, list(moves.values()))

    async def _read(self, tasks: tuple[str, ...], partitions: tuple[int, ...] | None, due_by: int, now: int,
                    until: int, seen: set[str], moves: dict[str, tuple[str, int, int | None]],
                    found: dict[int, int] | None = None) -> None:
        """Plan each schedule of `tasks` in `partitions` due by `due_by`, page by page, until `until`;
        add its id to `seen`, the due index's move for it, if any, to `moves`, and, if `found` is given,
        the latest due time read in each partition to it."""
        backend, ns = self._backend, self._settings.namespace
        after: tuple[int, str] | None = None
        parts = None if partitions is None else list(partitions)
        while True:
            page = await backend.due_schedules(ns, until=due_by, tasks=list(tasks), partitions=parts,
                                               after=after, limit=PAGE)
            for record in page:
                seen.add(record.id)
                if (found is not None and record.next_due is not None and not record.paused
                        and record.next_due > record.updated_at):
                    # (a slot meant to run: not a paused one's, nor one before the schedule's last write)
                    part = schedule_partition(record.id)
                    found[part] = max(found.get(part, record.next_due), record.next_due)
                move = self._consider(record, now, until)
                if move is not None:
                    moves[record.id] = move
            if len(page) < PAGE:
                return
            last = page[-1]
            assert last.next_due is not None
            after = (last.next_due, last.id)

    async def _read_members(self, now: int) -> None:
        """Read which replicas have each of this replica's tasks; on a failure, keep the last view."""
        assert self._catalogue is not None
        # Read at the first sweep, again two heartbeats later (the replicas started together have
        # published their tasks by then), then every MEMBERS_EVERY_MS.
        first = self._members_due is None
        self._members_due = now + (2 * self._settings.heartbeat_ms if first else MEMBERS_EVERY_MS)
        try:
            entries = await self._catalogue.catalogue(self._settings.namespace)
        except Exception as exc:
            self._log.debug("reading the replicas of each task failed: %s; keeping the last view", short(exc))
            return
        me = self._settings.instance_id
        found: dict[str, set[str]] = {task: {me} for task in self._tasks}
        published: dict[str, int] = {}
        for entry in entries:
            if entry.kind == "task" and entry.job in found:
                found[entry.job].add(entry.instance)
                published[entry.instance] = max(entry.seen_at, published.get(entry.instance, 0))
        self._members = {task: tuple(sorted(ids)) for task, ids in found.items()}
        for member in [m for m in [*self._gone, *self._last_win] if m not in published]:
            self._gone.pop(member, None)  # gone for good: its catalogue entries expired
            self._last_win.pop(member, None)
        # One presumed gone that has published its tasks since (a heartbeat after, for the clocks' skew)
        # is alive: a replica back from a freeze may lose every race for its partitions, so be never heard.
        for member in [m for m, at in self._gone.items() if published[m] > at + self._settings.heartbeat_ms]:
            del self._gone[member]
            self._log.debug("replica %r published its tasks again: its partitions are its own again", member)
        self._reshare()

    def _unplan(self, schedule_id: str) -> None:
        self._planned.pop(schedule_id, None)
        self._moves.pop(schedule_id, None)
        self._planner.remove(schedule_id)
        self._forget(schedule_id)

    def _retire(self, schedule_id: str, planned: _Planned) -> None:
        """Queue no more boundaries of a removed or paused schedule; its slots settle as they would."""
        planned.retired = True
        plan = self._planner.plan_of(schedule_id)
        if plan is not None:
            self._planner.retire(plan)

    def _changed(self, record: ScheduleRecord, planned: _Planned) -> None:
        """A planned schedule was written anew: plan the new job in place of the old (its runs and the
        slots it watches go on), or retire it when the new one cannot run here."""
        job = self._runnable(record)
        plan = self._planner.plan_of(record.id)
        if job is None or plan is None:
            self._retire(record.id, planned)
            return
        planned.version, planned.job, planned.retired = record.version, job, False
        self._moves.pop(record.id, None)  # (moves meant for the old version)
        until = plan.until if plan.until is not None and plan.until >= 0 else None
        self._planner.replace(plan, job, until=until, not_before=record.updated_at)

    def _consider(self, record: ScheduleRecord, now: int, until: int) -> tuple[str, int, int | None] | None:
        """Plan one schedule of the due index; the due index's move for it, if the sweep moves it."""
        schedule_id = record.id
        next_due = record.next_due
        assert next_due is not None
        if record.paused:
            # Its slots are skipped: said once a minute (with the others), and the index moved on.
            planned = self._planned.get(schedule_id)
            if planned is not None and not planned.retired:
                self._retire(schedule_id, planned)
            if next_due <= now:
                schedule = self._spec(record)
                self._skips.add("paused", schedule_id)
                return None if schedule is None else (schedule_id, record.version, schedule.next_slot(now))
            return None
        planned = self._planned.get(schedule_id)
        if planned is not None and planned.version != record.version:
            self._overdue(schedule_id, record.version, None)
            self._changed(record, planned)
        elif planned is None:
            job = self._runnable(record)
            if job is None:
                return self._far_behind(record, now)
            planned = self._planned[schedule_id] = _Planned(record.version, job)
            # Slots due since the last write and not settled (an earlier one was never meant to run).
            first = next_due if next_due > record.updated_at else job.schedule.next_slot(record.updated_at)
            self._overdue(schedule_id, record.version, first if first is not None and first < now else None)
            self._planner.add(job, until=until, not_before=record.updated_at)
        if planned.retired:
            return None
        plan = self._planner.plan_of(schedule_id)
        if plan is None:
            return None
        self._planner.extend(plan, until)
        if plan.latest_slot is None:
            return self._far_behind(record, now, planned.job.options.catch_up_ms)
        return None

    def _far_behind(self, record: ScheduleRecord, now: int, catch_up_ms: int = DEFAULT_CATCH_UP_MS
                    ) -> tuple[str, int, int | None] | None:
        """A schedule due long ago, beyond catch-up and the window, that no claim here moved (nobody
        claimed it, or no replica can run it): the sweep moves it to its first slot that catch-up
        could still run, so it is not read again at every sweep."""
        assert record.next_due is not None
        if record.next_due >= now - catch_up_ms - self.window_ms:
            return None
        schedule = self._spec(record)
        if schedule is None:
            return None
        return record.id, record.version, schedule.next_slot(now - catch_up_ms)

    def _spec(self, record: ScheduleRecord) -> Every | Cron | At | None:
        try:
            return decode_spec(record.spec)
        except AnarchonError as exc:
            self._once(("spec", record.id, record.version), logging.ERROR,
                       "stored schedule %r cannot be read: %s", record.id, exc)
            return None

    def _runnable(self, record: ScheduleRecord) -> Job | None:
        """The job a stored schedule runs as here; None (said once) when it cannot run here."""
        schedule_id = record.id
        if schedule_id in self._code:
            self._once(("code", schedule_id, record.version), logging.ERROR,
                       "stored schedule %r has the name of a code job of this replica: it is not claimed "
                       "here; remove it, or add it again under another id", schedule_id)
            return None
        schedule = self._spec(record)
        if schedule is None:
            return None
        task = self._tasks.get(record.task)
        if task is None:
            self._once(("task", record.task, 0), logging.WARNING,
                       "task %r is not registered on this replica: its stored schedules (%r, ...) are not "
                       "claimed here; a replica that has it claims them", record.task, schedule_id)
            return None
        return self._job(record, schedule, task)

    def _job(self, record: ScheduleRecord, schedule: Any, task: Task) -> Job | None:
        """The job a stored schedule runs as here; None (said once) when it cannot be built."""
        s = self._settings
        try:
            options = resolve_stored(record.options, lease_ms=s.lease_ms, heartbeat_ms=s.heartbeat_ms)
            args = _args(record)
            return Job.bound(record.id, schedule, options, task_call(task, args, record.id),
                             is_async=task.is_async, task=task.name)
        except AnarchonError as exc:
            self._once(("job", record.id, record.version), logging.ERROR,
                       "stored schedule %r is not claimed here: %s", record.id, exc)
            return None

    def _once(self, key: tuple[str, str, int], level: int, message: str, *args: object) -> None:
        """Log a line once per `key` (what, which, version)."""
        if key in self._said:
            return
        if len(self._said) > 10_000:
            self._said.clear()
        self._said.add(key)
        self._log.log(level, message, *args)


def _args(record: ScheduleRecord) -> dict[str, Any]:
    import json

    try:
        args = json.loads(record.args)
    except ValueError:
        raise AnarchonError(f"its args {record.args[:100]!r} are not JSON") from None
    if not isinstance(args, dict):
        raise AnarchonError(f"its args {record.args[:100]!r} are not a JSON object")
    return args

