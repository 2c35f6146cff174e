"""`decide`, the claim table as a pure function: each row's whole answer and write, checked exactly.

The renew and release rules (`decide_renew`, `decide_release`) are pinned the same way at the end.

test_core_memory_backend.py walks the same rows through MemoryBackend's claim, renew and release;
here every field of the decision is pinned: the result, the record to write, which slot it replaces,
whether the previous record is kept, and the job's token counter (which may run ahead of the newest
record's token under overlap=allow). Boundaries are tested on both sides.
"""

from __future__ import annotations

import pytest

from anarchon.backends import (
    ClaimDecision,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobStatus,
    Lease,
    LeaseRecord,
    Overlap,
    ReleaseDecision,
    ReleaseOutcome,
    RenewDecision,
    decide,
    decide_release,
    decide_renew,
)

NOW = 1_767_225_600_000
S1 = NOW - 20_000  # an older slot
S2 = NOW - 10_000  # the claimed slot in most tests
LEASE = 5_000


def req(slot: int = S2, owner: str = "me", **kw: object) -> ClaimRequest:
    return ClaimRequest("ns", "job", slot, owner, lease_ms=LEASE, fingerprint="fp-new", **kw)  # type: ignore[arg-type]


def rec(
    slot: int = S2, *, attempt: int = 1, token: int = 4, status: JobStatus = JobStatus.RUNNING,
    expires_at: int = NOW + 1, owner: str = "holder",
) -> LeaseRecord:
    return LeaseRecord(slot, attempt, token, owner, status, expires_at, "fp-old", NOW - 30_000)


def running(slot: int, attempt: int, token: int) -> LeaseRecord:
    """The record a win writes for `req()`."""
    return LeaseRecord(slot, attempt, token, "me", JobStatus.RUNNING, NOW + LEASE, "fp-new", NOW)


def won(
    write: LeaseRecord, *, previous_status: JobStatus | None = None, previous: LeaseRecord | None = None,
) -> ClaimResult:
    lease = Lease("ns", "job", write.slot, write.attempt, write.token, "me", NOW + LEASE)
    return ClaimResult(
        ClaimOutcome.WON, "job", write.slot, lease=lease, holder="me", attempt=write.attempt,
        expires_at=NOW + LEASE, now=NOW, previous_status=previous_status,
        fingerprint=None if previous is None else "fp-old",
        record_slot=None if previous is None else previous.slot,
    )


# -- no record ----------------------------------------------------------------------------------


def test_no_record_wins_a_new_slot_with_attempt_1_and_the_next_token() -> None:
    write = running(S2, 1, 1)
    assert decide(None, req(), NOW, token=0) == ClaimDecision(won(write), write, new_slot=True)


# -- the same slot ------------------------------------------------------------------------------


def test_same_slot_live_lease_is_taken_and_writes_nothing() -> None:
    head = rec(expires_at=NOW + 1)  # the last live millisecond
    assert decide(head, req(), NOW, token=4) == ClaimDecision(ClaimResult(
        ClaimOutcome.TAKEN, "job", S2, holder="holder", attempt=1, expires_at=NOW + 1, now=NOW,
        fingerprint="fp-old", record_slot=S2,
    ))


@pytest.mark.parametrize("expires_at", [NOW, NOW - 1], ids=["at-now", "before-now"])
def test_same_slot_expired_lease_is_taken_over_as_attempt_plus_1(expires_at: int) -> None:
    head = rec(attempt=2, token=4, expires_at=expires_at)  # expiry is inclusive
    # The job's counter (7) ran ahead of this record's token (4): the takeover takes the counter's next.
    write = running(S2, 3, 8)
    assert decide(head, req(), NOW, token=7) == ClaimDecision(
        won(write, previous_status=JobStatus.RUNNING, previous=head), write
    )


def test_same_slot_released_is_taken_over_at_once_though_its_lease_has_time_left() -> None:
    head = rec(status=JobStatus.RELEASED, expires_at=NOW + 60_000)
    write = running(S2, 2, 5)
    assert decide(head, req(), NOW, token=4) == ClaimDecision(
        won(write, previous_status=JobStatus.RELEASED, previous=head), write
    )


@pytest.mark.parametrize("status", [JobStatus.DONE, JobStatus.FAILED])
def test_same_slot_done_or_failed_is_done_even_with_attempts_and_lease_left(status: JobStatus) -> None:
    head = rec(status=status, expires_at=NOW + 60_000)
    assert decide(head, req(max_attempts=5), NOW, token=4) == ClaimDecision(ClaimResult(
        ClaimOutcome.DONE, "job", S2, holder="holder", attempt=1, now=NOW, fingerprint="fp-old",
        record_slot=S2,
    ))


@pytest.mark.parametrize("status", [JobStatus.RELEASED, JobStatus.RUNNING])
def test_takeover_at_max_attempts_is_exhausted_and_one_below_is_won(status: JobStatus) -> None:
    head = rec(attempt=3, status=status, expires_at=NOW)
    assert decide(head, req(max_attempts=3), NOW, token=4) == ClaimDecision(ClaimResult(
        ClaimOutcome.EXHAUSTED, "job", S2, holder="holder", attempt=3, now=NOW, previous_status=status,
        fingerprint="fp-old", record_slot=S2,
    ))
    write = running(S2, 4, 5)
    assert decide(head, req(max_attempts=4), NOW, token=4) == ClaimDecision(
        won(write, previous_status=status, previous=head), write
    )


# -- an older slot in the record: overlap -------------------------------------------------------


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.BUFFER_ONE])
def test_older_slot_live_skips_the_new_one_and_writes_nothing(overlap: Overlap) -> None:
    head = rec(S1, expires_at=NOW + 1)
    assert decide(head, req(overlap=overlap), NOW, token=4) == ClaimDecision(ClaimResult(
        ClaimOutcome.SKIPPED, "job", S2, holder="holder", attempt=1, expires_at=NOW + 1, now=NOW,
        fingerprint="fp-old", record_slot=S1,
    ))


@pytest.mark.parametrize(("overlap", "keep"), [(Overlap.REPLACE, False), (Overlap.ALLOW, True)])
def test_older_slot_live_replace_drops_it_and_allow_keeps_it(overlap: Overlap, keep: bool) -> None:
    head = rec(S1, attempt=2, token=4, expires_at=NOW + 1)
    write = running(S2, 1, 7)  # the job's counter (6) ran ahead of the record's token
    assert decide(head, req(overlap=overlap), NOW, token=6) == ClaimDecision(
        won(write, previous=head), write, new_slot=True, keep_previous=keep
    )


@pytest.mark.parametrize("overlap", list(Overlap))
@pytest.mark.parametrize(
    "head",
    [
        rec(S1, status=JobStatus.DONE, expires_at=NOW + 60_000),
        rec(S1, status=JobStatus.FAILED, expires_at=NOW + 60_000),
        rec(S1, status=JobStatus.RELEASED, expires_at=NOW + 60_000),
        rec(S1, attempt=3, expires_at=NOW),  # expired, and out of attempts: a new slot starts over
    ],
    ids=["done", "failed", "released", "expired"],
)
def test_older_slot_in_any_other_state_is_superseded_whatever_the_overlap(
    head: LeaseRecord, overlap: Overlap
) -> None:
    write = running(S2, 1, 7)
    assert decide(head, req(overlap=overlap, max_attempts=1), NOW, token=6) == ClaimDecision(
        won(write, previous=head), write, new_slot=True, keep_previous=False
    )


# -- a newer slot in the record -------------------------------------------------------------------


@pytest.mark.parametrize("overlap", list(Overlap))
def test_newer_slot_in_the_record_is_stale(overlap: Overlap) -> None:
    head = rec(S2, attempt=2)
    assert decide(head, req(S1, overlap=overlap), NOW, token=4) == ClaimDecision(ClaimResult(
        ClaimOutcome.STALE, "job", S1, holder="holder", attempt=2, now=NOW, fingerprint="fp-old",
        record_slot=S2,
    ))


def test_allow_judges_a_kept_older_slot_by_the_same_slot_rows() -> None:
    head = rec(S2, token=5)
    live = rec(S1, token=4, owner="old", expires_at=NOW + 1)
    assert decide(head, req(S1, overlap=Overlap.ALLOW), NOW, token=5, kept=live).result.outcome is (
        ClaimOutcome.TAKEN
    )
    # Its takeover replaces the kept record (not a new slot) and advances the job's counter.
    expired = rec(S1, token=4, owner="old", expires_at=NOW)
    write = running(S1, 2, 6)
    assert decide(head, req(S1, overlap=Overlap.ALLOW), NOW, token=5, kept=expired) == ClaimDecision(
        won(write, previous_status=JobStatus.RUNNING, previous=expired), write
    )


def test_a_kept_older_slot_counts_only_under_allow() -> None:
    head = rec(S2)
    kept = rec(S1, expires_at=NOW)
    result = decide(head, req(S1, overlap=Overlap.SKIP), NOW, token=4, kept=kept).result
    assert (result.outcome, result.record_slot) == (ClaimOutcome.STALE, S2)


def test_a_kept_record_of_another_slot_is_refused() -> None:
    with pytest.raises(ValueError, match=f"slot {S1}"):
        decide(rec(S2), req(S2 - 5_000, overlap=Overlap.ALLOW), NOW, token=4, kept=rec(S1))


# -- early --------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", [None, rec(S1), rec(NOW + 3_000, status=JobStatus.DONE)],
                         ids=["no-record", "older-live", "same-slot-done"])
def test_a_slot_beyond_max_skew_is_early_before_any_other_row(head: LeaseRecord | None) -> None:
    early = NOW + 3_000
    assert decide(head, req(early, max_skew_ms=2_999), NOW, token=4) == ClaimDecision(
        ClaimResult(ClaimOutcome.EARLY, "job", early, now=NOW)
    )


def test_a_slot_exactly_max_skew_ahead_is_not_early() -> None:
    decision = decide(None, req(NOW + 2_000, max_skew_ms=2_000), NOW, token=0)
    assert decision.result.outcome is ClaimOutcome.WON


def test_the_holder_of_a_live_record_gets_its_own_lease_again_and_nothing_is_written() -> None:
    # A claim whose answer was lost: its resend must not leave the slot stranded until expiry.
    head = rec(S2, attempt=2, token=4, owner="me", expires_at=NOW + 1)
    lease = Lease("ns", "job", S2, 2, 4, "me", NOW + 1)
    assert decide(head, req(), NOW, token=4) == ClaimDecision(ClaimResult(
        ClaimOutcome.WON, "job", S2, lease=lease, holder="me", attempt=2, expires_at=NOW + 1, now=NOW,
        fingerprint="fp-old", record_slot=S2, reissued=True,
    ))
    # Expired: an ordinary takeover, even by the same owner.
    expired = rec(S2, token=4, owner="me", expires_at=NOW)
    taken_over = decide(expired, req(), NOW, token=4).result
    assert taken_over.lease == Lease("ns", "job", S2, 2, 5, "me", NOW + LEASE) and not taken_over.reissued


# -- stale_after: a claim delivered too late -----------------------------------------------------


STALE_HEADS = {
    "no-record": None, "same-slot-live": rec(S2), "same-slot-expired": rec(S2, expires_at=NOW),
    "same-slot-released": rec(S2, status=JobStatus.RELEASED), "older-live": rec(S1),
    "older-done": rec(S1, status=JobStatus.DONE), "newer": rec(NOW - 1_000),
}
"""Every kind of record: past `stale_after`, each claim is STALE and writes nothing."""


@pytest.mark.parametrize("head", STALE_HEADS.values(), ids=STALE_HEADS.keys())
@pytest.mark.parametrize("overlap", list(Overlap))
def test_a_claim_past_stale_after_is_stale_and_writes_nothing(
    head: LeaseRecord | None, overlap: Overlap,
) -> None:
    decision = decide(head, req(stale_after=NOW - 1, overlap=overlap), NOW, token=4)
    expected = ClaimResult(ClaimOutcome.STALE, "job", S2, now=NOW) if head is None else ClaimResult(
        ClaimOutcome.STALE, "job", S2, holder="holder", attempt=head.attempt, now=NOW,
        fingerprint="fp-old", record_slot=head.slot,
    )
    assert decision == ClaimDecision(expected)


def test_a_claim_at_stale_after_still_counts() -> None:
    # `stale_after` is the last store time at which the slot is worth running: inclusive.
    write = running(S2, 1, 1)
    assert decide(None, req(stale_after=NOW), NOW, token=0) == ClaimDecision(won(write), write, new_slot=True)
    head = rec(S2, expires_at=NOW)
    taken = running(S2, 2, 5)
    assert decide(head, req(stale_after=NOW), NOW, token=4) == ClaimDecision(
        won(taken, previous_status=JobStatus.RUNNING, previous=head), taken
    )


def test_no_stale_after_is_no_limit() -> None:
    assert ClaimRequest("ns", "job", S2, "me").stale_after is None
    assert decide(None, req(S1 - 10**9), NOW, token=0).result.outcome is ClaimOutcome.WON


def test_early_comes_before_stale() -> None:
    early = NOW + 3_000
    result = decide(None, req(early, max_skew_ms=0, stale_after=NOW - 1), NOW, token=0).result
    assert result.outcome is ClaimOutcome.EARLY


# -- renew ---------------------------------------------------------------------------------------

HELD = Lease("ns", "job", S2, 1, 4, "holder", NOW + 1)
"""The lease of `rec()`."""


@pytest.mark.parametrize("expires_at", [NOW + 1, NOW + 60_000], ids=["last-live-ms", "live"])
def test_renew_extends_from_the_store_now(expires_at: int) -> None:
    # The expiry counts from `now`, never from the old expiry.
    decision = decide_renew(rec(expires_at=expires_at), HELD, LEASE, NOW)
    write = LeaseRecord(S2, 1, 4, "holder", JobStatus.RUNNING, NOW + LEASE, "fp-old", NOW)
    assert decision == RenewDecision(Lease("ns", "job", S2, 1, 4, "holder", NOW + LEASE), write)


@pytest.mark.parametrize("expires_at", [NOW, NOW - 60_000], ids=["at-expiry", "long-expired"])
def test_renew_after_the_lease_expired_is_lost_though_nobody_took_over(expires_at: int) -> None:
    # A renewal delayed in the network (a partition's bytes delivered at its heal) must not revive a
    # run its holder has declared lost: expiry is inclusive, so `expires_at == now` is over too.
    assert decide_renew(rec(expires_at=expires_at), HELD, LEASE, NOW) == RenewDecision(None)


NOT_HELD = {
    "no-record": None, "other-owner": rec(owner="other"), "other-token": rec(token=5),
    "other-slot": rec(slot=S1), "released": rec(status=JobStatus.RELEASED),
    "done": rec(status=JobStatus.DONE), "failed": rec(status=JobStatus.FAILED),
}
"""Stored records that do not hold `HELD`: renewals and releases of it change nothing."""


@pytest.mark.parametrize("stored", NOT_HELD.values(), ids=NOT_HELD.keys())
def test_renew_is_lost_unless_the_running_record_holds_the_lease(stored: LeaseRecord | None) -> None:
    assert decide_renew(stored, HELD, LEASE, NOW) == RenewDecision(None)


# -- release -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("outcome", "status"), [
    (ReleaseOutcome.DONE, JobStatus.DONE),
    (ReleaseOutcome.FAILED, JobStatus.FAILED),
    (ReleaseOutcome.HANDOVER, JobStatus.RELEASED),
])
def test_release_of_the_newest_record_stores_the_outcome(outcome: ReleaseOutcome, status: JobStatus) -> None:
    decision = decide_release(rec(), HELD, outcome, NOW, newest=True)
    write = LeaseRecord(S2, 1, 4, "holder", status, NOW + 1, "fp-old", NOW)
    assert decision == ReleaseDecision(True, write, push=outcome is ReleaseOutcome.HANDOVER)
    assert outcome.status is status


@pytest.mark.parametrize("outcome", [ReleaseOutcome.DONE, ReleaseOutcome.FAILED])
def test_an_older_record_that_ends_is_forgotten(outcome: ReleaseOutcome) -> None:
    assert decide_release(rec(), HELD, outcome, NOW, newest=False) == ReleaseDecision(True, forget=True)


def test_an_older_record_handed_over_stays_released() -> None:
    decision = decide_release(rec(), HELD, ReleaseOutcome.HANDOVER, NOW, newest=False)
    write = LeaseRecord(S2, 1, 4, "holder", JobStatus.RELEASED, NOW + 1, "fp-old", NOW)
    assert decision == ReleaseDecision(True, write, push=True)


@pytest.mark.parametrize("stored", NOT_HELD.values(), ids=NOT_HELD.keys())
@pytest.mark.parametrize("newest", [True, False])
def test_release_is_ignored_unless_the_running_record_holds_the_lease(
    stored: LeaseRecord | None, newest: bool
) -> None:
    for outcome in ReleaseOutcome:
        assert decide_release(stored, HELD, outcome, NOW, newest=newest) == ReleaseDecision(False)
