"""anarchon: leaderless distributed scheduling for Python services.

Every replica registers the same jobs; for each scheduled occurrence (a *slot*) the shared store
makes one atomic decision about which replica runs it. No leader is elected.

    from anarchon import JobContext, MemoryBackend, Scheduler

    scheduler = Scheduler(backend=MemoryBackend(), lease="6s", heartbeat="1s", log=True)

    @scheduler.every("sync", "10s")
    async def sync(ctx: JobContext) -> None:
        await ctx.sleep(0.2)

    scheduler.run()   # until SIGINT/SIGTERM, then a graceful stop

Jobs can also be declared on methods and registered later (`scheduler.register(obj)` returns the
scheduler and accepts an instance, a module or a function):

    from anarchon import cron, every

    class ReportsService:
        @cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
        async def digest(self, ctx: JobContext) -> None: ...

        @every("sync-customers", "10s", timeout="8s")
        def sync(self) -> None: ...          # a plain function runs in a worker thread

    scheduler.register(ReportsService())

In sync apps (Django, Flask, gunicorn sync workers), `scheduler.start_in_thread()` runs the scheduler on
its own event loop in a daemon thread and `scheduler.stop_thread()` stops it gracefully. In ASGI apps,
`FastAPI(lifespan=scheduler.lifespan)`; see `anarchon.integrations`. The `anarchon` command runs,
inspects and previews schedules (`anarchon --help`).

Drivers live in their own distributions (anarchon-sqlite, anarchon-redis, anarchon-postgres,
anarchon-rabbitmq, anarchon-nats) and are found through the `anarchon` entry-point group, so
`Scheduler.from_url("redis://localhost")` works once the driver is installed.
"""

from typing import TYPE_CHECKING

from ._clock import Clock, SystemClock
from ._context import CancelSignal, JobContext
from ._duration import Duration, parse_duration
from ._errors import (
    AnarchonError,
    BackendError,
    BackendNotFound,
    BackendUnavailable,
    ConfigError,
    DuplicateJobError,
    JobNameError,
    JobRegistered,
    LeaseLost,
    OptionError,
    RunCancelled,
    ScheduleError,
    SchemaMismatch,
    UnknownJob,
)
from ._events import Event
from ._history import next_slot_of
from ._job import Job
from ._options import ClaimJobOptions, LeaseJobOptions
from ._plugins import PluginError, backend_classes, backend_for_url, plugin_errors, plugin_manager
from ._scheduler import Scheduler
from ._schedules import At, Cron, Every, Schedule, from_ms, to_ms
from ._settings import Settings
from ._stored import (
    NewSchedule,
    ScheduleAddResult,
    ScheduleConflict,
    ScheduleNotFound,
    SchedulePage,
    Schedules,
    StoredSchedule,
)
from .backends import (
    CONTROLS_CHANGED,
    DEFAULT_HISTORY,
    ERROR_LIMIT,
    Capability,
    CatalogueEntry,
    ClaimBackend,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    ControlBackend,
    ForgetBackend,
    HistoryBackend,
    JobControl,
    JobState,
    JobStatus,
    Lease,
    LeaseBackend,
    Overlap,
    ReleaseOutcome,
    RunRecord,
)
from .backends import lazy_exports as _lazy_exports
from .hookspecs import hookimpl

if TYPE_CHECKING:
    from ._decorators import at, cron, every
    from .backends import MemoryBackend, MemoryClaimBackend, MemoryStore

__version__ = "0.1.0"

__all__ = [
    "CONTROLS_CHANGED",
    "DEFAULT_HISTORY",
    "ERROR_LIMIT",
    "AnarchonError",
    "At",
    "BackendError",
    "BackendNotFound",
    "BackendUnavailable",
    "CancelSignal",
    "Capability",
    "CatalogueEntry",
    "ClaimBackend",
    "ClaimJobOptions",
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "Clock",
    "ConfigError",
    "ControlBackend",
    "Cron",
    "DuplicateJobError",
    "Duration",
    "Event",
    "Every",
    "ForgetBackend",
    "HistoryBackend",
    "Job",
    "JobContext",
    "JobControl",
    "JobNameError",
    "JobRegistered",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseBackend",
    "LeaseJobOptions",
    "LeaseLost",
    "MemoryBackend",
    "MemoryClaimBackend",
    "MemoryStore",
    "NewSchedule",
    "OptionError",
    "Overlap",
    "PluginError",
    "ReleaseOutcome",
    "RunCancelled",
    "RunRecord",
    "Schedule",
    "ScheduleAddResult",
    "ScheduleConflict",
    "ScheduleError",
    "ScheduleNotFound",
    "SchedulePage",
    "Scheduler",
    "Schedules",
    "SchemaMismatch",
    "Settings",
    "StoredSchedule",
    "SystemClock",
    "UnknownJob",
    "at",
    "backend_classes",
    "backend_for_url",
    "cron",
    "every",
    "from_ms",
    "hookimpl",
    "next_slot_of",
    "parse_duration",
    "plugin_errors",
    "plugin_manager",
    "to_ms",
]

if not TYPE_CHECKING:
    # Imported on first use (PEP 562): the in-process backends, as in `anarchon.backends`, and the
    # decorators that declare jobs on methods, which a process that registers its jobs with
    # `scheduler.every(...)` never needs.
    __getattr__, __dir__ = _lazy_exports(__name__, {
        **dict.fromkeys(("MemoryBackend", "MemoryClaimBackend", "MemoryStore"), "backends"),
        **dict.fromkeys(("at", "cron", "every"), "_decorators"),
    })
