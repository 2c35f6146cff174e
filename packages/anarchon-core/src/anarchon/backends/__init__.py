"""Backend interfaces, result types, and the in-process reference backends."""

from ._base import BackendBase, redact_url
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
)

__all__ = [
    "BackendBase",
    "Capability",
    "ClaimBackend",
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseBackend",
    "MemoryBackend",
    "MemoryClaimBackend",
    "MemoryStore",
    "Overlap",
    "ReleaseCallback",
    "ReleaseManyBackend",
    "ReleaseOutcome",
    "redact_url",
]
