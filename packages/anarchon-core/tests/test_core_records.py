"""The store's records, made per claim with a quicker `__init__`, are the same frozen dataclasses."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest

from anarchon.backends import (
    ClaimDecision,
    ClaimRequest,
    ClaimResult,
    JobState,
    JobStatus,
    Lease,
    LeaseRecord,
    ReleaseDecision,
    RenewDecision,
    RunRecord,
)

RECORDS: list[type[Any]] = [ClaimRequest, Lease, ClaimResult, LeaseRecord, RunRecord, ClaimDecision,
                            RenewDecision, ReleaseDecision]


def _slowly(cls: type[Any], values: dict[str, Any]) -> Any:
    """An instance filled field by field through `object.__setattr__`, as dataclasses' own `__init__` does."""
    obj = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_a_record_made_by_its_init_is_the_frozen_dataclass_it_was(cls: type[Any]) -> None:
    fields = dataclasses.fields(cls)
    values = {f.name: f"{f.name}-value" for f in fields}
    expected = _slowly(cls, values)
    for made in (cls(*values.values()), cls(**values)):
        assert type(made) is cls
        assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
        assert dataclasses.astuple(made) == tuple(values.values())
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, fields[0].name, "changed")
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(made, fields[0].name)
        assert dataclasses.replace(made, **{fields[0].name: "other"}) == _slowly(
            cls, {**values, fields[0].name: "other"})
        unpickled = pickle.loads(pickle.dumps(made))
        assert type(unpickled) is cls and unpickled == made
        assert type(copy.copy(made)) is cls and copy.deepcopy(made) == made
    # Defaults are applied as the dataclass declares them.
    required = [f for f in fields if f.default is dataclasses.MISSING]
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    made = cls(*(values[f.name] for f in required))
    assert made == _slowly(cls, {f.name: defaults.get(f.name, values[f.name]) for f in fields})


def test_a_subclass_that_inherits_the_quick_init_keeps_its_own_class() -> None:
    class Marked(Lease):
        __slots__ = ()

    made = Marked("ns", "job", 1, 1, 1, "owner", 2)
    assert type(made) is Marked
    assert dataclasses.astuple(made) == ("ns", "job", 1, 1, 1, "owner", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.slot = 3  # type: ignore[misc]


def test_a_dataclass_subclass_with_fields_of_its_own_is_filled_by_its_own_init() -> None:
    state = JobState(slot=1, attempt=2, token=3, owner="o", status=JobStatus.RUNNING, expires_at=5,
                     fingerprint="f", updated_at=4, namespace="ns", job="job", now=2)
    assert type(state) is JobState
    assert dataclasses.astuple(state) == (1, 2, 3, "o", JobStatus.RUNNING, 5, "f", 4, "ns", "job", 2)
    assert state.live(4) and not state.live(5)
