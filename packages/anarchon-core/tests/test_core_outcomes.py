"""`react`, what a claim's result means for its slot, and `verdict`, the same refined by what this
instance knows of itself, as pure functions: one test per row, each checking the whole action (step,
slot, delay, backup, superseding, what observers are told) and its log line."""

from __future__ import annotations

import logging

import pytest

from anarchon import BackendError, Job
from anarchon._options import resolve
from anarchon._outcomes import Action, Claim, Facts, Step, react, react_taken, verdict
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
    # (At DEBUG: every replica but one loses every slot.)
    assert action == Action(Step.WATCH, SLOT, delay, backup=True, supersedes=True, level=logging.DEBUG,
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
    assert (action.step, action.slot, action.level) == (Step.DROP, SLOT, logging.DEBUG)


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


# -- verdict: what this instance knows of itself -----------------------------------------------------

NEXT = SLOT + 60_000
"""The job's slot after SLOT (every minute)."""
ANNOUNCED = Facts(ME, leases=True, notify=True, announced=True)


class Runs:
    """The runs this instance has in progress: (slot, token) pairs of the job."""

    def __init__(self, *running: tuple[int, int]) -> None:
        self.runs = set(running)

    def running(self, name: str, slot: int, token: int | None = None) -> bool:
        return any(s == slot and (token is None or t == token) for s, t in self.runs)


def judge(res: ClaimResult, *, claim: Claim | None = None, now: int = NOW, runs: Runs | None = None,
          not_run: dict[str, int] | None = None, stopping: bool = False, facts: Facts = PUSHED,
          overlap: str = "skip") -> Action:
    return verdict(job(overlap), res, claim or Claim(SLOT, "slot", NEXT), stopping=stopping, facts=facts,
                   now=now, runs=runs or Runs(), not_run=not_run or {})


def test_verdict_of_a_plain_win_is_reacts() -> None:
    won = result(ClaimOutcome.WON)
    action = judge(won)
    assert action == react(job(), won, watching=False, stopping=False, facts=PUSHED)
    assert (action.step, action.takeover, action.renew_first) == (Step.RUN, False, False)
    assert not action.announce


@pytest.mark.parametrize(("kind", "announce"), [("slot", True), ("catchup", False), ("watch", False)])
def test_a_boundarys_win_is_counted_where_wins_are_pushed(kind: str, announce: bool) -> None:
    action = judge(result(ClaimOutcome.WON), claim=Claim(SLOT, kind, NEXT), facts=ANNOUNCED)
    assert (action.step, action.announce) == (Step.RUN, announce)


def test_a_reissued_win_of_a_run_still_going_does_nothing() -> None:
    won = result(ClaimOutcome.WON, reissued=True)
    action = judge(won, runs=Runs((SLOT, 7)))
    assert action.step is Step.NOTHING
    assert judge(won, runs=Runs((SLOT, 8))).step is Step.RUN  # another token: not this run


def test_a_reissued_win_runs_after_renewing_first() -> None:
    action = judge(result(ClaimOutcome.WON, reissued=True))
    assert (action.step, action.renew_first) == (Step.RUN, True)


def test_a_reissued_win_while_stopping_is_handed_back() -> None:
    assert judge(result(ClaimOutcome.WON, reissued=True), stopping=True).step is Step.HAND_BACK


def test_a_first_attempt_won_after_the_next_slot_was_due_is_released_unrun() -> None:
    action = judge(result(ClaimOutcome.WON), now=NEXT + 5)
    assert (action.step, action.late_ms) == (Step.UNRUN, NEXT + 5 - SLOT)
    assert line(action) == f"report slot=2025-12-31T23:59:59.990Z won attempt=1 ({ME})"
    assert judge(result(ClaimOutcome.WON), now=NEXT - 1).step is Step.RUN  # in time


def test_the_next_slot_is_computed_when_the_win_is_of_another_slot_than_claimed() -> None:
    claim = Claim(SLOT - 5, "slot", SLOT + 1)  # (its `following` is not the lease's)
    assert judge(result(ClaimOutcome.WON), claim=claim, now=SLOT + 2).step is Step.RUN
    assert judge(result(ClaimOutcome.WON), claim=claim, now=NEXT).step is Step.UNRUN


def test_a_late_takeover_and_overlap_allow_still_run() -> None:
    takeover = result(ClaimOutcome.WON, attempt=2, previous_status=JobStatus.RUNNING)
    action = judge(takeover, now=NEXT + 5)
    assert (action.step, action.takeover) == (Step.RUN, True)
    handover = result(ClaimOutcome.WON, attempt=2, previous_status=JobStatus.RELEASED)
    assert not judge(handover).takeover
    assert judge(result(ClaimOutcome.WON), now=NEXT + 5, overlap="allow").step is Step.RUN


def test_skipped_behind_its_own_released_slot_is_claimed_again_after_a_heartbeat() -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder=ME, record_slot=OLDER, expires_at=NOW + 4_000)
    action = judge(skipped, not_run={"report": OLDER})
    assert (action.step, action.skipped) == (Step.RETRY, True)


def test_skipped_behind_its_own_run_is_dropped_as_react_says() -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder=ME, record_slot=OLDER, expires_at=NOW + 4_000)
    action = judge(skipped, runs=Runs((OLDER, 3)))
    assert (action.step, action.slot, action.skipped) == (Step.DROP, SLOT, True)
    assert line(action) == ("report slot=2025-12-31T23:59:59.990Z skipped (overlap): slot "
                            f"2025-12-31T23:58:59.990Z still runs on {ME}")


def test_skipped_behind_its_own_unanswered_claim_frees_that_slot() -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder=ME, record_slot=OLDER, expires_at=NOW + 4_000)
    action = judge(skipped)
    assert (action.step, action.older, action.skipped, action.level) == (
        Step.FREE_OWN, OLDER, True, logging.INFO)
    assert line(action) == (
        "report slot=2025-12-31T23:59:59.990Z waits: slot 2025-12-31T23:58:59.990Z is held by this "
        "instance's own unanswered claim (its answer was lost); releasing it")


def test_skipped_behind_another_instances_run_is_reacts() -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder="other", record_slot=OLDER, expires_at=NOW + 4_000)
    action = judge(skipped)
    assert (action.step, action.slot, action.skipped) == (Step.WATCH, OLDER, True)
    buffered = judge(skipped, overlap="buffer_one")
    assert (buffered.step, buffered.slot, buffered.skipped) == (Step.WATCH, SLOT, False)


def test_skipped_under_replace_behind_another_instances_run_polls_and_asks_nothing() -> None:
    # The holder asks its own run to end when its own claim of this slot is skipped.
    skipped = result(ClaimOutcome.SKIPPED, holder="other", record_slot=OLDER, expires_at=NOW + 4_000)
    action = judge(skipped, overlap="replace")
    assert (action.step, action.slot, action.delay_ms, action.skipped) == (Step.WATCH, SLOT, HEARTBEAT, False)
    assert action.replaces is None
    assert line(action) == ("report slot=2025-12-31T23:59:59.990Z waits (overlap=replace): slot "
                            "2025-12-31T23:58:59.990Z still runs on other, which ends it")


def test_skipped_under_replace_behind_its_own_run_asks_that_run_to_end() -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder=ME, record_slot=OLDER, expires_at=NOW + 4_000)
    action = judge(skipped, runs=Runs((OLDER, 3)), overlap="replace")
    assert (action.step, action.slot, action.replaces, action.skipped) == (Step.WATCH, SLOT, OLDER, False)
    assert line(action) == (
        "report slot=2025-12-31T23:59:59.990Z replaces slot 2025-12-31T23:58:59.990Z, which runs here: "
        "asking that run to end; this slot starts once it has ended")
    # Under skip and buffer_one, its own older run goes on.
    assert judge(skipped, runs=Runs((OLDER, 3))).replaces is None
    assert judge(skipped, runs=Runs((OLDER, 3)), overlap="buffer_one").replaces is None


def test_replace_is_claimed_as_buffer_one() -> None:
    # The store never revokes a live lease for the scheduler: the older run ends first.
    assert job("replace").options.claim_overlap.value == "buffer_one"
    assert [job(o).options.claim_overlap.value for o in ("skip", "buffer_one", "allow")] == [
        "skip", "buffer_one", "allow"]


@pytest.mark.parametrize("overlap", ["buffer_one", "replace"])
def test_a_waiting_slots_polls_are_logged_at_debug_after_its_first_claim(overlap: str) -> None:
    skipped = result(ClaimOutcome.SKIPPED, holder="other", record_slot=OLDER, expires_at=NOW + 4_000)
    first = judge(skipped, overlap=overlap)
    polled = judge(skipped, claim=Claim(SLOT, "watch", NEXT), overlap=overlap)
    assert (first.level, polled.level) == (logging.INFO, logging.DEBUG)
    assert line(first) == line(polled)
