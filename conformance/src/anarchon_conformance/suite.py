"""The conformance suite: `from anarchon_conformance.suite import *` in a test module runs it.

The module must provide (or get from `--anarchon-backend`) the `anarchon_backend_factory` fixture.
"""

from ._clock import TestClockContract
from ._contract import (
    TestAnnounceContract,
    TestClaimContract,
    TestClaimManyContract,
    TestControlContract,
    TestHistoryContract,
    TestInspectContract,
    TestLeaseContract,
    TestNotifyContract,
    TestReleaseManyContract,
    TestRenewManyContract,
)
from ._forget import TestForgetContract
from ._model import TestModel
from ._races import TestExactCount, TestRaces
from ._schedules import TestScheduleContract, TestScheduleModel, TestScheduleRaces

__all__ = [
    "TestAnnounceContract",
    "TestClaimContract",
    "TestClaimManyContract",
    "TestClockContract",
    "TestControlContract",
    "TestExactCount",
    "TestForgetContract",
    "TestHistoryContract",
    "TestInspectContract",
    "TestLeaseContract",
    "TestModel",
    "TestNotifyContract",
    "TestRaces",
    "TestReleaseManyContract",
    "TestRenewManyContract",
    "TestScheduleContract",
    "TestScheduleModel",
    "TestScheduleRaces",
]
