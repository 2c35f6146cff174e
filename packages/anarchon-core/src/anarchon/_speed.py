"""Speed tricks: code that does what plainer code would do, for less CPU, each kept by a measurement.

The contract (`backends/_protocols.py`) and the engine read as plain Python; what makes them cheaper
lives here, named as such. Each trick says what it saves, counted by the benchmark of the claim path,
which counts the CPU instructions a replica spends per claim attempt (repeatable on a busy machine):

    python bench/profile_claims.py memory --jobs 500 --rounds 3 --seed 1 --callgrind
    python bench/profile_claims.py redis://127.0.0.1:6379/13 --jobs 500 --rounds 3 --seed 1 --callgrind

(with `--block prometheus,opentelemetry,dashboard` where those plugins are installed). Two runs of one
version differ by up to 3 %: a trick whose removal costs less than that does not pay, and is removed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final, TypeVar

from .backends._protocols import (
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobStatus,
    Lease,
    LeaseRecord,
    Overlap,
    ReleaseOutcome,
    RunRecord,
)

__all__ = [
    "CLAIM_DONE", "CLAIM_EARLY", "CLAIM_EXHAUSTED", "CLAIM_SKIPPED", "CLAIM_STALE", "CLAIM_TAKEN",
    "CLAIM_WON",
    "OVERLAP_ALLOW", "OVERLAP_BUFFER_ONE", "OVERLAP_REPLACE", "OVERLAP_SKIP",
    "RELEASE_DONE", "RELEASE_FAILED", "RELEASE_HANDOVER",
    "STATUS_DONE", "STATUS_FAILED", "STATUS_RELEASED", "STATUS_RUNNING",
    "fast_init",
]

_T = TypeVar("_T")


# -- 1. The result types, filled without their frozen __setattr__ ----------------------------------
# ClaimRequest, ClaimResult and Lease are made once or twice per claim attempt; a decide-based store
# (MemoryBackend, SQLite, NATS Key-Value) adds a LeaseRecord and a ClaimDecision. Measured without
# it: 124,000 instructions per claim attempt on "memory" against 103,000 (+20 %), 127,000 on Redis
# against 117,000 (+8 %).

def fast_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an `__init__` with the same signature that fills the slots
    cheaply: these types are made once or twice per claim attempt.

    The generated `__init__` calls `object.__setattr__` per field, and storing through each slot's
    descriptor (`__set__`) still costs a call with an argument tuple per field. This one lends the
    new instance, for the length of `__init__`, a twin class with no frozen `__setattr__`, so each
    field is a plain slot store; then gives it its own class back. The twin is a subclass that adds
    no slots: `__class__` assignment then finds the layouts equal by the common base, without
    comparing two classes' `__slots__` name by name. (An instance of a subclass that inherits this
    `__init__` is filled through the descriptors instead.)
    """
    params: list[str] = []
    fast: list[str] = []
    slow: list[str] = []
    twin = type(f"_{cls.__name__}Fill", (cls,), {"__slots__": (), "__module__": cls.__module__,
                                                 "__setattr__": object.__setattr__,
                                                 "__delattr__": object.__delattr__})
    names: dict[str, Any] = {"_cls": cls, "_twin": twin, "_set_class": object.__setattr__}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        assert f.init and f.default_factory is dataclasses.MISSING and not f.kw_only
        names[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            names[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        fast.append(f"        self.{f.name} = {f.name}")
        slow.append(f"        _set_{f.name}(self, {f.name})")
    assert not hasattr(cls, "__post_init__")
    exec(f"def __init__(self, {', '.join(params)}):\n"
         "    if type(self) is _cls:\n"
         "        _set_class(self, '__class__', _twin)\n"
         + "\n".join(fast) + "\n"
         "        self.__class__ = _cls\n"
         "    else:\n"
         + "\n".join(slow), names)
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


for _cls in (ClaimRequest, Lease, ClaimResult, LeaseRecord, RunRecord):
    fast_init(_cls)
# (`backends/_decide.py` applies it to its decisions, which it builds once per claim, renewal or release.)


# -- 2. Enum members read as module globals ---------------------------------------------------------
# On Python 3.11 every read of an Enum class's attribute (`ClaimOutcome.WON`) goes through
# `EnumType.__getattr__`'s slot: about 45 ns, against 5 ns for a module global (3.12 drops that hook).
# The claim path compares outcomes, statuses and overlaps a dozen times per claim attempt. Measured
# with every member read from its class instead: 112,000 instructions per claim attempt on "memory"
# against 103,000 (+8 %), 127,000 on Redis against 116,000 (+9 %). A module imports the members it
# compares from here, e.g. `from ._speed import CLAIM_WON as _WON`. (Reading `Step` members of
# `_outcomes` from their class instead costs about 2 %, within the spread.)

CLAIM_WON: Final = ClaimOutcome.WON
CLAIM_TAKEN: Final = ClaimOutcome.TAKEN
CLAIM_DONE: Final = ClaimOutcome.DONE
CLAIM_SKIPPED: Final = ClaimOutcome.SKIPPED
CLAIM_STALE: Final = ClaimOutcome.STALE
CLAIM_EXHAUSTED: Final = ClaimOutcome.EXHAUSTED
CLAIM_EARLY: Final = ClaimOutcome.EARLY
STATUS_RUNNING: Final = JobStatus.RUNNING
STATUS_DONE: Final = JobStatus.DONE
STATUS_FAILED: Final = JobStatus.FAILED
STATUS_RELEASED: Final = JobStatus.RELEASED
OVERLAP_SKIP: Final = Overlap.SKIP
OVERLAP_BUFFER_ONE: Final = Overlap.BUFFER_ONE
OVERLAP_REPLACE: Final = Overlap.REPLACE
OVERLAP_ALLOW: Final = Overlap.ALLOW
RELEASE_DONE: Final = ReleaseOutcome.DONE
RELEASE_FAILED: Final = ReleaseOutcome.FAILED
RELEASE_HANDOVER: Final = ReleaseOutcome.HANDOVER
