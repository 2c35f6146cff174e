"""The scheduler: one timer heap for every job, claims through the backend, runs with heartbeats."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import inspect
import logging
import os
import random
import secrets
import signal
import socket
import sys
import threading
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Generic, Never, Self, TypeVar, Unpack, cast, overload

from . import _options
from ._batch import StepBatcher
from ._clock import Clock, SystemClock
from ._context import CancelSignal, JobContext
from ._duration import Duration, parse_duration
from ._errors import AnarchonError, BackendUnavailable, ConfigError, DuplicateJobError, RunCancelled
from ._options import ClaimOnlyJobOptions, LeaseJobOptions, NeedsLeaseBackend, ResolvedOptions
from ._plugins import backend_for_url, plugin_manager
from ._schedules import At, Cron, DstFold, DstGap, Every, Schedule, from_ms
from .backends import (
    Capability,
    ClaimBackend,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    Lease,
    LeaseBackend,
    Overlap,
    ReleaseManyBackend,
    ReleaseOutcome,
    RenewManyBackend,
)

__all__ = ["Job", "Scheduler"]

B = TypeVar("B", bound=ClaimBackend)
LB = TypeVar("LB", bound=LeaseBackend)
CB = TypeVar("CB", bound=ClaimBackend)
H = TypeVar("H", bound=Callable[..., Any])

logger = logging.getLogger("anarchon")

_BATCH_WINDOW_MS = 5
# Jobs due at one moment are claimed in this many batches per instance, each with its own random
# delay: few round trips, yet each replica wins about its share of every boundary.
_JITTER_GROUPS = 4
_STOP = "stop"
# The scheduler whose run the current task (or a task it started) is executing.
_IN_RUN: contextvars.ContextVar[Scheduler[Any] | None] = contextvars.ContextVar("anarchon_in_run",
                                                                                 default=None)
_LEASE_LOST = "lease lost"
_TIMEOUT = "timeout"


def fmt_slot(slot: int) -> str:
    """Format a slot for logs: ISO 8601 UTC, milliseconds only when present."""
    dt = from_ms(slot)
    ms = slot % 1000
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms:03d}Z" if ms else "Z")


class _SlotText:
    """A slot for a log line, formatted only if the line is emitted."""

    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot

    def __str__(self) -> str:
        return fmt_slot(self.slot)


def default_instance_id() -> str:
    """`host:pid:random`, unique per process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


@dataclass(eq=False, slots=True)
class Job:
    """A registered job: name, schedule, handler and checked options."""

    name: str
    schedule: Schedule
    handler: Callable[..., Any]
    options: ResolvedOptions
    takes_ctx: bool
    is_async: bool
    jitter_ms: int = 0
    # The slots this instance watches as a backup (taken or buffered), each with the generation
    # of its live heap entry so that stale entries are recognised. One slot at most, except under
    # overlap="allow", where every slot has its own record and each running one may need a takeover.
    watches: dict[int, int] = field(default_factory=dict)
    watch_gen: int = 0
    latest_slot: int | None = None
    group: int = 0
    """Which of the jitter groups the job's claims are batched in."""
    next_due: int | None = None
    """When the job's next boundary entry is due (its slot plus jitter)."""
    fingerprint_warned: bool = False
    logger: logging.Logger | None = None
    """The handler's logger, `anarchon.job.<name>`."""
    fingerprint: str = ""
    """The schedule's fingerprint, computed once."""


@dataclass(slots=True)
class _Entry:
    due: int
    job: Job
    slot: int
    kind: str  # "slot" (a boundary), "watch" (a backup's re-claim), "catchup"
    gen: int = 0


@dataclass(eq=False, slots=True)
class _Run:
    job: Job
    lease: Lease
    ctx: JobContext
    claimed_at: float
    """Loop time when the winning claim was sent: the lease cannot outlast claimed_at + lease."""
    task: asyncio.Task[None] | None = None
    handler: asyncio.Future[None] | None = None
    heartbeat: asyncio.Task[None] | None = None
    """The renewal task, started once the run has lasted one heartbeat interval."""
    heartbeat_timer: asyncio.TimerHandle | None = None
    in_handler: bool = False
    """True while `task` is awaiting an async handler in place (no handler task)."""
    releasing: bool = False
    """True once the handler is over and its outcome is being released (the lease still renewed)."""
    lost: bool = False
    deadline: float = 0.0
    """Loop time until which the lease is surely still ours (kept by the heartbeat)."""


class Scheduler(Generic[B]):
    """Registers jobs and runs each slot once across every replica that shares the backend."""

    @overload
    def __init__(
        self: Scheduler[CB],
        backend: CB,
        *,
        instance_id: str | None = None,
        namespace: str = "anarchon",
        lease: NeedsLeaseBackend[Never] = ...,
        heartbeat: NeedsLeaseBackend[Never] = ...,
        jitter: Duration | None = None,
        stop_timeout: Duration = "10s",
        max_skew: Duration = "2s",
        log: bool | logging.Logger = False,
        clock: Clock | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: Scheduler[LB],
        backend: LB,
        *,
        instance_id: str | None = None,
        namespace: str = "anarchon",
        lease: Duration = "30s",
        heartbeat: Duration = "5s",
        jitter: Duration | None = None,
        stop_timeout: Duration = "10s",
        max_skew: Duration = "2s",
        log: bool | logging.Logger = False,
        clock: Clock | None = None,
    ) -> None: ...

    def __init__(self, backend: Any = None, **settings: Any) -> None:
        if backend is None:
            raise TypeError(
                "a backend is required: none is assumed. Pass e.g. Scheduler(backend=MemoryBackend()) "
                "or use Scheduler.from_url('sqlite:///jobs.db')"
            )
        caps = getattr(backend, "capabilities", None)
        if not isinstance(caps, frozenset) or Capability.CLAIM not in caps or not hasattr(backend, "claim"):
            raise ConfigError(
                f"{backend!r} is not a backend: it must declare `capabilities` with 'claim' and "
                "implement the ClaimBackend protocol (anarchon.backends)"
            )
        known = {"instance_id", "namespace", "lease", "heartbeat", "jitter", "stop_timeout",
                 "max_skew", "log", "clock"}
        for key in settings:
            if key not in known:
                raise ConfigError(
                    f"unknown option {key!r} for Scheduler(): valid options are {', '.join(sorted(known))}"
                )
        self.backend: B = backend
        self.leases = Capability.LEASE in caps
        if not self.leases:
            for key in ("lease", "heartbeat"):
                if key in settings:
                    raise ConfigError(
                        f"option {key!r} needs a lease backend, but {backend!r} is claim-only: "
                        f"remove {key!r}, or use a lease backend"
                    )
        namespace = settings.get("namespace", "anarchon")
        if not isinstance(namespace, str) or not namespace:
            raise ConfigError(f"invalid namespace {namespace!r}: use a non-empty string")
        self.namespace: str = namespace
        self.instance_id: str = settings.get("instance_id") or default_instance_id()
        self.lease_ms = parse_duration(settings.get("lease", "30s"), name="lease")
        self.heartbeat_ms = parse_duration(settings.get("heartbeat", "5s"), name="heartbeat")
        _options.check_heartbeat(self.lease_ms, self.heartbeat_ms)
        jitter = settings.get("jitter")
        self.jitter_ms = None if jitter is None else parse_duration(jitter, name="jitter", allow_zero=True)
        self.stop_timeout_ms = parse_duration(settings.get("stop_timeout", "10s"), name="stop_timeout",
                                              allow_zero=True)
        self.max_skew_ms = parse_duration(settings.get("max_skew", "2s"), name="max_skew", allow_zero=True)
        self.clock: Clock = settings.get("clock") or SystemClock()
        log = settings.get("log", False)
        self.log: logging.Logger = log if isinstance(log, logging.Logger) else logger
        if log is True:
            _enable_console_logging(self.log)
        self.jobs: dict[str, Job] = {}
        # (due, sequence, entry): tuples compare in C, and the sequence keeps ties in push order.
        self._heap: list[tuple[int, int, _Entry]] = []
        self._seq = 0
        self._runs: set[_Run] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake: asyncio.Event | None = None
        self._main: asyncio.Task[None] | None = None
        self._lag: asyncio.Task[None] | None = None
        self._stop_task: asyncio.Task[None] | None = None
        """A stop begun from inside a handler (see `stop`)."""
        self._stopped: asyncio.Event | None = None
        """Set when a stop completes, whoever began it."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._stopping = False
        self._hooks = plugin_manager().hook
        self._rng = random.Random()
        self._slot_draws: dict[tuple[int, int], float] = {}
        self._horizon_ms: int | None = None
        # Releases and renewals made in one loop step go out together where the backend batches them.
        self._releases: StepBatcher[tuple[Lease, ReleaseOutcome], bool] | None = None
        if Capability.RELEASE_MANY in self.backend.capabilities:
            self._releases = StepBatcher(cast(ReleaseManyBackend, self.backend).release_many, self._spawn,
                                         f"{self.backend!r}.release_many")
        self._renewals: StepBatcher[tuple[Lease, int], Lease | None] | None = None
        if Capability.RENEW_MANY in self.backend.capabilities:
            self._renewals = StepBatcher(cast(RenewManyBackend, self.backend).renew_many, self._spawn,
                                         f"{self.backend!r}.renew_many")

    @classmethod
    def from_url(cls, url: str, **settings: Any) -> Scheduler[Any]:
        """Build a scheduler on the installed backend whose URL scheme matches `url`."""
        return Scheduler(backend_for_url(url), **settings)

    def __repr__(self) -> str:
        return f"Scheduler({self.backend!r}, namespace={self.namespace!r}, instance_id={self.instance_id!r})"

    # -- registration -----------------------------------------------------------------------

    @overload
    def every(
        self: Scheduler[CB], name: str, interval: Duration, handler: None = None, *,
        offset: Duration = 0, **options: Unpack[ClaimOnlyJobOptions],
    ) -> Callable[[H], H]: ...
    @overload
    def every(
        self: Scheduler[CB], name: str, interval: Duration, handler: Callable[..., Any], *,
        offset: Duration = 0, **options: Unpack[ClaimOnlyJobOptions],
    ) -> Scheduler[CB]: ...
    @overload
    def every(
        self: Scheduler[LB], name: str, interval: Duration, handler: None = None, *,
        offset: Duration = 0, **options: Unpack[LeaseJobOptions],
    ) -> Callable[[H], H]: ...
    @overload
    def every(
        self: Scheduler[LB], name: str, interval: Duration, handler: Callable[..., Any], *,
        offset: Duration = 0, **options: Unpack[LeaseJobOptions],
    ) -> Scheduler[LB]: ...

    def every(self, name: str, interval: Duration, handler: Any = None, *, offset: Duration = 0,
              **options: Any) -> Any:
        """Run a job on a fixed interval, aligned to the UTC grid (plus `offset`)."""
        self._check_options("every", options, frozenset())
        return self._register(name, Every.parse(interval, offset), handler, options)

    @overload
    def cron(
        self: Scheduler[CB], name: str, expression: str, handler: None = None, *,
        timezone: str = "UTC", dst_gap: DstGap = "next", dst_fold: DstFold = "first",
        **options: Unpack[ClaimOnlyJobOptions],
    ) -> Callable[[H], H]: ...
    @overload
    def cron(
        self: Scheduler[CB], name: str, expression: str, handler: Callable[..., Any], *,
        timezone: str = "UTC", dst_gap: DstGap = "next", dst_fold: DstFold = "first",
        **options: Unpack[ClaimOnlyJobOptions],
    ) -> Scheduler[CB]: ...
    @overload
    def cron(
        self: Scheduler[LB], name: str, expression: str, handler: None = None, *,
        timezone: str = "UTC", dst_gap: DstGap = "next", dst_fold: DstFold = "first",
        **options: Unpack[LeaseJobOptions],
    ) -> Callable[[H], H]: ...
    @overload
    def cron(
        self: Scheduler[LB], name: str, expression: str, handler: Callable[..., Any], *,
        timezone: str = "UTC", dst_gap: DstGap = "next", dst_fold: DstFold = "first",
        **options: Unpack[LeaseJobOptions],
    ) -> Scheduler[LB]: ...

    def cron(self, name: str, expression: str, handler: Any = None, *, timezone: str = "UTC",
             dst_gap: DstGap = "next", dst_fold: DstFold = "first", **options: Any) -> Any:
        """Run a job on a cron expression in an IANA timezone, with explicit DST policies."""
        self._check_options("cron", options, frozenset())
        return self._register(name, Cron(expression, timezone, dst_gap, dst_fold), handler, options)

    @overload
    def at(
        self: Scheduler[CB], name: str, when: datetime | int | float, handler: None = None,
        **options: Unpack[ClaimOnlyJobOptions],
    ) -> Callable[[H], H]: ...
    @overload
    def at(
        self: Scheduler[CB], name: str, when: datetime | int | float, handler: Callable[..., Any],
        **options: Unpack[ClaimOnlyJobOptions],
    ) -> Scheduler[CB]: ...
    @overload
    def at(
        self: Scheduler[LB], name: str, when: datetime | int | float, handler: None = None,
        **options: Unpack[LeaseJobOptions],
    ) -> Callable[[H], H]: ...
    @overload
    def at(
        self: Scheduler[LB], name: str, when: datetime | int | float, handler: Callable[..., Any],
        **options: Unpack[LeaseJobOptions],
    ) -> Scheduler[LB]: ...

    def at(self, name: str, when: datetime | int | float, handler: Any = None, **options: Any) -> Any:
        """Run a job once, at `when` (an aware datetime or epoch seconds)."""
        self._check_options("at", options, frozenset())
        return self._register(name, At.parse(when), handler, options)

    def _check_options(self, method: str, options: dict[str, Any], extra: frozenset[str]) -> None:
        _options.check_names(method, options, extra, lease_backend=self.leases, backend=self.backend)

    def _register(self, name: str, schedule: Schedule, handler: Any, options: dict[str, Any]) -> Any:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"invalid job name {name!r}: use a non-empty string")
        if len(name) > 200 or any(ord(c) < 32 for c in name):
            raise ConfigError(
                f"invalid job name {name!r}: use at most 200 characters and no control characters"
            )
        resolved = _options.resolve(options, lease_ms=self.lease_ms, heartbeat_ms=self.heartbeat_ms)
        if name in self.jobs:
            raise DuplicateJobError(
                f"job {name!r} is already registered (handler "
                f"{_qualname(self.jobs[name].handler)}): job names must be unique in a namespace"
            )
        if handler is None:
            def decorator(func: H) -> H:
                self._add(name, schedule, func, resolved)
                return func
            return decorator
        self._add(name, schedule, handler, resolved)
        return self

    def _add(self, name: str, schedule: Schedule, handler: Any, options: ResolvedOptions) -> None:
        if name in self.jobs:
            raise DuplicateJobError(
                f"job {name!r} is already registered (handler "
                f"{_qualname(self.jobs[name].handler)}): job names must be unique in a namespace"
            )
        takes_ctx, is_async = _options.handler_arity(name, handler)
        jitter = options.jitter_ms
        if jitter is None:
            jitter = self.jitter_ms
        if jitter is None:
            interval = schedule.min_interval_ms
            jitter = 50 if interval is None else min(50, interval // 10)
        self.jobs[name] = Job(name, schedule, handler, options, takes_ctx, is_async, jitter,
                              group=zlib.crc32(name.encode()) % _JITTER_GROUPS,
                              logger=logging.getLogger(f"anarchon.job.{name}"),
                              fingerprint=schedule.fingerprint)
        if self._running:
            self._plan_first(self.jobs[name], self.clock.now_ms())

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def running(self) -> bool:
        """True between `start()` and `stop()`."""
        return self._running

    async def start(self) -> None:
        """Open the backend and begin scheduling; raise `BackendUnavailable` if it cannot be reached."""
        if self._running:
            raise RuntimeError(f"{self!r} is already running")
        self._loop = asyncio.get_running_loop()
        try:
            await self.backend.open()
        except AnarchonError:
            raise
        except Exception as exc:
            raise BackendUnavailable(f"cannot open {self.backend.url}: {exc}") from exc
        self._horizon_ms = self.backend.horizon_ms  # known once the backend is open
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._running = True
        if self.leases and Capability.NOTIFY in self.backend.capabilities:
            await cast(LeaseBackend, self.backend).subscribe(self.namespace, self._on_release)
        now = self.clock.now_ms()
        for job in self.jobs.values():
            self._plan_first(job, now)
        self._main = asyncio.create_task(self._tick_loop(), name="anarchon-ticks")
        self._lag = asyncio.create_task(self._lag_monitor(), name="anarchon-lag")
        self.log.debug("started %s with %d job(s) on %s", self.instance_id, len(self.jobs), self.backend.url)

    async def stop(self) -> None:
        """Stop gracefully: no new claims; running handlers are signalled, then cancelled after
        `stop_timeout`; unfinished runs are released as handover so a backup takes them at once.

        Called from one of this scheduler's handlers, it begins the stop and returns at once: the
        stop completes after that handler has returned.
        """
        if not self._running or self._stopping:
            return
        if _IN_RUN.get() is self:
            # Waiting here would wait for the caller's own run: stop from a task of its own instead.
            self._stop_task = asyncio.get_running_loop().create_task(
                self.stop(), name="anarchon-stop", context=contextvars.Context())
            await asyncio.sleep(0)  # let it begin: no new claims from here on
            return
        self._stopping = True
        for task in (self._main, self._lag):
            if task is not None:
                task.cancel()
        claims = [t for t in self._tasks if not any(r.task is t for r in self._runs)]
        if claims:  # claims in flight finish, so a slot won just now is handed over, not stranded
            await asyncio.wait(claims, timeout=5)
        runs = list(self._runs)
        for run in runs:
            run.ctx.signal.set(_STOP)
        pending = [r.task for r in runs if r.task is not None]
        if pending:
            _done, still = await asyncio.wait(pending, timeout=self.stop_timeout_ms / 1000)
            for run in runs:
                if run.task is not None and run.task in still:
                    if run.handler is not None:
                        run.handler.cancel()
                    elif run.in_handler:
                        run.task.cancel()
            if still:
                await asyncio.wait(still, timeout=5)
        await asyncio.gather(*(t for t in (self._main, self._lag) if t), return_exceptions=True)
        leftovers = list(self._tasks)
        if leftovers:
            await asyncio.wait(leftovers, timeout=5)
        try:
            await self.backend.close()
        finally:
            self._running = False
            self._heap.clear()
            if self._stopped is not None:
                self._stopped.set()
            self.log.debug("stopped %s", self.instance_id)

    def run(self) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully (a blocking helper for scripts).

        A store that cannot be opened (unreachable, refused credentials) ends the process with one
        line on stderr and exit status 1; the traceback is logged only at DEBUG.
        """
        try:
            asyncio.run(self._run_until_signal())
        except AnarchonError as exc:
            self.log.debug("%s failed", self.instance_id, exc_info=exc)
            raise SystemExit(f"anarchon: error: {' '.join(str(exc).split())}") from None

    async def _run_until_signal(self) -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, done.set)
                installed.append(sig)
        try:
            async with self:
                if await self._wait_for_stop_or(done):
                    self.log.info("%s stopping (signal)", self.instance_id)
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    async def _wait_for_stop_or(self, event: asyncio.Event) -> bool:
        """Wait until `event` is set, or until this scheduler has stopped by itself (a handler
        called `stop()`); True if `event` came first."""
        assert self._stopped is not None, "not started"
        waiters = {asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._stopped.wait())}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        return event.is_set()

    # -- planning -------------------------------------------------------------------------------

    def _push(self, due: int, job: Job, slot: int, kind: str, gen: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, _Entry(due, job, slot, kind, gen)))
        if self._wake is not None and self._heap[0][1] == self._seq:
            self._wake.set()

    def _jitter(self, job: Job) -> int:
        return int(self._rng.random() * (job.jitter_ms + 1)) if job.jitter_ms > 0 else 0

    def _slot_jitter(self, job: Job, slot: int) -> int:
        """The job's jitter for `slot`: one draw per (instance, slot, group of jobs).

        Jobs due together share a draw with the other jobs of their group, so they go in one
        claim_many; the groups (a stable hash of the name) keep a boundary's wins spread over the
        replicas, so one crashed replica holds about 1/replicas of the jobs in flight, not all.
        """
        if job.jitter_ms <= 0:
            return 0
        key = (slot, job.group)
        draw = self._slot_draws.get(key)
        if draw is None:
            if len(self._slot_draws) > 4096:
                self._slot_draws.clear()
            draw = self._slot_draws[key] = self._rng.random()
        return int(draw * job.jitter_ms)

    def _plan_first(self, job: Job, now: int) -> None:
        opts = job.options
        prev = job.schedule.prev_slot(now)
        if prev is not None:
            if self.leases and opts.catch_up_ms > 0 and now - prev <= opts.catch_up_ms:
                self._push(now + self._jitter(job), job, prev, "catchup")
            elif isinstance(job.schedule, At):
                why = "catch_up is off" if not self.leases or opts.catch_up_ms == 0 else (
                    f"it is {now - prev} ms in the past, beyond catch_up={opts.catch_up_ms} ms")
                self.log.warning("%s slot=%s will not run: %s", job.name, fmt_slot(prev), why)
        self._plan_next(job, now)

    def _plan_next(self, job: Job, after: int) -> None:
        slot = job.schedule.next_slot(after)
        if slot is not None:
            job.next_due = slot + self._slot_jitter(job, slot)
            self._push(job.next_due, job, slot, "slot")

    def _watch(self, job: Job, slot: int, delay_ms: int, *, backup: bool = False) -> None:
        if job.options.overlap is not Overlap.ALLOW:
            job.watches.clear()
        job.watch_gen += 1
        job.watches[slot] = job.watch_gen
        due = self.clock.now_ms() + max(0, delay_ms)
        if (backup and job.next_due is not None and due >= job.next_due
                and job.options.overlap is not Overlap.ALLOW):
            # The job's next boundary comes first and settles the slot: a newer claim either
            # supersedes it or is skipped, which watches it again. Queueing nothing keeps the heap
            # small with thousands of jobs; a pushed handover still finds the watch. (Not under
            # overlap="allow": there a newer slot neither supersedes nor skips an older one.)
            return
        self._push(due, job, slot, "watch", job.watch_gen)

    def _on_release(self, job_name: str, slot: int) -> None:
        """A pushed release: backups watching that job re-claim at once."""
        job = self.jobs.get(job_name)
        if job is None or not job.watches or self._stopping:
            return
        if slot in job.watches:
            self._watch(job, slot, self._jitter(job))
        elif job.options.overlap is Overlap.BUFFER_ONE:
            self._watch(job, max(job.watches), self._jitter(job))

    # -- the timer loop -------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        assert self._wake is not None
        heap = self._heap
        while True:
            if not heap:
                self._wake.clear()
                await self._wake.wait()
                continue
            now = self.clock.now_ms()
            delay = heap[0][0] - now
            if delay > 0:
                self._wake.clear()
                # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation (stop()) that
                # arrives as the wake-up fires, and this loop would go on claiming for ever.
                waiter = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait({waiter}, timeout=delay / 1000)
                finally:
                    waiter.cancel()
                continue
            batch: list[_Entry] = []
            limit = now + _BATCH_WINDOW_MS
            while heap and (heap[0][0] <= now or (heap[0][0] <= limit and heap[0][2].slot <= now)):
                entry = heapq.heappop(heap)[2]
                if self._accept(entry, now):
                    batch.append(entry)
            if batch:
                self._spawn(self._claim_batch(batch))

    def _accept(self, entry: _Entry, now: int) -> bool:
        """Plan what follows a popped entry, and say whether it still needs a claim."""
        job = entry.job
        if entry.kind == "watch":
            return job.watches.get(entry.slot) == entry.gen
        following = job.schedule.next_slot(entry.slot)
        if entry.kind == "slot":
            nxt = following
            if nxt is not None and nxt <= now:
                # This instance is late (a blocked loop, a suspended host): jump to the newest due
                # slot instead of claiming every one it missed.
                nxt = max(nxt, job.schedule.prev_slot(now) or nxt)
            if nxt is not None:
                job.next_due = nxt + self._slot_jitter(job, nxt)
                self._push(job.next_due, job, nxt, "slot")
            if following is not None and following + job.jitter_ms <= now:
                # ... and not this one either: a newer slot is due (its entry is claimed with or
                # just after this batch), and winning this stale slot would make it skip the newer.
                self.log.info("%s slot=%s missed: this instance is %d ms late", job.name,
                              fmt_slot(entry.slot), now - entry.slot)
                return False
        elif entry.kind == "catchup" and following is not None and following <= now:
            return False  # the next boundary is due already: its entry claims the newer slot
        if entry.kind != "watch" and job.latest_slot is not None and entry.slot < job.latest_slot:
            return False  # a newer slot was claimed already (e.g. catch-up raced a boundary)
        horizon = self._horizon_ms
        if horizon is not None and now - entry.slot > horizon // 2:
            self.log.warning(
                "%s slot=%s missed: %d ms late, beyond half the backend's dedupe horizon (%d ms)",
                job.name, fmt_slot(entry.slot), now - entry.slot, horizon,
            )
            return False
        if entry.kind != "watch":
            job.latest_slot = entry.slot
        return True

    def _request(self, job: Job, slot: int) -> ClaimRequest:
        o = job.options
        return ClaimRequest(
            self.namespace, job.name, slot, self.instance_id, o.lease_ms, o.max_attempts, o.overlap,
            job.fingerprint, self.max_skew_ms,
        )

    async def _claim_batch(self, batch: list[_Entry]) -> None:
        requests = [self._request(e.job, e.slot) for e in batch]
        backend = self.backend
        sent = asyncio.get_running_loop().time()
        try:
            if len(requests) == 1:
                results = [await backend.claim(requests[0])]
            else:
                results = await backend.claim_many(requests)
        except Exception as exc:  # the store failed: retry, never lose the slot or die
            retry_ms = min(1000, self.heartbeat_ms)
            self.log.warning(
                "claim of %d slot(s) failed on %s: %s; retrying in %d ms",
                len(batch), backend.url, _short(exc), retry_ms,
            )
            for entry in batch:
                if entry.job.latest_slot == entry.slot or entry.kind == "watch":
                    self._watch(entry.job, entry.slot, retry_ms + self._jitter(entry.job))
            return
        for entry, request, result in zip(batch, requests, results, strict=True):
            self._hook("anarchon_claim", request=request, result=result)
            try:
                self._handle(entry, result, sent)
            except Exception:  # one bad result must not lose the rest of the batch
                self.log.exception("%s slot=%s: handling the claim's result failed", entry.job.name,
                                   fmt_slot(entry.slot))

    def _handle(self, entry: _Entry, result: ClaimResult, sent: float) -> None:
        job = entry.job
        outcome = result.outcome
        slot = _SlotText(result.slot)
        fingerprint = job.fingerprint
        if result.fingerprint and not job.fingerprint_warned and result.fingerprint != fingerprint:
            job.fingerprint_warned = True
            self.log.warning(
                "%s: the store holds schedule %r but this instance has %r (a rolling deploy?)",
                job.name, result.fingerprint, fingerprint,
            )
        if (job.watches and job.options.overlap is not Overlap.ALLOW and outcome is not ClaimOutcome.SKIPPED
                and outcome is not ClaimOutcome.EARLY):
            for older in [w for w in job.watches if w < result.slot]:
                del job.watches[older]  # a newer slot superseded the older one this instance watched
        if outcome is ClaimOutcome.WON:
            assert result.lease is not None
            job.watches.pop(result.slot, None)
            if result.lease.attempt > 1:
                how = "handover" if result.previous_status == "released" else "takeover"
                self.log.info("%s slot=%s %s attempt=%d (%s)", job.name, slot, how,
                              result.lease.attempt, self.instance_id)
            else:
                self.log.info("%s slot=%s won attempt=%d (%s)", job.name, slot, result.lease.attempt,
                              self.instance_id)
            if self._stopping and self.leases:
                # Won as the instance stops: hand it over at once (batched). A claim-only slot has
                # no handover (the others were told `taken`), so it runs, its signal already set.
                self._spawn(self._send_release(result.lease, ReleaseOutcome.HANDOVER))
                return
            self._start_run(job, result.lease, sent)
        elif outcome is ClaimOutcome.TAKEN:
            level = logging.DEBUG if entry.kind == "watch" else logging.INFO
            self.log.log(level, "%s slot=%s taken by %s", job.name, slot, result.holder or "another instance")
            if self.leases:
                self._watch(job, result.slot, self._backup_delay(job, result), backup=True)
        elif outcome is ClaimOutcome.SKIPPED:
            self.log.info("%s slot=%s skipped (overlap): slot %s still runs on %s", job.name, slot,
                          _SlotText(result.record_slot) if result.record_slot else "?", result.holder)
            if job.options.overlap is Overlap.BUFFER_ONE:
                # The older run's normal end is not pushed: poll for it every heartbeat.
                self._watch(job, result.slot, self._backup_delay(job, result, poll=True), backup=True)
            elif result.record_slot is not None and self.leases and result.holder != self.instance_id:
                # Keep an eye on the older run: if its holder dies, it is taken over as attempt 2.
                self._watch(job, result.record_slot, self._backup_delay(job, result), backup=True)
        elif outcome is ClaimOutcome.EARLY:
            ahead = result.slot - (result.now or result.slot)
            self.log.warning(
                "%s slot=%s early: this instance's clock runs %d ms ahead of the store's; waiting",
                job.name, slot, ahead,
            )
            self._watch(job, result.slot, ahead + self._jitter(job))
        elif outcome is ClaimOutcome.EXHAUSTED:
            job.watches.pop(result.slot, None)
            self.log.warning("%s slot=%s exhausted: %d attempt(s) used, max_attempts=%d", job.name, slot,
                             result.attempt, job.options.max_attempts)
        else:
            job.watches.pop(result.slot, None)
            self.log.debug("%s slot=%s %s", job.name, slot, outcome.value)

    def _backup_delay(self, job: Job, result: ClaimResult, *, poll: bool = False) -> int:
        """When a backup should look again: at the holder's expiry (by the store's clock), and no
        later than one heartbeat where the backend does not push handovers (or with `poll`)."""
        if result.expires_at is not None and result.now is not None:
            delay = result.expires_at - result.now
        else:
            delay = job.options.lease_ms
        if poll or Capability.NOTIFY not in self.backend.capabilities:
            delay = min(delay, job.options.heartbeat_ms)
        return delay + self._jitter(job)

    # -- runs -----------------------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start_run(self, job: Job, lease: Lease, sent: float) -> None:
        ctx = JobContext(
            name=job.name, slot=lease.slot, attempt=lease.attempt, token=lease.token,
            instance_id=self.instance_id, namespace=self.namespace,
            signal=CancelSignal(self._loop),
            logger=job.logger or logging.getLogger(f"anarchon.job.{job.name}"),
        )
        run = _Run(job, lease, ctx, sent, deadline=sent + job.options.lease_ms / 1000)
        if self._stopping:
            ctx.signal.set(_STOP)
        self._runs.add(run)
        run.task = self._spawn(self._run(run))

    async def _run(self, run: _Run) -> None:
        _IN_RUN.set(self)  # this task's own context: stop() called from the handler must not wait for it
        job, ctx = run.job, run.ctx
        started = time.monotonic()
        outcome: ReleaseOutcome | None = ReleaseOutcome.DONE
        error: BaseException | None = None
        try:
            if self.leases:
                if not await self._confirm_lease(run):
                    return
                # Most runs end within one heartbeat: only a run that lasts that long gets a renewal task.
                run.heartbeat_timer = asyncio.get_running_loop().call_later(
                    job.options.heartbeat_ms / 1000, self._start_heartbeat, run)
            self._hook("anarchon_run_started", ctx=ctx)
            timeout = job.options.timeout_ms
            try:
                if timeout is None and job.is_async:
                    # Awaited in this task (no task of its own): stop() cancels this task while
                    # `in_handler` says the handler is what it would interrupt.
                    run.in_handler = True
                    try:
                        await job.handler(*((ctx,) if job.takes_ctx else ()))
                    finally:
                        run.in_handler = False
                else:
                    await self._handler_task(run, timeout)
            except asyncio.CancelledError as exc:
                error = exc
                outcome = ReleaseOutcome.FAILED if ctx.signal.reason == _TIMEOUT else ReleaseOutcome.HANDOVER
            except RunCancelled as exc:
                error = exc
                outcome = self._cancel_outcome(run)
            except Exception as exc:
                error = exc
                outcome = ReleaseOutcome.FAILED
                if ctx.signal.reason != _TIMEOUT:
                    self.log.error("%s slot=%s attempt=%d failed: %s", job.name, fmt_slot(run.lease.slot),
                                   run.lease.attempt, _short(exc), exc_info=exc)
                    outcome = await self._maybe_retry(run)
            if ctx.signal.reason == _TIMEOUT:
                outcome = ReleaseOutcome.FAILED
                self.log.warning("%s slot=%s failed: timeout after %d ms", job.name,
                                 fmt_slot(run.lease.slot), timeout)
        except asyncio.CancelledError as exc:
            error = exc
            outcome = ReleaseOutcome.HANDOVER
        except BaseException as exc:  # SystemExit or KeyboardInterrupt from the handler: unfinished
            error = exc
            outcome = ReleaseOutcome.HANDOVER
            raise
        finally:
            if run.lost:
                outcome = None
            if outcome is not None and self.leases:
                # The lease is renewed until the release lands: a release queued behind other work
                # in a busy store must not let the lease run out, or a backup re-runs a finished slot.
                run.releasing = True
                await self._release(run, outcome)
            if run.heartbeat_timer is not None:
                run.heartbeat_timer.cancel()
            if run.heartbeat is not None:
                run.heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await run.heartbeat
            self._runs.discard(run)
            elapsed = int((time.monotonic() - started) * 1000)
            if outcome is ReleaseOutcome.DONE:
                self.log.debug("%s slot=%s done in %d ms", job.name, _SlotText(run.lease.slot), elapsed)
            elif outcome is ReleaseOutcome.HANDOVER:
                self.log.info("%s slot=%s released for handover attempt=%d", job.name,
                              fmt_slot(run.lease.slot), run.lease.attempt)
            self._hook("anarchon_run_finished", ctx=ctx, outcome=outcome, error=error)
            if outcome is ReleaseOutcome.HANDOVER and job.options.retry_ms is not None and not self._stopping:
                self._watch(job, run.lease.slot, 0)

    async def _handler_task(self, run: _Run, timeout_ms: int | None) -> None:
        """Run the handler as a task of its own (a worker thread's, or one with a timeout); raise
        what it raised."""
        handler = run.handler = asyncio.ensure_future(self._invoke(run.job, run.ctx))
        try:
            done, _ = await asyncio.wait({handler}, timeout=None if timeout_ms is None else timeout_ms / 1000)
        except asyncio.CancelledError:  # the scheduler itself is going away
            handler.cancel()
            raise
        if not done:
            run.ctx.signal.set(_TIMEOUT)  # set first, so the handler's cleanup sees why
            handler.cancel()
            await asyncio.wait({handler})
        handler.result()

    async def _confirm_lease(self, run: _Run) -> bool:
        """Before the handler starts: renew first if little of the lease is left (a loop blocked
        since the claim), and never start a run whose lease is gone: a backup may run it already."""
        loop = asyncio.get_running_loop()
        opts = run.job.options
        interval = opts.heartbeat_ms / 1000
        if run.deadline - loop.time() >= 1.5 * interval:
            return True
        late = int((loop.time() - run.claimed_at) * 1000)
        sent = loop.time()
        renewal = asyncio.ensure_future(self._send_renew(run.lease, opts.lease_ms))
        try:
            done, _ = await asyncio.wait({renewal}, timeout=opts.lease_ms / 1000)
        finally:
            if not renewal.done():
                renewal.cancel()
        renewed = None
        if done and not renewal.cancelled():
            try:
                renewed = renewal.result()
            except Exception as exc:
                self._lose(run, f"not started: the claim is {late} ms old and renewing it failed: "
                                f"{_short(exc)}")
                return False
        if renewed is None:
            self._lose(run, f"not started: the claim is {late} ms old (event loop blocked?) and the lease "
                            "could not be renewed; another instance may have taken the slot over")
            return False
        run.lease = renewed
        run.deadline = sent + opts.lease_ms / 1000
        self.log.info("%s slot=%s renewed before start: the claim was %d ms old", run.job.name,
                      _SlotText(run.lease.slot), late)
        return True

    async def _maybe_retry(self, run: _Run) -> ReleaseOutcome:
        """After a handler error: wait the backoff, then hand the slot over for another attempt."""
        retry, lease = run.job.options.retry_ms, run.lease
        if retry is None or lease.attempt >= run.job.options.max_attempts or run.lost:
            return ReleaseOutcome.FAILED
        backoff = retry * 2 ** (lease.attempt - 1)
        self.log.info("%s slot=%s retry in %d ms", run.job.name, fmt_slot(lease.slot), backoff)
        with contextlib.suppress(RunCancelled):
            await run.ctx.sleep(backoff / 1000)
        return ReleaseOutcome.HANDOVER

    def _hook(self, name: str, **kwargs: Any) -> None:
        """Call an observer hook; a plugin's failure is logged, never raised."""
        hook = getattr(self._hooks, name)
        if not hook.get_hookimpls():
            return  # nobody listens: skip the call on the hot path
        try:
            hook(**kwargs)
        except Exception:
            self.log.exception("plugin hook %s failed", name)

    def _cancel_outcome(self, run: _Run) -> ReleaseOutcome | None:
        reason = run.ctx.signal.reason
        if run.lost or reason == _LEASE_LOST:
            return None
        if reason == _TIMEOUT:
            return ReleaseOutcome.FAILED
        return ReleaseOutcome.HANDOVER

    async def _invoke(self, job: Job, ctx: JobContext) -> None:
        args = (ctx,) if job.takes_ctx else ()
        if job.is_async:
            await job.handler(*args)
            return
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(None, lambda: job.handler(*args))
        if inspect.isawaitable(result):
            await result

    async def _release(self, run: _Run, outcome: ReleaseOutcome) -> None:
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._send_release(run.lease, outcome)
                return
            except Exception as exc:
                # Keep trying while the lease lasts: once it expires, a backup re-runs the slot,
                # even one that completed.
                delay = min(0.2 * attempt, 1.0)
                give_up = attempt >= 3 and loop.time() + delay >= run.deadline
                self.log.warning(
                    "%s slot=%s release (%s) failed: %s%s", run.job.name, fmt_slot(run.lease.slot),
                    outcome.value, _short(exc),
                    "; the lease will expire instead" if give_up else "; retrying",
                )
                if give_up:
                    return
                await asyncio.sleep(delay)

    def _send_release(self, lease: Lease, outcome: ReleaseOutcome) -> Awaitable[bool]:
        """Release one run; with `release_many`, together with the other runs ending now."""
        if self._releases is None:
            return cast(LeaseBackend, self.backend).release(lease, outcome)
        return self._releases.submit((lease, outcome))

    def _send_renew(self, lease: Lease, lease_ms: int) -> Awaitable[Lease | None]:
        """Renew one lease; with `renew_many`, together with the other renewals made now."""
        if self._renewals is None:
            return cast(LeaseBackend, self.backend).renew(lease, lease_ms)
        return self._renewals.submit((lease, lease_ms))

    def _start_heartbeat(self, run: _Run) -> None:
        run.heartbeat_timer = None
        run.heartbeat = asyncio.ensure_future(self._heartbeat(run, first_now=True))

    async def _heartbeat(self, run: _Run, *, first_now: bool = False) -> None:
        backend = cast(LeaseBackend, self.backend)
        opts = run.job.options
        loop = asyncio.get_running_loop()
        interval = opts.heartbeat_ms / 1000
        # The lease is valid until (time the claim or last renewal was sent) + lease, at the latest;
        # judged on this process's monotonic clock so that a blocked loop is noticed.
        deadline = run.deadline
        while True:
            # Wake at the deadline at the latest, so a failing store is noticed when the lease ends,
            # not up to one heartbeat later. (`first_now`: the first interval has passed already.)
            remaining = deadline - loop.time()
            if first_now:
                first_now = False
                remaining = max(remaining, interval + 1e-9)
            else:
                await asyncio.sleep(max(0.0, min(interval, remaining)))
            sent = loop.time()
            if run.releasing and (remaining <= interval or sent >= deadline):
                self._unconfirmed_release(run)
                return
            if remaining <= interval or sent >= deadline:
                late = int((sent - deadline) * 1000)
                why = ("the store did not confirm a renewal before the lease ended" if remaining <= interval
                       else f"renewal came {late} ms too late (event loop blocked?)")
                self._lose(run, why)
                with contextlib.suppress(Exception):
                    await backend.release(run.lease, ReleaseOutcome.HANDOVER)
                return
            try:
                # A renewal that hangs (a partition) must not outlast the lease: past the deadline
                # a backup may already run the slot. (asyncio.wait, not wait_for: on Python 3.11
                # wait_for can swallow a cancellation that arrives as the renewal completes.)
                renewal = asyncio.ensure_future(self._send_renew(run.lease, opts.lease_ms))
                try:
                    done, _ = await asyncio.wait({renewal}, timeout=deadline - sent)
                finally:
                    if not renewal.done():
                        renewal.cancel()
                    elif not renewal.cancelled():
                        renewal.exception()  # mark it seen: a failure as the run ends is no news
                if not done:
                    if run.releasing:
                        self._unconfirmed_release(run)
                    else:
                        self._lose(run, "the store did not answer the renewal before the lease ended")
                    return
                renewed = renewal.result()
            except Exception as exc:
                self.log.warning("%s slot=%s renew failed: %s; retrying", run.job.name,
                                 fmt_slot(run.lease.slot), _short(exc))
                continue
            if renewed is None:
                if not run.releasing:  # (while releasing: the release landed first)
                    self._lose(run, "another instance took the slot over, or the record changed")
                return
            run.lease = renewed
            deadline = run.deadline = sent + opts.lease_ms / 1000

    def _unconfirmed_release(self, run: _Run) -> None:
        self.log.warning("%s slot=%s attempt=%d: the store confirmed neither the release nor a renewal "
                         "before the lease ended; a backup may run the slot again", run.job.name,
                         fmt_slot(run.lease.slot), run.lease.attempt)

    def _lose(self, run: _Run, why: str) -> None:
        run.lost = True
        run.ctx.signal.set(_LEASE_LOST)
        self.log.warning("%s slot=%s lease lost attempt=%d: %s", run.job.name, fmt_slot(run.lease.slot),
                         run.lease.attempt, why)
        self._hook("anarchon_lease_lost", ctx=run.ctx, reason=why)

    async def _lag_monitor(self) -> None:
        """Measure event-loop lag; name the running jobs when the loop was blocked."""
        loop = asyncio.get_running_loop()
        period = 0.5
        threshold = max(0.1, min(self.heartbeat_ms / 1000 / 2, 1.0))
        while True:
            start = loop.time()
            await asyncio.sleep(period)
            lag = loop.time() - start - period
            if lag > threshold:
                running = sorted(r.job.name for r in self._runs)
                names = ", ".join(running[:10]) or "none"
                if len(running) > 10:
                    names += f" and {len(running) - 10} more"
                self.log.warning("event loop blocked for %d ms (running jobs: %s); renewals may be late",
                                 int(lag * 1000), names)

    # -- introspection for tests and tools ------------------------------------------------------

    @property
    def active_runs(self) -> list[JobContext]:
        """Contexts of the runs this instance is executing now."""
        return [r.ctx for r in self._runs]

    # -- decorators, sync apps and ASGI lifespans (thin: the work is in their own modules) -------

    def register(self, obj: object) -> Self:
        """Add the jobs declared with `anarchon.every`/`cron`/`at` on an instance, module or function."""
        from . import _decorators

        _decorators.register(self, obj)
        return self

    def start_in_thread(self, *, timeout: Duration = "30s") -> threading.Thread:
        """Start on a private event loop in a daemon thread (for WSGI apps); return once started."""
        from ._thread import SchedulerThread

        runner: SchedulerThread | None = self.__dict__.get("_thread_runner")
        if runner is not None:
            runner.check_fork()
            if runner.thread is not None and runner.thread.is_alive():
                raise RuntimeError(f"{self!r} is already running in thread {runner.thread.name!r}")
        if self._running:
            raise RuntimeError(f"{self!r} is already running (started with start() on an event loop)")
        runner = SchedulerThread(self)
        self.__dict__["_thread_runner"] = runner
        return runner.start(parse_duration(timeout, name="timeout") / 1000)

    def stop_thread(self, timeout: Duration | None = None) -> bool:
        """Stop a `start_in_thread()` scheduler gracefully; wait up to `timeout` (default
        `stop_timeout` + 10 s). True once stopped; False (logged) if the thread is still running."""
        from ._thread import SchedulerThread

        runner: SchedulerThread | None = self.__dict__.get("_thread_runner")
        if runner is None:
            return True
        wait_ms = (self.stop_timeout_ms + 10_000 if timeout is None
                   else parse_duration(timeout, name="timeout", allow_zero=True))
        return runner.stop(wait_ms / 1000)

    def lifespan(self, app: object = None) -> contextlib.AbstractAsyncContextManager[None]:
        """An ASGI lifespan: `FastAPI(lifespan=scheduler.lifespan)` starts and stops with the app."""
        return _lifespan(self)


@contextlib.asynccontextmanager
async def _lifespan(scheduler: Scheduler[Any]) -> AsyncIterator[None]:
    async with scheduler:
        yield  # None: Starlette merges a yielded mapping into request state


def _qualname(handler: object) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is at the time (test runners swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _enable_console_logging(log: logging.Logger) -> None:
    """`log=True`: INFO lines like 'anarchon: sync slot=… won attempt=1 (host:1:ab12)' on stderr."""
    if any(getattr(h, "_anarchon", False) for h in log.handlers):
        return
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    handler._anarchon = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)

