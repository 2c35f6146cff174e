"""Schedules as data: what is a stored schedule, how is it checked, and how is it written and read?

A *task* is a handler registered by name in code (`Scheduler.task`). A *schedule* is a record in the
store that names a task and says when it runs, with the task's arguments and the job options a code
job has. `Schedules` writes and reads them from any process that reaches the store; the scheduler's
sweep (`_sweeper`) turns the ones due soon into jobs. Everything a write holds is checked here, before
it reaches the store: the same check a code job's registration makes, and a few of its own.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from ._clock import Clock, SystemClock
from ._duration import Duration, parse_duration
from ._errors import (
    AnarchonError,
    ConfigError,
    OptionError,
    ScheduleConflict,
    ScheduleError,
    ScheduleNotFound,
)
from ._history import _describe
from ._job import check_name
from ._options import ResolvedOptions, check_names, resolve
from ._schedules import At, Cron, DstFold, DstGap, Every, Schedule, from_ms, to_ms
from .backends import Capability, HistoryBackend, ScheduleBackend, ScheduleRecord, ScheduleWrite

if TYPE_CHECKING:
    from typing import Unpack

    from ._options import LeaseJobOptions

__all__ = ["MAX_ARGS_BYTES", "NewSchedule", "ScheduleAddResult", "ScheduleConflict", "ScheduleNotFound",
           "SchedulePage", "Schedules", "StoredSchedule", "decode_options", "decode_spec", "schedule_of"]

DEFAULT_HEARTBEAT_MS = 5_000
"""A scheduler's heartbeat unless set: a stored lease must leave room for two of them."""

ADD_MANY_BATCH = 1_000
"""The schedules `Schedules.add_many` sends to the store in one call, unless told otherwise."""

MAX_ARGS_BYTES = 65_536
"""The largest a schedule's arguments may be, as JSON text (UTF-8 bytes)."""

_LOG = logging.getLogger("anarchon")


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule kept in the store, as `Schedules.get` and `Schedules.list` read it."""

    id: str
    """Its id: the job name of its runs in claims, history, controls and logs."""
    task: str
    """The task that runs it."""
    schedule: Every | Cron | At
    """When it is due."""
    args: dict[str, Any]
    """The task's keyword arguments."""
    options: dict[str, Any]
    """The job options it was given (durations as e.g. "2000ms"); the rest are the scheduler's."""
    paused: bool
    version: int
    """Grows with every write (`Schedules.update` compares it); never reused by a schedule added again."""
    created_at: datetime
    updated_at: datetime
    next_due: datetime | None
    """Where it stands in the due index: at or before its next slot; None when it has no slot left."""

    @property
    def kind(self) -> Literal["every", "cron", "at"]:
        """"every", "cron" or "at"."""
        if isinstance(self.schedule, Every):
            return "every"
        return "cron" if isinstance(self.schedule, Cron) else "at"

    @property
    def description(self) -> str:
        """The schedule in words, e.g. "every 10s" or "cron '0 9 * * *' (Europe/Athens)"."""
        return _describe(self.schedule)[0]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready view (for `anarchon schedules ... --json` and the status page)."""
        spec = json.loads(encode_spec(self.schedule))
        return {
            "id": self.id, "task": self.task, "kind": self.kind, "schedule": self.description, **spec,
            "args": self.args, "options": self.options, "paused": self.paused, "version": self.version,
            "created_at": self.created_at.isoformat(), "updated_at": self.updated_at.isoformat(),
            "next_due": None if self.next_due is None else self.next_due.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class SchedulePage:
    """One page of `Schedules.list`: its schedules, and the cursor of the next page (None: the last)."""

    items: list[StoredSchedule]
    cursor: str | None


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """One schedule for `Schedules.add_many`: what `Schedules.add` takes, as one value."""

    id: str
    task: str
    schedule: Every | Cron | At
    """When it is due, e.g. `Every.parse("1h", offset="15m")`, `Cron("0 9 * * *", "Europe/Athens")`
    or `At.parse(datetime(2027, 1, 1, tzinfo=UTC))`."""
    args: Mapping[str, Any] | None = None
    paused: bool = False
    options: LeaseJobOptions | None = None
    """The job options, as `Schedules.add` takes them (overlap, timeout, lease, ...)."""


@dataclass(frozen=True, slots=True)
class ScheduleAddResult:
    """One answer of `Schedules.add_many`: the schedule written when `added`, else the one that holds
    its id (None in the rare case that the store could not read it)."""

    added: bool
    schedule: StoredSchedule | None


# -- checking and encoding ------------------------------------------------------------------------------


def schedule_of(*, every: Duration | None = None, cron: str | None = None,
                at: datetime | int | float | None = None, timezone: str = "UTC", offset: Duration = 0,
                dst_gap: DstGap = "next", dst_fold: DstFold = "first") -> Every | Cron | At:
    """The schedule that exactly one of `every`, `cron` and `at` describes, checked."""
    given = [name for name, value in (("every", every), ("cron", cron), ("at", at)) if value is not None]
    if len(given) != 1:
        raise ScheduleError(
            f"a schedule needs exactly one of every, cron or at, not {' and '.join(given) or 'none'}: "
            "e.g. every='1h', cron='0 9 * * 1-5' or at=datetime(2027, 1, 1, tzinfo=UTC)")
    if cron is not None:
        if offset:
            raise ScheduleError(f"offset {offset!r} is for every= schedules only: remove it")
        return Cron(cron, timezone, dst_gap, dst_fold)
    for name, value, default in (("timezone", timezone, "UTC"), ("dst_gap", dst_gap, "next"),
                                 ("dst_fold", dst_fold, "first")):
        if value != default:
            raise ScheduleError(f"{name} {value!r} is for cron= schedules only: an every= grid and an at= "
                                "moment are in UTC; remove it")
    if every is not None:
        return Every.parse(every, offset)
    if offset:
        raise ScheduleError(f"offset {offset!r} is for every= schedules only: remove it")
    assert at is not None
    return At.parse(at)


def encode_spec(schedule: Schedule) -> str:
    """A schedule as the store keeps it (`ScheduleWrite.spec`)."""
    if isinstance(schedule, Every):
        return json.dumps({"every": schedule.interval_ms, "offset": schedule.offset_ms})
    if isinstance(schedule, Cron):
        return json.dumps({"cron": schedule.expression, "timezone": schedule.timezone,
                           "dst_gap": schedule.dst_gap, "dst_fold": schedule.dst_fold})
    if isinstance(schedule, At):
        return json.dumps({"at": schedule.when_ms})
    raise TypeError(f"not a schedule: {schedule!r}")


@functools.lru_cache(maxsize=4096)
def decode_spec(text: str) -> Every | Cron | At:
    """The schedule a store's `spec` holds; `ScheduleError` when it is not one. (Cached: many stored
    schedules share one, and reading a cron expression costs about 100 µs.)"""
    try:
        spec = json.loads(text)
        if "every" in spec:
            return Every(int(spec["every"]), int(spec.get("offset", 0)))
        if "cron" in spec:
            return Cron(spec["cron"], spec.get("timezone", "UTC"), spec.get("dst_gap", "next"),
                        spec.get("dst_fold", "first"))
        if "at" in spec:
            return At(int(spec["at"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise ScheduleError(f"stored schedule spec {text!r} cannot be read: {exc}") from None
    raise ScheduleError(f"stored schedule spec {text!r} names no every, cron or at")


def encode_args(args: Mapping[str, Any] | None, schedule_id: str) -> str:
    """Arguments as JSON text, checked: an object of JSON values, at most `MAX_ARGS_BYTES`."""
    if args is None:
        return "{}"
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise ScheduleError(f"invalid args {args!r} for schedule {schedule_id!r}: pass a dict with string "
                            "keys (the task's keyword arguments)")
    try:
        text = json.dumps(dict(args), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ScheduleError(f"invalid args for schedule {schedule_id!r}: {exc}; use JSON values only "
                            "(str, int, float, bool, None, lists and dicts of them)") from None
    size = len(text.encode())
    if size > MAX_ARGS_BYTES:
        raise ScheduleError(f"args of schedule {schedule_id!r} are {size} bytes as JSON, more than "
                            f"{MAX_ARGS_BYTES}: keep large data elsewhere and pass its key")
    return text


def encode_options(options: Mapping[str, Any], schedule_id: str, method: str = "add") -> str:
    """Job options as JSON text, checked as a code job's are; durations as "<ms>ms"."""
    check_names(f"Schedules.{method}", options, frozenset(), lease_backend=True, backend="the store")
    resolve(options, lease_ms=max(_lease_of(options), 30_000), heartbeat_ms=1)  # (the values' checks)
    lease_ms = _lease_of(options)
    if lease_ms and "heartbeat" not in options and lease_ms <= DEFAULT_HEARTBEAT_MS * 2:
        # A replica would refuse it with its own heartbeat (5 s unless set): refused here instead.
        raise OptionError(
            f"lease {options['lease']!r} of schedule {schedule_id!r} is not more than twice the replicas' "
            f"default heartbeat ({DEFAULT_HEARTBEAT_MS} ms): give heartbeat= too, less than half the lease, "
            "e.g. lease='3s', heartbeat='1s'")
    kept: dict[str, Any] = {}
    for key, value in options.items():
        if value is None:
            continue
        if key in ("overlap", "max_attempts"):
            kept[key] = str(value) if key == "overlap" else value
        elif key == "retry" and isinstance(value, bool):
            kept[key] = value
        else:
            kept[key] = f"{parse_duration(value, name=key, allow_zero=key in ('jitter', 'catch_up'))}ms"
    return json.dumps(kept, separators=(",", ":"), sort_keys=True)


def _lease_of(options: Mapping[str, Any]) -> int:
    lease = options.get("lease")
    return 0 if lease is None else parse_duration(lease, name="lease")


def decode_options(text: str) -> dict[str, Any]:
    """The job options a store's `options` holds."""
    try:
        options = json.loads(text)
    except ValueError:
        raise ScheduleError(f"stored schedule options {text!r} cannot be read") from None
    if not isinstance(options, dict):
        raise ScheduleError(f"stored schedule options {text!r} are not an object")
    return options


@functools.lru_cache(maxsize=4096)
def resolve_stored(options_text: str, *, lease_ms: int, heartbeat_ms: int) -> ResolvedOptions:
    """A stored schedule's options, resolved with the scheduler's defaults (cached, as `decode_spec`)."""
    return resolve(decode_options(options_text), lease_ms=lease_ms, heartbeat_ms=heartbeat_ms)


def check_id(schedule_id: object) -> str:
    """A schedule id is a job name: a non-empty string of at most 200 characters, no control ones."""
    try:
        check_name(schedule_id)
    except AnarchonError as exc:
        raise ScheduleError(str(exc).replace("job name", "schedule id")) from None
    return cast(str, schedule_id)


def _check_version(version: object) -> None:
    if not isinstance(version, int) or isinstance(version, bool):
        raise ScheduleError(f"invalid version {version!r}: pass the version read with the schedule "
                            "(an int), e.g. update(id, version=schedule.version, ...)")


def first_due(schedule: Schedule, now_ms: int, max_skew_ms: int) -> int | None:
    """The slot a schedule written at `now_ms` (this process's clock) needs a look at first: its first
    slot after `now_ms - max_skew_ms`, so a writer whose clock runs ahead cannot skip one."""
    return schedule.next_slot(now_ms - max_skew_ms - 1)


def public(record: ScheduleRecord) -> StoredSchedule:
    """A store's record as users read it."""
    return StoredSchedule(
        id=record.id, task=record.task, schedule=decode_spec(record.spec), args=json.loads(record.args),
        options=decode_options(record.options), paused=record.paused, version=record.version,
        created_at=from_ms(record.created_at), updated_at=from_ms(record.updated_at),
        next_due=None if record.next_due is None else from_ms(record.next_due))


# -- the API ------------------------------------------------------------------------------------------


class Schedules:
    """Adds, changes, removes and reads the schedules kept in a store, from any process.

    `scheduler.schedules` is one on the scheduler's backend and namespace. In a process with no
    scheduler, make one from a backend or a URL; `async with` keeps the store open across calls (each
    call opens and closes it otherwise).
    """

    def __init__(self, backend: ScheduleBackend, *, namespace: str = "anarchon", clock: Clock | None = None,
                 max_skew: Duration = "2s", opened: Callable[[], bool] | None = None,
                 known_tasks: Callable[[], set[str]] | None = None) -> None:
        """`opened` says whether someone else (a running scheduler) keeps the backend open;
        `known_tasks`, the tasks registered in this process (an add of another task is checked
        against the store's catalogue)."""
        caps: frozenset[Capability] = getattr(backend, "capabilities", frozenset())
        if Capability.SCHEDULES not in caps:
            raise ConfigError(
                f"{backend!r} does not keep schedules as data (no 'schedules' capability): use SQLite, "
                "PostgreSQL, Redis or Valkey, or register the job in code with every(), cron() or at()")
        self.backend = backend
        self.namespace = namespace
        self._clock: Clock = clock or SystemClock()
        self._max_skew_ms = parse_duration(max_skew, name="max_skew", allow_zero=True)
        self._opened = opened
        self._known_tasks = known_tasks
        self._open = False

    @classmethod
    def from_url(cls, url: str, *, namespace: str = "anarchon") -> Schedules:
        """`Schedules` on the installed backend whose URL scheme matches `url`."""
        from ._plugins import backend_for_url

        return cls(cast(ScheduleBackend, backend_for_url(url)), namespace=namespace)

    async def __aenter__(self) -> Self:
        if self._opened is None or not self._opened():  # (a running scheduler keeps its store open)
            await self.backend.open()
            self._open = True
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._open:
            self._open = False
            await self.backend.close()

    async def _call(self, step: Callable[[ScheduleBackend], Any]) -> Any:
        if self._open or (self._opened is not None and self._opened()):
            return await step(self.backend)
        await self.backend.open()
        try:
            return await step(self.backend)
        finally:
            await self.backend.close()

    async def add(self, schedule_id: str, task: str, *, every: Duration | None = None,
                  cron: str | None = None, at: datetime | int | float | None = None, timezone: str = "UTC",
                  offset: Duration = 0, dst_gap: DstGap = "next", dst_fold: DstFold = "first",
                  args: Mapping[str, Any] | None = None, paused: bool = False, replace: bool = False,
                  strict: bool = False,
                  **options: Unpack[LeaseJobOptions]) -> StoredSchedule:
        """Keep a schedule that runs `task`: only if the id is free (`ScheduleConflict` otherwise), or,
        with `replace`, in place of the current one whatever its version (an upsert).

        A task that no replica has registered yet is accepted with a warning (the replicas that have
        it may not be deployed yet); `strict` refuses it instead.
        """
        schedule_id = check_id(schedule_id)
        schedule = schedule_of(every=every, cron=cron, at=at, timezone=timezone, offset=offset,
                               dst_gap=dst_gap, dst_fold=dst_fold)
        write = self._write(schedule_id, task, schedule, args, dict(options), paused)
        kinds = await self._catalogue_kinds()
        self._check_not_code(schedule_id, kinds)
        self._check_task(task, strict, kinds)
        result = await self._call(lambda b: b.put_schedule(self.namespace, write,
                                                           expect="any" if replace else "absent"))
        if not result.written:
            current = None if result.record is None else public(result.record)
            raise ScheduleConflict(
                f"schedule {schedule_id!r} exists already (version {current.version if current else '?'}, "
                f"task {current.task if current else '?'!r}): pass replace=True to overwrite it, or "
                "update it with its version", current)
        return public(result.record)

    async def add_many(self, schedules: Iterable[NewSchedule], *, replace: bool = False, strict: bool = False,
                       batch: int = ADD_MANY_BATCH) -> list[ScheduleAddResult]:
        """Keep many schedules, in order, `batch` to a call to the store: each only if its id is free,
        or, with `replace`, in place of the current one (an upsert).

        Every schedule is checked before any is written (one bad schedule writes nothing); a taken id
        is not an error but an answer (`added` false, with the schedule that holds the id), and the
        others are written. Each batch is written atomically where the store allows: another process
        may see the schedules written in part, never one schedule in part.
        """
        if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 100_000:
            raise OptionError(f"invalid batch {batch!r}: use a whole number from 1 to 100000")
        writes: list[ScheduleWrite] = []
        seen: set[str] = set()
        for item in schedules:
            if not isinstance(item, NewSchedule):
                raise ScheduleError(f"invalid schedule {item!r}: pass NewSchedule values, e.g. "
                                    "NewSchedule('cust-7', 'report', Every.parse('1h'))")
            schedule_id = check_id(item.id)
            if schedule_id in seen:
                raise ScheduleError(f"schedule id {schedule_id!r} comes twice: give each id once")
            seen.add(schedule_id)
            if not isinstance(item.schedule, (Every, Cron, At)):
                raise ScheduleError(f"invalid schedule {item.schedule!r} for {schedule_id!r}: use Every, "
                                    "Cron or At")
            writes.append(self._write(schedule_id, item.task, item.schedule, item.args,
                                      dict(item.options or {}), item.paused, method="add_many"))
        if not writes:
            return []
        kinds = await self._catalogue_kinds()
        for write in writes:
            self._check_not_code(write.id, kinds)
        for task in dict.fromkeys(w.task for w in writes):
            self._check_task(task, strict, kinds)
        expect: Literal["absent", "any"] = "any" if replace else "absent"

        async def put(backend: ScheduleBackend) -> list[ScheduleAddResult]:
            out: list[ScheduleAddResult] = []
            for start in range(0, len(writes), batch):
                results = await backend.put_schedules(self.namespace, writes[start:start + batch],
                                                      expect=expect)
                out += [ScheduleAddResult(r.written, None if r.record is None else public(r.record))
                        for r in results]
            return out

        return cast(list[ScheduleAddResult], await self._call(put))

    async def update(self, schedule_id: str, *, version: int, task: str | None = None,
                     every: Duration | None = None, cron: str | None = None,
                     at: datetime | int | float | None = None, timezone: str | None = None,
                     offset: Duration | None = None, dst_gap: DstGap | None = None,
                     dst_fold: DstFold | None = None, args: Mapping[str, Any] | None = None,
                     paused: bool | None = None, strict: bool = False,
                     **options: Unpack[LeaseJobOptions]) -> StoredSchedule:
        """Change a schedule if it still has `version` (`ScheduleConflict` otherwise): what is given
        replaces what is stored; the rest is kept. A new every/cron/at replaces the old one whole;
        options given are merged into the stored ones (a None value removes one)."""
        schedule_id = check_id(schedule_id)
        _check_version(version)
        current = await self.get(schedule_id)
        if current is None:
            raise ScheduleNotFound(f"no schedule {schedule_id!r} in namespace {self.namespace!r}")
        old = current.schedule
        if cron is not None and isinstance(old, Cron):
            # A new expression keeps the stored timezone and DST policies unless they are given too.
            schedule: Every | Cron | At = schedule_of(
                cron=cron, timezone=timezone or old.timezone, offset=offset or 0,
                dst_gap=dst_gap or old.dst_gap, dst_fold=dst_fold or old.dst_fold)
        elif every is not None or cron is not None or at is not None:
            schedule = schedule_of(
                every=every, cron=cron, at=at, timezone=timezone or "UTC", offset=offset or 0,
                dst_gap=dst_gap or "next", dst_fold=dst_fold or "first")
        elif timezone is not None or dst_gap is not None or dst_fold is not None:
            if not isinstance(current.schedule, Cron):
                raise ScheduleError(f"schedule {schedule_id!r} is not a cron schedule: timezone, dst_gap "
                                    "and dst_fold apply to cron= schedules only")
            c = current.schedule
            schedule = Cron(c.expression, timezone or c.timezone, dst_gap or c.dst_gap,
                            dst_fold or c.dst_fold)
        elif offset is not None:
            if not isinstance(current.schedule, Every):
                raise ScheduleError(f"schedule {schedule_id!r} is not an every= schedule: offset applies "
                                    "to every= schedules only")
            schedule = Every.parse(current.schedule.interval_ms / 1000, offset)
        else:
            schedule = current.schedule
        merged = {**current.options, **options}
        merged = {k: v for k, v in merged.items() if v is not None}
        new_task = current.task if task is None else task
        write = self._write(schedule_id, new_task, schedule, current.args if args is None else args, merged,
                            current.paused if paused is None else paused, method="update",
                            keep=current if schedule == current.schedule else None)
        if task is not None:
            self._check_task(task, strict, await self._catalogue_kinds())
        result = await self._call(lambda b: b.put_schedule(self.namespace, write, expect=version))
        if not result.written:
            now = None if result.record is None else public(result.record)
            if now is None:
                raise ScheduleNotFound(f"no schedule {schedule_id!r} in namespace {self.namespace!r}")
            raise ScheduleConflict(
                f"schedule {schedule_id!r} is at version {now.version}, not {version}: it changed meanwhile; "
                "read it again and apply your change to that version", now)
        return public(result.record)

    async def pause(self, schedule_id: str) -> StoredSchedule:
        """Pause a schedule (its `paused` field): no replica claims its slots until `resume`."""
        return await self._set_paused(schedule_id, True)

    async def resume(self, schedule_id: str) -> StoredSchedule:
        """Resume a paused schedule from its next slot."""
        return await self._set_paused(schedule_id, False)

    async def _set_paused(self, schedule_id: str, paused: bool) -> StoredSchedule:
        for _ in range(10):  # (another write between the read and the write: read again)
            current = await self.get(schedule_id)
            if current is None:
                raise ScheduleNotFound(f"no schedule {schedule_id!r} in namespace {self.namespace!r}")
            try:
                return await self.update(schedule_id, version=current.version, paused=paused)
            except ScheduleConflict:
                continue
        raise ScheduleConflict(f"schedule {schedule_id!r} kept changing: try again", None)

    async def remove(self, schedule_id: str, *, version: int | None = None) -> StoredSchedule:
        """Remove a schedule (only if it still has `version`, when given); return what was removed.

        Its runs in progress end as they would; no replica claims a slot of it afterwards. Its lease
        record and history stay until `anarchon forget`."""
        schedule_id = check_id(schedule_id)
        if version is not None:
            _check_version(version)
        result = await self._call(lambda b: b.remove_schedule(self.namespace, schedule_id, expect=version))
        if not result.written:
            if result.record is None:
                raise ScheduleNotFound(f"no schedule {schedule_id!r} in namespace {self.namespace!r}")
            raise ScheduleConflict(
                f"schedule {schedule_id!r} is at version {result.record.version}, not {version}: it "
                "changed meanwhile; read it again", public(result.record))
        return public(result.record)

    async def get(self, schedule_id: str) -> StoredSchedule | None:
        """The schedule with this id, or None."""
        schedule_id = check_id(schedule_id)
        [record] = await self._call(lambda b: b.get_schedules(self.namespace, [schedule_id]))
        return None if record is None else public(record)

    async def list(self, *, task: str | None = None, prefix: str = "", after: str = "", limit: int = 100
                   ) -> SchedulePage:
        """A page of schedules ordered by id, filtered by task and id prefix; pass the page's `cursor`
        as `after` for the next one."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10_000:
            raise OptionError(f"invalid limit {limit!r}: use a whole number from 1 to 10000")
        records = await self._call(lambda b: b.list_schedules(self.namespace, after=after, limit=limit,
                                                              task=task, prefix=prefix))
        items = [public(r) for r in records]
        return SchedulePage(items, items[-1].id if len(items) == limit else None)

    # -- checks ---------------------------------------------------------------------------------------

    def _write(self, schedule_id: str, task: str, schedule: Every | Cron | At,
               args: Mapping[str, Any] | None, options: dict[str, Any], paused: bool, *,
               method: str = "add", keep: StoredSchedule | None = None) -> ScheduleWrite:
        """The write of a schedule, checked; `keep`: the stored one, whose place in the due index is
        kept (its when is unchanged: a pause, new args)."""
        try:
            check_name(task)
        except AnarchonError as exc:
            raise ScheduleError(str(exc).replace("job name", "task name")) from None
        if not isinstance(paused, bool):
            raise ScheduleError(f"invalid paused {paused!r}: use True or False")
        if keep is not None:
            next_due = None if keep.next_due is None else to_ms(keep.next_due)
            return ScheduleWrite(schedule_id, task, encode_spec(schedule), encode_args(args, schedule_id),
                                 encode_options(options, schedule_id, method), paused, next_due)
        next_due = first_due(schedule, self._clock.now_ms(), self._max_skew_ms)
        if next_due is None:
            assert isinstance(schedule, At)
            raise ScheduleError(f"at={from_ms(schedule.when_ms).isoformat()} for schedule {schedule_id!r} is "
                                "in the past: it would never run; pass a later moment")
        return ScheduleWrite(schedule_id, task, encode_spec(schedule), encode_args(args, schedule_id),
                             encode_options(options, schedule_id), paused, next_due)

    async def _catalogue_kinds(self) -> dict[str, set[str]] | None:
        """Per name, the kinds the store's live catalogue publishes it as ("task", "every", ...); None
        when the store keeps no catalogue."""
        if Capability.HISTORY not in self.backend.capabilities:
            return None
        entries = await self._call(lambda b: cast(HistoryBackend, b).catalogue(self.namespace))
        kinds: dict[str, set[str]] = {}
        for entry in entries:
            kinds.setdefault(entry.job, set()).add(entry.kind)
        return kinds

    def _check_task(self, task: str, strict: bool, kinds: dict[str, set[str]] | None) -> None:
        if self._known_tasks is not None and task in self._known_tasks():
            return
        if kinds is not None and "task" in kinds.get(task, set()):
            return
        known = sorted(name for name, k in (kinds or {}).items() if "task" in k)
        message = (f"no replica in namespace {self.namespace!r} has registered task {task!r} (known: "
                   f"{', '.join(known) or 'none'})")
        if strict:
            raise ScheduleError(f"{message}: deploy the replicas that have it first, or drop strict")
        _LOG.warning("%s; it is kept, and runs once a replica with the task is up", message)

    def _check_not_code(self, schedule_id: str, kinds: dict[str, set[str]] | None) -> None:
        code = (kinds or {}).get(schedule_id, set()) - {"task"}
        if code:
            raise ConfigError(
                f"{schedule_id!r} is a code job in namespace {self.namespace!r} (registered with "
                f"{'/'.join(sorted(code))}() by a replica): a stored schedule cannot share its name; pick "
                "another id")
