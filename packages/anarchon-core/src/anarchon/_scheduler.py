"""The scheduler: settings, the jobs registered, and start and stop. The work while it runs is the
engine's (`_engine`): the planner, claim outcomes, the run supervisor and the lease keeper."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import threading
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Never, Self, TypeVar, Unpack, cast, overload

from . import _options
from ._clock import Clock
from ._context import JobContext
from ._duration import Duration, parse_duration
from ._engine import Engine
from ._errors import AnarchonError, BackendUnavailable, ConfigError, DuplicateJobError
from ._events import EventName, Listener, Listeners, Observers, check_event
from ._job import Job, check_name
from ._logs import qualname
from ._options import (
    ClaimOnlyJobOptions,
    LeaseJobOptions,
    NeedsControlBackend,
    NeedsLeaseBackend,
    NeedsScheduleBackend,
)
from ._plugins import backend_for_url, plugin_manager
from ._runs import running_for
from ._schedules import At, Cron, DstFold, DstGap, Every, Schedule
from ._settings import Settings
from ._sibling import second_backend
from ._signals import SecondSignal, run_until_signal
from ._stored import Schedules
from ._sweeper import Task
from .backends import (
    DEFAULT_HISTORY,
    Capability,
    ClaimBackend,
    ControlBackend,
    JobControl,
    LeaseBackend,
    ScheduleBackend,
)

if TYPE_CHECKING:
    from ._thread import SchedulerThread

__all__ = ["Scheduler"]


B = TypeVar("B", bound=ClaimBackend)
LB = TypeVar("LB", bound=LeaseBackend)
CB = TypeVar("CB", bound=ClaimBackend)
CtB = TypeVar("CtB", bound=ControlBackend)
SchB = TypeVar("SchB", bound=ScheduleBackend)
H = TypeVar("H", bound=Callable[..., Any])
L = TypeVar("L", bound=Listener)

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
        block_limit: NeedsLeaseBackend[Never] = ...,
        log: bool | logging.Logger = False,
        clock: Clock | None = None,
        history: int = ...,
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
        block_limit: Duration = "1m",
        log: bool | logging.Logger = False,
        clock: Clock | None = None,
        history: int = DEFAULT_HISTORY,
    ) -> None: ...

    def __init__(self, backend: Any = None, **settings: Any) -> None:
        if backend is None:
            raise TypeError(
                "a backend is required: none is assumed. Pass e.g. Scheduler(backend=MemoryBackend()) "
                "or use Scheduler.from_url('sqlite:///jobs.db')"
            )
        self.backend: B = backend
        self.settings: Settings = Settings.parse(backend, settings)
        """The settings, checked, with every default filled in; the engine gets them as they are."""
        self.jobs: dict[str, Job] = {}
        self.tasks: dict[str, Task] = {}
        """The tasks registered with `task`: the handlers that stored schedules name."""
        self._schedules: Schedules | None = None
        self._engine: Engine | None = None
        """The running engine: set from `start()` until `stop()` ends."""
        self._stopping = False
        self._stop_task: asyncio.Task[None] | None = None
        """A stop begun from inside a handler (see `stop`)."""
        self._stopped: asyncio.Event | None = None
        """Set when a stop completes, whoever began it."""
        self._thread_runner: SchedulerThread | None = None
        self._exit = SecondSignal(lambda: self.instance_id, self.settings.log, lambda: self.active_runs)
        """Ends the process at once on a second SIGINT or SIGTERM while a stop waits for a handler."""
        self._listeners = Listeners(self.settings.log)
        self._hook = Observers(plugin_manager(), self._listeners, self.settings.log)
        """Delivers the engine's observer hooks to plugins and listeners (a failure is logged)."""

    @classmethod
    def from_url(cls, url: str, **settings: Any) -> Scheduler[Any]:
        """Build a scheduler on the installed backend whose URL scheme matches `url`."""
        return Scheduler(backend_for_url(url), **settings)

    def __repr__(self) -> str:
        return f"Scheduler({self.backend!r}, namespace={self.namespace!r}, instance_id={self.instance_id!r})"

    # -- the settings, one by one (read-only: `settings` holds them) ------------------------------

    @property
    def namespace(self) -> str:
        """The namespace this scheduler's jobs live in."""
        return self.settings.namespace

    @property
    def instance_id(self) -> str:
        """This replica's name in the store."""
        return self.settings.instance_id

    @instance_id.setter
    def instance_id(self, value: str) -> None:
        if self._engine is not None:
            raise RuntimeError(f"{self!r} is running: its instance id cannot change")
        self.settings = self.settings.with_instance_id(value)

    @property
    def leases(self) -> bool:
        """True when the backend keeps leases."""
        return self.settings.leases

    @property
    def lease_ms(self) -> int:
        """A job's default lease, ms."""
        return self.settings.lease_ms

    @property
    def heartbeat_ms(self) -> int:
        """The heartbeat, ms."""
        return self.settings.heartbeat_ms

    @property
    def jitter_ms(self) -> int | None:
        """The claim jitter, ms (None: per job, from its interval)."""
        return self.settings.jitter_ms

    @property
    def stop_timeout_ms(self) -> int:
        """How long a stop gives running handlers, ms."""
        return self.settings.stop_timeout_ms

    @property
    def max_skew_ms(self) -> int:
        """How far in the store's future a slot may be claimed, ms."""
        return self.settings.max_skew_ms

    @property
    def block_limit_ms(self) -> int:
        """How long a blocked event loop keeps its leases, ms."""
        return self.settings.block_limit_ms

    @property
    def clock(self) -> Clock:
        """The wall clock."""
        return self.settings.clock

    @property
    def history(self) -> int:
        """Ended runs kept per job in the store (0: none, and no job catalogue either)."""
        return self.settings.history

    @property
    def log(self) -> logging.Logger:
        """Where the scheduler logs."""
        return self.settings.log

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

    # -- schedules as data -----------------------------------------------------------------------

    @overload
    def task(self: Scheduler[SchB], name: str) -> Callable[[H], H]: ...
    @overload
    def task(self: Scheduler[CB], name: NeedsScheduleBackend[Never]) -> Callable[[H], H]: ...

    def task(self, name: Any) -> Any:
        """Register the decorated function as task `name`: it runs the stored schedules that name it,
        called with the run's `JobContext` and the schedule's arguments as keywords."""
        self._check_schedules("task")
        try:
            check_name(name)
        except AnarchonError as exc:
            raise type(exc)(str(exc).replace("job name", "task name")) from None
        if name in self.tasks:
            raise DuplicateJobError(f"task {name!r} is already registered (handler "
                                    f"{qualname(self.tasks[name].handler)}): task names must be unique")

        def decorator(func: H) -> H:
            if not callable(func):
                raise ConfigError(f"task {name!r}: {func!r} is not callable: decorate a function")
            self.tasks[name] = Task(name, func, _task_is_async(name, func))
            if self._engine is not None:
                self._engine.tasks_changed(self.tasks)  # (registered while running: swept from now on)
            return func

        return decorator

    @property
    def schedules(self) -> Schedules:
        """The schedules kept in this scheduler's store and namespace: add, update, remove, get, list."""
        if self._schedules is None:
            self._check_schedules("schedules")
            self._schedules = Schedules(
                cast(ScheduleBackend, self.backend), namespace=self.namespace, clock=self.clock,
                max_skew=f"{self.max_skew_ms}ms", opened=lambda: self._engine is not None,
                known_tasks=lambda: set(self.tasks))
        return self._schedules

    def _check_schedules(self, what: str) -> None:
        if Capability.SCHEDULES not in self.backend.capabilities:
            raise ConfigError(
                f"{what} needs a backend that keeps schedules as data, but {self.backend!r} does not declare "
                "the 'schedules' capability: use SQLite, PostgreSQL, Redis or Valkey (or MemoryBackend), or "
                "register the job in code with every(), cron() or at()")

    def register(self, obj: object) -> Self:
        """Add the jobs declared with `anarchon.every`/`cron`/`at` on an instance, module or function."""
        from ._decorators import register  # only for jobs declared with the decorators

        register(self, obj)
        return self

    def _check_options(self, method: str, options: dict[str, Any], extra: frozenset[str]) -> None:
        _options.check_names(method, options, extra, lease_backend=self.leases, backend=self.backend)

    def _register(self, name: str, schedule: Schedule, handler: Any, options: dict[str, Any]) -> Any:
        check_name(name)
        resolved = _options.resolve(options, lease_ms=self.lease_ms, heartbeat_ms=self.heartbeat_ms,
                                    leases=self.leases)
        self._check_new(name)
        if handler is None:
            def decorator(func: H) -> H:
                self._add(Job(name, schedule, resolved, func))
                return func
            return decorator
        self._add(Job(name, schedule, resolved, handler))
        return self

    def _check_new(self, name: str) -> None:
        engine = self._engine
        if engine is not None and engine.sweeper is not None and engine.sweeper.job(name) is not None:
            raise DuplicateJobError(f"job {name!r} is a stored schedule of this namespace: a code job "
                                    "cannot share its name; remove the stored schedule or pick another name")
        if name in self.jobs:
            raise DuplicateJobError(
                f"job {name!r} is already registered (handler "
                f"{qualname(self.jobs[name].handler)}): job names must be unique in a namespace"
            )

    def _add(self, job: Job) -> None:
        self._check_new(job.name)
        self.jobs[job.name] = job
        if self._engine is not None:
            self._engine.add(job)

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
        return self._engine is not None

    @property
    def active_runs(self) -> list[JobContext]:
        """Contexts of the runs this instance is executing now."""
        return [] if self._engine is None else self._engine.runs.active

    async def start(self) -> None:
        """Open the backend and begin scheduling; raise `BackendUnavailable` if it cannot be reached."""
        if self._engine is not None:
            raise RuntimeError(f"{self!r} is already running")
        try:
            await self.backend.open()
        except AnarchonError:
            raise
        except Exception as exc:
            raise BackendUnavailable(f"cannot open {self.backend.url}: {exc}") from exc
        self._stopped = asyncio.Event()
        self._stopping = False
        try:
            self._engine = await Engine.start(self.backend, self.settings, list(self.jobs.values()),
                                              hook=self._hook, owner=self, sibling=self._sibling,
                                              tasks=self.tasks)
        except BaseException:
            await self.backend.close()
            raise
        self.log.debug("started %s with %d job(s) on %s", self.instance_id, len(self.jobs), self.backend.url)

    async def stop(self) -> None:
        """Stop gracefully: no new claims; running handlers are signalled, then cancelled after
        `stop_timeout`; unfinished runs are released as handover so a backup takes them at once.

        Called from one of this scheduler's handlers, it begins the stop and returns at once: the
        stop completes after that handler has returned.
        """
        engine = self._engine
        if engine is None or self._stopping:
            return
        if running_for() is self:
            # Waiting here would wait for the caller's own run: stop from a task of its own instead.
            self._stop_task = asyncio.get_running_loop().create_task(
                self.stop(), name="anarchon-stop", context=contextvars.Context())
            await asyncio.sleep(0)  # let it begin: no new claims from here on
            return
        self._stopping = True
        try:
            await engine.stop(self._exit.arm)
            await self._listeners.drain(5)
        finally:
            self._exit.disarm()
            try:
                await self.backend.close()
            finally:
                self._engine = None
                if self._stopped is not None:
                    self._stopped.set()
                self.log.debug("stopped %s", self.instance_id)

    # -- cluster-wide controls ---------------------------------------------------------------------

    # Each has a second signature for backends that store no controls, whose `name` no value has:
    # a type checker then rejects the call (and the call raises ConfigError at run time).
    @overload
    async def pause(self: Scheduler[CtB], name: str, *, force: bool = False) -> None: ...
    @overload
    async def pause(self: Scheduler[CB], name: NeedsControlBackend[Never], *,
                    force: bool = False) -> None: ...

    async def pause(self, name: Any, *, force: bool = False) -> None:
        """Pause job `name` on every replica: its slots are skipped (paused) until `resume`.

        A job neither registered here nor known to the store (registered by a live replica, or run
        once) is refused with `UnknownJob`; `force=True` pauses it all the same (not deployed yet)."""
        await self._control(name, "pause", force, paused=True)

    @overload
    async def resume(self: Scheduler[CtB], name: str, *, force: bool = False) -> None: ...
    @overload
    async def resume(self: Scheduler[CB], name: NeedsControlBackend[Never], *,
                    force: bool = False) -> None: ...

    async def resume(self, name: Any, *, force: bool = False) -> None:
        """Resume a paused job on every replica, from its next slot (`force` as for `pause`)."""
        await self._control(name, "resume", force, paused=False)

    @overload
    async def trigger(self: Scheduler[CtB], name: str, *, force: bool = False) -> int: ...
    @overload
    async def trigger(self: Scheduler[CB], name: NeedsControlBackend[Never], *,
                    force: bool = False) -> int: ...

    async def trigger(self, name: Any, *, force: bool = False) -> int:
        """Run job `name` once now, on exactly one replica, under a trigger slot of its own; return its id
        (`force` as for `pause`)."""
        return (await self._control(name, "trigger", force, trigger=True)).trigger

    async def _control(self, name: str, verb: str, force: bool, *, paused: bool | None = None,
                       trigger: bool = False) -> JobControl:
        from .inspect import Inspector  # only a process that issues controls needs it

        engine = self._engine
        force = force or (isinstance(name, str) and name in self.jobs)  # its own job: known
        # While running, the backend is open and stays so; otherwise it is opened for this call only.
        async with Inspector(self.backend, namespace=self.namespace, close=engine is None) as store:
            if trigger:
                control = await store.trigger(name, force=force)
            else:
                change = store.pause if paused else store.resume
                control = await change(name, force=force)
        if engine is not None and engine.controls is not None:
            engine.controls.apply(name, control)  # this replica need not wait for its next poll
        return control

    def run(self, *, tune_gc: bool = True) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully (a blocking helper for scripts).

        A store that cannot be opened (unreachable, refused credentials) ends the process with one
        line on stderr and exit status 1; the traceback is logged only at DEBUG.

        `tune_gc`: once the scheduler has started, the objects alive then (the imports, the app's
        set-up, the jobs, the store's connections) are left out of the garbage collector's later
        passes (`gc.freeze()`), so a full collection, a pause of the whole process, traverses only
        what came after; and the youngest generation is collected every 10,000 new objects instead of
        every 700, so fewer of the objects of runs in flight are traversed again and again. `False`
        leaves the collector as it is.
        """
        try:
            asyncio.run(run_until_signal(self, self._exit, tune_gc=tune_gc))
        except AnarchonError as exc:
            self.log.debug("%s failed", self.instance_id, exc_info=exc)
            raise SystemExit(f"anarchon: error: {' '.join(str(exc).split())}") from None

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

    @overload
    def on(self, event: EventName, listener: Listener) -> Listener: ...

    @overload
    def on(self, event: EventName, listener: None = None) -> Callable[[L], L]: ...

    def on(self, event: EventName, listener: Any = None) -> Any:
        """Call `listener(event)` for each `event` on this scheduler (a decorator without `listener`).

        A coroutine function runs as a task of its own; a listener that raises is logged."""
        name = check_event(event)
        if listener is None:
            def decorator(fn: L) -> L:
                self._listeners.add(name, fn)
                return fn
            return decorator
        self._listeners.add(name, listener)
        return listener

    def off(self, event: EventName, listener: Listener) -> bool:
        """Stop calling `listener` for `event`; False if it was not listening."""
        return self._listeners.remove(check_event(event), listener)

    def _sibling(self) -> tuple[Any, str]:
        """A second backend on the same store for the lease keeper's thread (see `second_backend`)."""
        return second_backend(self.backend, self.clock)

    # -- sync apps and ASGI lifespans (thin: the work is in their own modules) ------------------

    def start_in_thread(self, *, timeout: Duration = "30s") -> threading.Thread:
        """Start on a private event loop in a daemon thread (for WSGI apps); return once started."""
        runner = self._thread_runner
        if runner is not None:
            runner.check_fork()
            if runner.thread is not None and runner.thread.is_alive():
                raise RuntimeError(f"{self!r} is already running in thread {runner.thread.name!r}")
        if self._engine is not None:
            raise RuntimeError(f"{self!r} is already running (started with start() on an event loop)")
        from ._thread import SchedulerThread  # only sync apps run a scheduler in a thread

        runner = self._thread_runner = SchedulerThread(self)
        return runner.start(parse_duration(timeout, name="timeout") / 1000)

    def stop_thread(self, timeout: Duration | None = None) -> bool:
        """Stop a `start_in_thread()` scheduler gracefully; wait up to `timeout` (default
        `stop_timeout` + 10 s). True once stopped; False (logged) if the thread is still running."""
        runner = self._thread_runner
        if runner is None:
            return True
        wait_ms = (self.stop_timeout_ms + 10_000 if timeout is None
                   else parse_duration(timeout, name="timeout", allow_zero=True))
        return runner.stop(wait_ms / 1000)

    def lifespan(self, app: object = None) -> contextlib.AbstractAsyncContextManager[None]:
        """An ASGI lifespan: `FastAPI(lifespan=scheduler.lifespan)` starts and stops with the app."""
        return _lifespan(self)


def _task_is_async(name: str, func: Callable[..., Any]) -> bool:
    """Whether task `name`'s handler is a coroutine function; `ConfigError` unless it takes the run's
    `JobContext` first (the schedule's arguments follow as keywords)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is not None and not (params and params[0].kind in (
            inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.VAR_POSITIONAL)):
        raise ConfigError(f"task {name!r}: handler {qualname(func)} must take the run's JobContext first, "
                          "then the schedule's arguments as keywords: def send(ctx: JobContext, **args)")
    return inspect.iscoroutinefunction(func)


async def start_for_app(scheduler: Scheduler[Any]) -> None:
    """Start `scheduler` inside a host app (an ASGI lifespan): a start that fails raises one exception,
    whose message names the store and what to fix, without the driver's chain of causes (dozens of
    lines in the server's log); the chain is kept where the scheduler logs at DEBUG."""
    try:
        await scheduler.start()
    except AnarchonError as exc:
        if scheduler.log.isEnabledFor(logging.DEBUG):
            scheduler.log.debug("%s did not start", scheduler.instance_id, exc_info=exc)
        raise exc.with_traceback(None) from None


@contextlib.asynccontextmanager
async def _lifespan(scheduler: Scheduler[Any]) -> AsyncIterator[None]:
    await start_for_app(scheduler)
    try:
        yield  # None: Starlette merges a yielded mapping into request state
    finally:
        await scheduler.stop()
