"""Backend interfaces, result types, the claim decision, and the in-process reference backends."""

from ._base import BackendBase, LeaseBackendBase, lazy_exports, redact_url
from ._decide import ClaimDecision, ReleaseDecision, RenewDecision, decide, decide_release, decide_renew
from ._memory import MemoryBackend, MemoryClaimBackend, MemoryStore
from ._protocols import (
    Capability,
    ClaimBackend,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    InspectBackend,
    JobState,
    JobStatus,
    Lease,
    LeaseBackend,
    LeaseRecord,
    Overlap,
    ReleaseCallback,
    ReleaseOutcome,
)

__all__ = [
    "BackendBase",
    "Capability",
    "ClaimBackend",
    "ClaimDecision",
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "InspectBackend",
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
    "decide",
    "decide_release",
    "decide_renew",
    "lazy_exports",
    "redact_url",
]
