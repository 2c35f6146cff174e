"""Backend interfaces, result types, the claim decision, and the in-process reference backends."""

from typing import TYPE_CHECKING

from .. import _speed
from ._base import (
    BackendBase,
    LeaseBackendBase,
    check_expect,
    check_schedule_batch,
    deliver_wins,
    lazy_exports,
    read_wins,
    redact_url,
    wins_text,
)
from ._protocols import (
    CONTROLS_CHANGED,
    DEFAULT_HISTORY,
    ERROR_LIMIT,
    SCHEDULE_PARTITIONS,
    SCHEDULES_CHANGED,
    AnnounceBackend,
    Capability,
    CatalogueEntry,
    ClaimBackend,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    ControlBackend,
    ForgetBackend,
    HistoryBackend,
    InspectBackend,
    JobControl,
    JobState,
    JobStatus,
    Lease,
    LeaseBackend,
    LeaseRecord,
    Overlap,
    ReleaseCallback,
    ReleaseOutcome,
    RunRecord,
    ScheduleBackend,
    ScheduleRecord,
    ScheduleWrite,
    ScheduleWriteResult,
    WinsCallback,
    schedule_partition,
)

del _speed  # imported for its effect: the result types above get their cheaper `__init__` there

__all__ = [
    "DEFAULT_HISTORY",
    "ERROR_LIMIT",
    "AnnounceBackend",
    "BackendBase",
    "Capability",
    "CatalogueEntry",
    "ClaimBackend",
    "ClaimDecision",
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "CONTROLS_CHANGED",
    "ControlBackend",
    "ForgetBackend",
    "HistoryBackend",
    "InspectBackend",
    "JobControl",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseBackend",
    "LeaseBackendBase",
    "LeaseRecord",
    "MemoryBackend",
    "MemoryClaimBackend",
    "MemoryStore",
    "Overlap",
    "ReleaseCallback",
    "ReleaseDecision",
    "ReleaseOutcome",
    "RenewDecision",
    "RunRecord",
    "SCHEDULE_PARTITIONS",
    "SCHEDULES_CHANGED",
    "ScheduleBackend",
    "ScheduleRecord",
    "ScheduleWrite",
    "ScheduleWriteResult",
    "WinsCallback",
    "decide",
    "decide_release",
    "decide_renew",
    "check_expect",
    "check_schedule_batch",
    "deliver_wins",
    "lazy_exports",
    "read_wins",
    "redact_url",
    "schedule_partition",
    "wins_text",
]

if TYPE_CHECKING:
    from ._decide import ClaimDecision, ReleaseDecision, RenewDecision, decide, decide_release, decide_renew
    from ._memory import MemoryBackend, MemoryClaimBackend, MemoryStore

# The claim table and the in-process backends are imported on first use (PEP 562): a process that
# runs on another store never needs them, and they are about a tenth of the core's own import.
_EXPORTS = {
    **dict.fromkeys(("ClaimDecision", "ReleaseDecision", "RenewDecision", "decide", "decide_release",
                     "decide_renew"), "_decide"),
    **dict.fromkeys(("MemoryBackend", "MemoryClaimBackend", "MemoryStore"), "_memory"),
}

if not TYPE_CHECKING:
    # Hidden from type checkers, which would otherwise accept any name imported from this package.
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
