"""One test per row of the claim table, against MemoryBackend (the reference model)."""

from __future__ import annotations

import pytest

from anarchon import (
    ClaimOutcome,
    ClaimRequest,
    JobStatus,
    MemoryBackend,
    MemoryClaimBackend,
    MemoryStore,
    Overlap,
    ReleaseOutcome,
)
from anarchon.testing import ManualClock

NS = "ns"
S1 = 1_767_225_600_000  # a slot: 2026-01-01T00:00:00Z
S2 = S1 + 10_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(S1)


@pytest.fixture
def backend(clock: ManualClock) -> MemoryBackend:
    return MemoryBackend(clock=clock)


def req(owner: str, slot: int = S1, **kw: object) -> ClaimRequest:
    return ClaimRequest(NS, "job", slot, owner, **kw)  # type: ignore[arg-type]


async def test_no_record_wins_attempt_1_token_1(backend: MemoryBackend, clock: ManualClock) -> None:
    result = await backend.claim(req("a", lease_ms=5000))
    assert result.outcome is ClaimOutcome.WON
    assert result.lease is not None
    assert (result.lease.attempt, result.lease.token, result.lease.owner) == (1, 1, "a")
    assert result.lease.expires_at == clock.now + 5000
    state = await backend.inspect(NS, "job")
    assert state is not None and state.status is JobStatus.RUNNING


async def test_same_slot_live_lease_is_taken_with_holder(backend: MemoryBackend, clock: ManualClock) -> None:
    await backend.claim(req("a", lease_ms=5000))
    clock.advance(4999)
    result = await backend.claim(req("b"))
    assert result.outcome is ClaimOutcome.TAKEN
    assert result.holder == "a"
    assert result.expires_at == S1 + 5000 and result.now == S1 + 4999


@pytest.mark.parametrize("outcome", [ReleaseOutcome.DONE, ReleaseOutcome.FAILED])
async def test_same_slot_done_or_failed_is_done(backend: MemoryBackend, outcome: ReleaseOutcome) -> None:
    won = await backend.claim(req("a"))
    assert won.lease is not None
    assert await backend.release(won.lease, outcome)
    result = await backend.claim(req("b"))
    assert result.outcome is ClaimOutcome.DONE


async def test_same_slot_released_is_taken_over_at_once(backend: MemoryBackend) -> None:
    won = await backend.claim(req("a"))
    assert won.lease is not None
    await backend.release(won.lease, ReleaseOutcome.HANDOVER)
    result = await backend.claim(req("b"))
    assert result.outcome is ClaimOutcome.WON and result.lease is not None
    assert (result.lease.attempt, result.lease.token, result.lease.owner) == (2, 2, "b")
    assert result.previous_status is JobStatus.RELEASED


async def test_same_slot_expired_lease_is_taken_over_expiry_inclusive(
    backend: MemoryBackend, clock: ManualClock
) -> None:
    await backend.claim(req("a", lease_ms=5000))
    clock.advance(5000)  # expires_at <= now: expired
    result = await backend.claim(req("b", lease_ms=5000))
    assert result.outcome is ClaimOutcome.WON and result.lease is not None
    assert (result.lease.attempt, result.lease.token) == (2, 2)
    assert result.previous_status is JobStatus.RUNNING


async def test_takeover_beyond_max_attempts_is_exhausted(backend: MemoryBackend) -> None:
    lease = (await backend.claim(req("a", max_attempts=2))).lease
    assert lease is not None
    await backend.release(lease, ReleaseOutcome.HANDOVER)
    second = await backend.claim(req("b", max_attempts=2))
    assert second.lease is not None and second.lease.attempt == 2
    await backend.release(second.lease, ReleaseOutcome.HANDOVER)
    third = await backend.claim(req("c", max_attempts=2))
    assert third.outcome is ClaimOutcome.EXHAUSTED
    assert third.attempt == 2


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.BUFFER_ONE])
async def test_older_slot_live_is_skipped(
    backend: MemoryBackend, clock: ManualClock, overlap: Overlap
) -> None:
    await backend.claim(req("a", lease_ms=30_000))
    clock.now = S2
    result = await backend.claim(req("b", S2, overlap=overlap))
    assert result.outcome is ClaimOutcome.SKIPPED
    assert result.record_slot == S1 and result.holder == "a"


async def test_older_slot_live_replace_revokes_the_older_lease(
    backend: MemoryBackend, clock: ManualClock
) -> None:
    old = (await backend.claim(req("a", lease_ms=30_000))).lease
    assert old is not None
    clock.now = S2
    result = await backend.claim(req("b", S2, overlap=Overlap.REPLACE))
    assert result.outcome is ClaimOutcome.WON and result.lease is not None
    assert (result.lease.attempt, result.lease.token) == (1, 2)
    assert await backend.renew(old, 30_000) is None  # the older runner sees a lost lease
    assert not await backend.release(old, ReleaseOutcome.DONE)


async def test_older_slot_live_allow_runs_both_and_keeps_both_renewable(
    backend: MemoryBackend, clock: ManualClock
) -> None:
    old = (await backend.claim(req("a", lease_ms=30_000, overlap=Overlap.ALLOW))).lease
    assert old is not None
    clock.now = S2
    new = await backend.claim(req("b", S2, lease_ms=30_000, overlap=Overlap.ALLOW))
    assert new.outcome is ClaimOutcome.WON and new.lease is not None and new.lease.token == 2
    assert await backend.renew(old, 30_000) is not None
    # The older slot is still judged by the same-slot rows.
    again = await backend.claim(req("c", S1, overlap=Overlap.ALLOW))
    assert again.outcome is ClaimOutcome.TAKEN and again.holder == "a"
    assert await backend.release(old, ReleaseOutcome.DONE)
    assert (await backend.claim(req("c", S1, overlap=Overlap.ALLOW))).outcome is ClaimOutcome.STALE


@pytest.mark.parametrize(
    "release", [ReleaseOutcome.DONE, ReleaseOutcome.FAILED, ReleaseOutcome.HANDOVER, None]
)
async def test_older_slot_in_any_other_state_is_superseded(
    backend: MemoryBackend, clock: ManualClock, release: ReleaseOutcome | None
) -> None:
    old = (await backend.claim(req("a", lease_ms=5000))).lease
    assert old is not None
    if release is None:
        clock.advance(5000)  # expired, never released
    else:
        await backend.release(old, release)
    clock.now = S2
    result = await backend.claim(req("b", S2))
    assert result.outcome is ClaimOutcome.WON and result.lease is not None
    assert (result.lease.attempt, result.lease.token) == (1, 2)


async def test_newer_slot_than_asked_is_stale(backend: MemoryBackend, clock: ManualClock) -> None:
    clock.now = S2
    await backend.claim(req("a", S2))
    result = await backend.claim(req("b", S1))
    assert result.outcome is ClaimOutcome.STALE and result.record_slot == S2


async def test_slot_beyond_max_skew_is_early(backend: MemoryBackend, clock: ManualClock) -> None:
    result = await backend.claim(req("a", S1 + 2001, max_skew_ms=2000))
    assert result.outcome is ClaimOutcome.EARLY and result.now == clock.now
    assert (await backend.claim(req("a", S1 + 2000, max_skew_ms=2000))).outcome is ClaimOutcome.WON


async def test_renew_only_by_current_owner_and_token(backend: MemoryBackend, clock: ManualClock) -> None:
    lease = (await backend.claim(req("a", lease_ms=5000))).lease
    assert lease is not None
    clock.advance(1000)
    renewed = await backend.renew(lease, 5000)
    assert renewed is not None and renewed.expires_at == clock.now + 5000
    impostor = type(lease)(lease.namespace, lease.job, lease.slot, lease.attempt, lease.token, "b", 0)
    assert await backend.renew(impostor, 5000) is None
    stale_token = type(lease)(lease.namespace, lease.job, lease.slot, lease.attempt, 99, "a", 0)
    assert await backend.renew(stale_token, 5000) is None


async def test_expired_lease_nobody_took_is_lost(backend: MemoryBackend, clock: ManualClock) -> None:
    # A renewal that reaches the store after the lease ended revives nothing, taken over or not.
    lease = (await backend.claim(req("a", lease_ms=5000))).lease
    assert lease is not None
    clock.advance(5000)
    assert await backend.renew(lease, 5000) is None
    taken = await backend.claim(req("b", lease_ms=5000))
    assert taken.lease is not None and taken.lease.attempt == 2


async def test_frozen_holder_cannot_renew_after_takeover(backend: MemoryBackend, clock: ManualClock) -> None:
    lease = (await backend.claim(req("a", lease_ms=5000))).lease
    assert lease is not None
    clock.advance(6000)
    taken = await backend.claim(req("b", lease_ms=5000))
    assert taken.lease is not None and taken.lease.token > lease.token
    assert await backend.renew(lease, 5000) is None
    assert not await backend.release(lease, ReleaseOutcome.DONE)
    state = await backend.inspect(NS, "job")
    assert state is not None and state.owner == "b" and state.status is JobStatus.RUNNING


async def test_token_increases_across_slots_and_attempts(backend: MemoryBackend, clock: ManualClock) -> None:
    tokens = []
    for i in range(4):
        clock.now = S1 + i * 10_000
        won = await backend.claim(req("a", S1 + i * 10_000))
        assert won.lease is not None
        tokens.append(won.lease.token)
        await backend.release(won.lease, ReleaseOutcome.HANDOVER)
        again = await backend.claim(req("b", S1 + i * 10_000))
        assert again.lease is not None
        tokens.append(again.lease.token)
        await backend.release(again.lease, ReleaseOutcome.DONE)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


async def test_namespaces_are_isolated(backend: MemoryBackend) -> None:
    assert (await backend.claim(ClaimRequest("one", "job", S1, "a"))).won
    assert (await backend.claim(ClaimRequest("two", "job", S1, "b"))).won
    assert [s.job for s in await backend.jobs("one")] == ["job"]


async def test_fingerprint_is_stored_and_returned(backend: MemoryBackend, clock: ManualClock) -> None:
    lease = (await backend.claim(req("a", fingerprint="every:10000+0"))).lease
    assert lease is not None
    await backend.release(lease, ReleaseOutcome.DONE)
    clock.now = S2
    result = await backend.claim(req("b", S2, fingerprint="every:5000+0"))
    assert result.fingerprint == "every:10000+0"


async def test_release_is_pushed_to_subscribers() -> None:
    store = MemoryStore()
    a, b = MemoryBackend(store), MemoryBackend(store)
    seen: list[tuple[str, int]] = []
    await b.subscribe(NS, lambda job, slot: seen.append((job, slot)))
    lease = (await a.claim(req("a"))).lease
    assert lease is not None
    await a.release(lease, ReleaseOutcome.HANDOVER)
    import asyncio

    await asyncio.sleep(0)
    assert seen == [("job", S1)]
    again = (await b.claim(req("b"))).lease
    assert again is not None
    await b.release(again, ReleaseOutcome.DONE)  # a finished run wakes nobody
    await asyncio.sleep(0)
    assert seen == [("job", S1)]


async def test_claim_many_is_one_round_trip_with_per_request_results(backend: MemoryBackend) -> None:
    before = backend.store.calls
    results = await backend.claim_many([ClaimRequest(NS, f"j{i}", S1, "a") for i in range(10)])
    assert backend.store.calls - before == 1
    assert [r.job for r in results] == [f"j{i}" for i in range(10)]
    assert all(r.won for r in results)


async def test_claim_only_backend_one_winner_per_slot_and_horizon() -> None:
    clock = ManualClock(S1)
    backend = MemoryClaimBackend(clock=clock, horizon="1m")
    assert backend.horizon_ms == 60_000
    assert (await backend.claim(req("a"))).won
    taken = await backend.claim(req("b"))
    assert taken.outcome is ClaimOutcome.TAKEN and taken.holder == "a"
    assert (await backend.claim(req("b", S2))).won
    clock.advance(60_000)  # past the horizon the store forgets: why the core never claims that late
    assert (await backend.claim(req("c"))).won
