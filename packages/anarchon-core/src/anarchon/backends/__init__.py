"""Backend interfaces, result types, the claim decision, and the in-process reference backends."""

from ._base import BackendBase, lazy_exports, redact_url
from ._decide import ClaimDecision, LeaseRecord, decide
from ._memory import MemoryBackend, MemoryClaimBackend, MemoryStore
from ._protocols import (
    Capability,
    ClaimBackend,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobState,
    JobStatus,
    Lease,
    LeaseBackend,
    Overlap,
    ReleaseCallback,
    ReleaseManyBackend,
    ReleaseOutcome,
    RenewManyBackend,
)

__all__ = [
    "BackendBase",
    "Capability",
    "ClaimBackend",
    "ClaimDecision",
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseBackend",
    "LeaseRecord",
    "MemoryBackend",
    "MemoryClaimBackend",
    "MemoryStore",
    "Overlap",
    "ReleaseCallback",
    "ReleaseManyBackend",
    "ReleaseOutcome",
    "RenewManyBackend",
    "decide",
    "lazy_exports",
    "redact_url",
]
