"""The history writer: what does the store learn of this instance's jobs and of the runs that ended?

Off the hot path: a run's end is put in a buffer and written with the others that end within a second,
by one background task, in one call; the jobs are published at start and every `CATALOGUE_REFRESH_MS`
in one call. A write that fails is logged once as a warning and its runs are dropped: history is for
people, and it never holds up a claim, a release or a stop for long.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ._clock import Clock
from ._context import JobContext
from ._job import Job
from ._logs import short
from ._options import ResolvedOptions
from ._schedules import At, Cron, Every, Schedule, from_ms
from ._wakeup import Wakeup
from .backends import ERROR_LIMIT, CatalogueEntry, HistoryBackend, ReleaseOutcome, RunRecord

__all__ = [
    "CATALOGUE_REFRESH_MS",
    "CATALOGUE_TTL_MS",
    "FLUSH_MS",
    "HistoryWriter",
    "catalogue_entry",
    "fmt_ms",
    "next_slot_of",
    "outcome_name",
    "schedule_of",
]

CATALOGUE_REFRESH_MS = 60_000
"""How often a scheduler publishes its jobs again."""
CATALOGUE_TTL_MS = 3 * CATALOGUE_REFRESH_MS
"""How long a published entry lives without a refresh: three refreshes, so one lost write is harmless."""
FLUSH_MS = 1_000
"""How long ended runs wait to be written together."""
FLUSH_ROWS = 2_000
"""Ended runs written at once, without waiting out `FLUSH_MS`: many ending together (a herd) go in
writes of about this size, each short, instead of piling up for the next."""
BUFFER_LIMIT = 10_000
"""The most ended runs waiting to be written; older ones are dropped (with a warning) while the store
is away or writes them slower than they end."""


def fmt_ms(ms: int) -> str:
    """A duration in the largest unit that divides it: '30s', '5m', '1h', '250ms'."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _describe(schedule: Schedule) -> tuple[str, str, str]:
    """(words, kind, timezone) of a schedule."""
    if isinstance(schedule, Every):
        offset = f" offset {fmt_ms(schedule.offset_ms)}" if schedule.offset_ms else ""
        return f"every {fmt_ms(schedule.interval_ms)}{offset}", "every", "UTC"
    if isinstance(schedule, Cron):
        zone = "" if schedule.timezone == "UTC" else f" ({schedule.timezone})"
        return f"cron '{schedule.expression}'{zone}", "cron", schedule.timezone
    if isinstance(schedule, At):
        return f"at {from_ms(schedule.when_ms).isoformat().replace('+00:00', 'Z')}", "at", "UTC"
    return schedule.fingerprint, "custom", "UTC"


def catalogue_entry(job: Job, instance: str, now_ms: int, *, leases: bool = True) -> CatalogueEntry:
    """How `instance` publishes `job`: its schedule in words, its options, its next slot after `now_ms`."""
    schedule: Any = job.schedule  # (a custom schedule may not be hashable: see below)
    try:
        words, kind, zone, options = _published(schedule, job.options, leases)
    except TypeError:  # a custom schedule that cannot be hashed: described afresh
        words, kind, zone, options = _published.__wrapped__(job.schedule, job.options, leases)
    return CatalogueEntry(job=job.name, instance=instance, schedule=words, kind=kind, timezone=zone,
                          options=dict(options), next_slot=job.schedule.next_slot(now_ms),
                          fingerprint=job.schedule.fingerprint)


@functools.lru_cache(maxsize=1024)
def _published(schedule: Schedule, o: ResolvedOptions, leases: bool) -> tuple[str, str, str, dict[str, str]]:
    """(words, kind, timezone, options) of a catalogue entry: the same for the many jobs that share a
    schedule and options, so each publish of thousands of jobs spells them out once."""
    words, kind, zone = _describe(schedule)
    options: dict[str, str] = {}
    if leases:
        options.update(lease=fmt_ms(o.lease_ms), heartbeat=fmt_ms(o.heartbeat_ms), overlap=str(o.overlap),
                       max_attempts=str(o.max_attempts), catch_up=fmt_ms(o.catch_up_ms))
        if o.retry_ms is not None:
            options["retry"] = fmt_ms(o.retry_ms)
    if o.timeout_ms is not None:
        options["timeout"] = fmt_ms(o.timeout_ms)
    if o.jitter_ms is not None:
        options["jitter"] = fmt_ms(o.jitter_ms)
    return words, kind, zone, options


def schedule_of(fingerprint: str) -> Schedule | None:
    """The schedule a fingerprint names, or None when it names none this version knows."""
    kind, _, rest = fingerprint.partition(":")
    try:
        if kind == "every":
            interval, _, offset = rest.partition("+")
            return Every(int(interval), int(offset or 0))
        if kind == "at":
            return At(int(rest))
        if kind == "cron":
            expression, _, tail = rest.partition("@")
            zone, *policy = tail.split(";")
            opts = dict(p.split("=", 1) for p in policy)
            return Cron(expression, zone or "UTC", opts.get("gap", "next"),  # type: ignore[arg-type]
                        opts.get("fold", "first"))  # type: ignore[arg-type]
    except Exception:  # a malformed fingerprint, or a schedule this version refuses
        return None
    return None


def next_slot_of(entry: CatalogueEntry, now_ms: int) -> int | None:
    """The entry's next slot as of `now_ms`: the published one while it lies ahead, else computed
    from the schedule's fingerprint (None when it has no slot left or cannot be computed)."""
    if entry.next_slot is not None and entry.next_slot > now_ms:
        return entry.next_slot
    schedule = schedule_of(entry.fingerprint) if entry.fingerprint else None
    if schedule is None:
        return None if entry.next_slot is None or entry.kind == "at" else entry.next_slot
    return schedule.next_slot(now_ms)


def outcome_name(outcome: ReleaseOutcome | None) -> str:
    """How history names a run's end: done, failed, handover, or lost (ended without its lease)."""
    return "lost" if outcome is None else str(outcome)


def error_text(error: BaseException | None, *, timeout_ms: int | None = None) -> str:
    """The error as history keeps it: `Type: message`, cut to `ERROR_LIMIT` characters."""
    if timeout_ms is not None:
        return f"timeout after {timeout_ms} ms"
    if error is None:
        return ""
    return short(error)[:ERROR_LIMIT]


class HistoryWriter:
    """Writes one scheduler's ended runs and job catalogue to a history backend, in the background."""

    def __init__(self, backend: HistoryBackend, *, namespace: str, instance_id: str, keep: int, clock: Clock,
                 log: logging.Logger, jobs: Callable[[], Iterable[Job]], leases: bool = True) -> None:
        self._backend = backend
        self._namespace = namespace
        self._instance_id = instance_id
        self._keep = keep
        self._clock = clock
        self._log = log
        self._jobs = jobs
        self._leases = leases
        self.tasks: Callable[[], Iterable[str]] = tuple
        """The tasks this instance registers (`Scheduler.task`): published as entries of kind "task"."""
        self._buffer: list[tuple[str, int, int, int, str, str, int, int, str]] = []
        """The ended runs not yet written, each a `RunRecord`'s fields: a tuple of strings and ints is
        untracked by the garbage collector once it survives a collection, where a record waiting for
        the flush would be promoted to the oldest generation and traversed by every full collection."""
        self._wake = Wakeup()
        self._full = Wakeup()
        """Set once `FLUSH_ROWS` runs wait: the flush goes at once."""
        self._dropped = 0
        """Ended runs dropped from a full buffer since the last flush (said at the flush)."""
        self._republish = False
        self._failing: set[str] = set()
        """What is failing now ("runs", "catalogue"): warned about once, until it works again."""

    def record(self, ctx: JobContext, outcome: ReleaseOutcome | None, error: BaseException | None,
               duration_ms: float, *, timeout_ms: int | None = None) -> None:
        """Keep one ended run, to be written with the others that end within `FLUSH_MS`."""
        duration = max(0, round(duration_ms))
        text = "" if error is None and timeout_ms is None else error_text(error, timeout_ms=timeout_ms)
        run = (ctx.name, ctx.slot, ctx.attempt, ctx.token, self._instance_id, outcome_name(outcome),
               self._clock.now_ms() - duration, duration, text)
        if len(self._buffer) >= BUFFER_LIMIT:
            excess = len(self._buffer) - BUFFER_LIMIT + 1
            del self._buffer[:excess]
            self._dropped += excess
        self._buffer.append(run)
        if len(self._buffer) >= FLUSH_ROWS:
            self._full.set()
        self._wake.set()

    @property
    def keep(self) -> int:
        """Ended runs kept per job."""
        return self._keep

    def record_missed(self, job: str, slots: list[int], text: str) -> None:
        """Keep `slots` of `job` (at most `keep` of them) as missed: outcome `missed`, attempt 0."""
        now = self._clock.now_ms()
        for slot in slots[: self._keep]:
            self._buffer.append((job, slot, 0, 0, self._instance_id, "missed", now, 0, text[:ERROR_LIMIT]))
        self._wake.set()

    def jobs_changed(self) -> None:
        """A job was registered while running: publish the catalogue again soon."""
        self._republish = True
        self._wake.set()

    async def run(self) -> None:
        """Publish the catalogue now and every `CATALOGUE_REFRESH_MS`; write ended runs as they come."""
        loop = asyncio.get_running_loop()
        refresh_s = CATALOGUE_REFRESH_MS / 1000
        due = loop.time()
        while True:
            if self._republish or loop.time() >= due:
                self._republish = False
                await self.publish()
                due = loop.time() + refresh_s
            if await self._wake.wait(max(0.0, due - loop.time())):
                self._wake.clear()
                if self._buffer:
                    if len(self._buffer) < FLUSH_ROWS:  # gather the runs that end meanwhile
                        self._full.clear()
                        await self._full.wait(FLUSH_MS / 1000)
                    await self.flush()

    async def publish(self) -> None:
        """Publish every job of this instance, in one call."""
        now = self._clock.now_ms()
        entries = [catalogue_entry(job, self._instance_id, now, leases=self._leases)
                   for job in list(self._jobs())]
        entries += [CatalogueEntry(job=task, instance=self._instance_id, schedule="task", kind="task",
                                   timezone="", options={}, next_slot=None) for task in self.tasks()]
        if not entries:
            return
        await self._write("catalogue", lambda: self._backend.publish_catalogue(self._namespace, entries,
                                                                                CATALOGUE_TTL_MS))

    async def flush(self) -> None:
        """Write the runs that ended, in one call; on failure they are dropped."""
        buffered, self._buffer = self._buffer, []
        if self._dropped:
            level = logging.DEBUG if "buffer" in self._failing else logging.WARNING
            self._failing.add("buffer")
            self._log.log(level, "history: %d ended run(s) dropped: more than %d waited to be written, "
                          "ending faster than %s took them (history is best effort: the jobs run on; "
                          "warned once until it keeps up again)", self._dropped, BUFFER_LIMIT,
                          self._backend.url)
            self._dropped = 0
        elif buffered:
            self._failing.discard("buffer")
        if not buffered:
            return
        batch = [RunRecord(*run) for run in buffered]
        try:
            await self._write("runs", lambda: self._backend.record_runs(self._namespace, batch, self._keep),
                              dropped=len(batch))
        except asyncio.CancelledError:
            self._buffer[:0] = buffered  # a stop cut the write short: the final flush writes them
            raise

    async def close(self, within_s: float) -> None:
        """The final flush at a stop, given up after `within_s`."""
        try:
            async with asyncio.timeout(within_s):
                await self.flush()
        except TimeoutError:
            self._log.warning("history: %d ended run(s) not written within %.1f s of the stop; dropped",
                              len(self._buffer), within_s)

    async def _write(self, what: str, call: Callable[[], Awaitable[None]], *, dropped: int = 0) -> None:
        try:
            await call()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            level = logging.DEBUG if what in self._failing else logging.WARNING
            self._failing.add(what)
            lost = f"; {dropped} run(s) dropped" if dropped else ""
            self._log.log(level, "history: writing the %s to %s failed: %s%s (history is best effort: "
                          "the jobs run on; warned once until it works again)", what, self._backend.url,
                          short(exc), lost)
            return
        if what in self._failing:
            self._failing.discard(what)
            self._log.info("history: writing the %s to %s works again", what, self._backend.url)

