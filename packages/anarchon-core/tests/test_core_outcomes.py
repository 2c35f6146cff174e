"""`react`, what a claim's result means for its slot, as a pure function: one test per row, each
checking the whole action (step, slot, delay, backup, superseding) and its log line."""

from __future__ import annotations

import logging

import pytest

from anarchon import BackendError, Job
from anarchon._options import resolve
from anarchon._outcomes import Action, Facts, Step, react, react_taken
from anarchon._schedules import Every
from anarchon.backends import ClaimOutcome, ClaimResult, JobStatus, Lease

NOW = 1_767_225_600_000
SLOT = NOW - 10
OLDER = SLOT - 60_000
ME = "me:1:aaaa"
LEASE, HEARTBEAT = 6_000, 1_000

PUSHED = Facts(ME, leases=True, notify=True)
POLLED = Facts(ME, leases=True, notify=False)
CLAIM_ONLY = Facts(ME, leases=False, notify=False)


def job(overlap: str = "skip", **options: object) -> Job:
    opts = resolve({"overlap": overlap, **options}, lease_ms=LEASE, heartbeat_ms=HEARTBEAT)
    return Job("report", Every.parse("1m"), opts, lambda: None)


def result(outcome: ClaimOutcome, *, attempt: int = 1, **fields: object) -> ClaimResult:
    lease = Lease("ns", "report", SLOT, attempt, 7, ME, NOW + LEASE) if outcome is ClaimOutcome.WON else None
    return ClaimResult(outcome, "report", SLOT, lease=lease, attempt=attempt, now=NOW, **fields)  # type: ignore[arg-type]


def line(action: Action) -> str:
    """The log line as logging would render it."""
    return logging.LogRecord("anarchon", action.level, "", 0, action.message, action.args, None).getMessage()


def test_won_runs_the_slot_and_supersedes_older_watches() -> None:
    action = react(job(), result(ClaimOutcome.WON), watching=False, stopping=False, facts=PUSHED)
    assert (action.step, action.slot, action.supersedes) == (Step.RUN, SLOT, True)
    assert action.level == logging.INFO
    assert line(action) == f"report slot=2025-12-31T23:59:59.990Z won attempt=1 ({ME})"


@pytest.mark.parametrize(("previous", "how"), [
    (JobStatus.RELEASED, "handover"), (JobStatus.RUNNING, "takeover"),
])
def test_won_a_later_attempt_says_handover_or_takeover(previous: JobStatus, how: str) -> None:
    won = result(ClaimOutcome.WON, attempt=2, previous_status=previous)
    action = react(job(), won, watching=True, stopping=False, facts=PUSHED)
    assert action.step is Step.RUN
    assert line(action) == f"report slot=2025-12-31T23:59:59.990Z {how} attempt=2 ({ME})"


def test_won_while_stopping_on_a_lease_backend_is_handed_back() -> None:
    action = react(job(), result(ClaimOutcome.WON), watching=False, stopping=True, facts=PUSHED)
    assert (action.step, action.slot) == (Step.HAND_BACK, SLOT)


def test_won_while_stopping_on_a_claim_only_backend_still_runs() -> None:
    # The others were told `taken`: nobody else would run it.
    action = react(job(), result(ClaimOutcome.WON), watching=False, stopping=True, facts=CLAIM_ONLY)
    assert action.step is Step.RUN


def test_won_without_a_lease_is_a_backend_error() -> None:
    broken = ClaimResult(ClaimOutcome.WON, "report", SLOT)
    with pytest.raises(BackendError, match="carries no lease"):
        react(job(), broken, watching=False, stopping=False, facts=PUSHED)


@pytest.mark.parametrize(("facts", "delay"), [(PUSHED, 4_000), (POLLED, HEARTBEAT)])
def test_taken_watches_the_slot_until_the_holders_expiry_or_a_heartbeat(facts: Facts, delay: int) -> None:
    taken = result(ClaimOutcome.TAKEN, holder="other", expires_at=NOW + 4_000)
    action = react(job(), taken, watching=False, stopping=False, facts=facts)
    assert action == Action(Step.WATCH, SLOT, delay, backup=True, supersedes=True, level=logging.INFO,
                            message=action.message, args=action.args)
    assert line(action) == "report slot=2025-12-31T23:59:59.990Z taken by other"


def test_taken_without_the_holders_expiry_waits_one_lease() -> None:
    action = react(job(), result(ClaimOutcome.TAKEN, holder="other"), watching=False, stopping=False,
                   facts=PUSHED)
    assert (action.step, action.delay_ms) == (Step.WATCH, LEASE)


def test_taken_again_by_a_backups_watch_logs_at_debug() -> None:
    action = react(job(), result(ClaimOutcome.TAKEN), watching=True, stopping=False, facts=PUSHED)
    assert action.level == logging.DEBUG
    assert line(action) == "report slot=2025-12-31T23:59:59.990Z taken by another instance"


@pytest.mark.parametrize("facts", [PUSHED, POLLED, CLAIM_ONLY])
@pytest.mark.parametrize("overlap", ["skip", "allow"])
@pytest.mark.parametrize("watching", [False, True])
@pytest.mark.parametrize(("holder", "expires_at"), [("other", NOW + 4_000), (None, None)])
def test_react_taken_is_react_of_a_taken_result(facts: Facts, overlap: str, watching: bool,
                                                holder: str | None, expires_at: int | None) -> None:
    """A win pushed by another instance is settled through `react_taken`, without a `ClaimResult`:
    the same action and log line as a claim answered taken."""
    taken = result(ClaimOutcome.TAKEN, holder=holder, expires_at=expires_at)
    expected = react(job(overlap), taken, watching=watching, stopping=False, facts=facts)
    action = react_taken(job(overlap), SLOT, holder, watching=watching, facts=facts, expires_at=expires_at,
                         now=NOW)
    assert action == expected
    assert line(action) == line(expected)
    if expires_at is None:
        assert react_taken(job(overlap), SLOT, holder, watching=watching, facts=facts) == expected


def test_taken_on_a_claim_only_backend_is_dropped() -> None:
    action = react(job(), result(ClaimOutcome.TAKEN, holder="other"), watching=False, stopping=False,
                   facts=CLAIM_ONLY)
    assert (action.step, action.slot, action.level) == (Step.DROP, SLOT, logging.INFO)


def test_skipped_under_buffer_one_polls_for_the_older_runs_end() -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder="other", record_slot=OLDER, expires_at=NOW + 4_000)
    action = react(job("buffer_one"), skipped, watching=False, stopping=False, facts=PUSHED)
    assert (action.step, action.slot, action.delay_ms, action.backup) == (Step.WATCH, SLOT, HEARTBEAT, True)
    assert not action.supersedes
    assert line(action) == ("report slot=2025-12-31T23:59:59.990Z skipped (overlap): slot "
                            "2025-12-31T23:58:59.990Z still runs on other")


def test_skipped_behind_another_instances_run_watches_that_older_run() -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder="other", record_slot=OLDER, expires_at=NOW + 4_000)
    action = react(job(), skipped, watching=False, stopping=False, facts=PUSHED)
    assert (action.step, action.slot, action.delay_ms, action.backup) == (Step.WATCH, OLDER, 4_000, True)
    assert not action.supersedes


def test_skipped_behind_its_own_run_is_dropped() -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder=ME, record_slot=OLDER, expires_at=NOW + 4_000)
    action = react(job(), skipped, watching=False, stopping=False, facts=PUSHED)
    assert (action.step, action.slot, action.supersedes) == (Step.DROP, SLOT, False)
    assert action.level == logging.INFO


def test_early_watches_the_slot_until_the_stores_clock_reaches_it() -> None:
    early = ClaimResult(ClaimOutcome.EARLY, "report", NOW + 5_000, now=NOW)
    action = react(job(), early, watching=False, stopping=False, facts=PUSHED)
    assert (action.step, action.slot, action.delay_ms) == (Step.WATCH, NOW + 5_000, 5_000)
    assert not action.backup
    assert not action.supersedes and action.level == logging.WARNING
    assert "early: this instance's clock runs 5000 ms ahead of the store's; waiting" in line(action)


def test_exhausted_is_dropped_with_a_warning() -> None:
    action = react(job(max_attempts=2), result(ClaimOutcome.EXHAUSTED, attempt=2), watching=True,
                   stopping=False, facts=PUSHED)
    assert (action.step, action.slot, action.supersedes, action.level) == (
        Step.DROP, SLOT, True, logging.WARNING)
    assert line(action) == "report slot=2025-12-31T23:59:59.990Z exhausted: 2 attempt(s) used, max_attempts=2"


@pytest.mark.parametrize("outcome", [ClaimOutcome.DONE, ClaimOutcome.STALE])
def test_done_and_stale_are_dropped_quietly(outcome: ClaimOutcome) -> None:
    action = react(job(), result(outcome), watching=True, stopping=False, facts=PUSHED)
    assert (action.step, action.slot, action.supersedes) == (Step.DROP, SLOT, True)
    assert action.level == logging.DEBUG
    assert line(action) == f"report slot=2025-12-31T23:59:59.990Z {outcome.value}"


def test_under_overlap_allow_nothing_supersedes_older_watches() -> None:
    # Each slot keeps its own record under allow: a newer slot settles nothing about an older one.
    for outcome in (ClaimOutcome.WON, ClaimOutcome.TAKEN, ClaimOutcome.DONE):
        action = react(job("allow"), result(outcome), watching=False, stopping=False, facts=PUSHED)
        assert not action.supersedes, outcome
    assert react(job(), result(ClaimOutcome.TAKEN), watching=False, stopping=False, facts=PUSHED).supersedes
