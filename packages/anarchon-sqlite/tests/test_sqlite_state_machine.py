"""Every row of the claim table, run against MemoryBackend (the reference) and SqliteBackend on a real file.

Each scenario asserts the outcomes written in the table, for both backends, so the two agree row by
row. A seeded random sequence of operations then compares the two backends result by result.
Liveness never depends on timing: a live lease is 60 s, an expired one is 0 ms (expiry is inclusive).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from anarchon import (
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobState,
    Lease,
    MemoryBackend,
    Overlap,
    ReleaseOutcome,
)
from anarchon_sqlite import SqliteBackend

LIVE = 60_000
GONE = 0
NS = "ns"


@pytest.fixture(params=["memory", "sqlite"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    b: Any = MemoryBackend() if request.param == "memory" else SqliteBackend(tmp_path / "jobs.db")
    await b.open()
    try:
        yield b
    finally:
        await b.close()


def base_slot() -> int:
    """A slot a minute in the past, on a whole second."""
    return (time.time_ns() // 1_000_000 // 1000) * 1000 - 60_000


def req(slot: int, owner: str, *, job: str = "job", lease: int = LIVE, max_attempts: int = 3,
        overlap: Overlap = Overlap.SKIP, fp: str = "every:10s", skew: int = 2_000) -> ClaimRequest:
    return ClaimRequest(NS, job, slot, owner, lease, max_attempts, overlap, fp, skew)


def short(r: ClaimResult) -> str:
    """The outcome and the facts a row of the table fixes, as one readable string."""
    parts = [r.outcome.value]
    if r.lease is not None:
        parts += [f"attempt={r.lease.attempt}", f"token={r.lease.token}", f"owner={r.lease.owner}"]
        assert r.lease.slot == r.slot
        assert r.now is not None
        assert r.lease.expires_at >= r.now
    elif r.outcome in (ClaimOutcome.TAKEN, ClaimOutcome.SKIPPED, ClaimOutcome.STALE, ClaimOutcome.DONE,
                       ClaimOutcome.EXHAUSTED):
        parts += [f"holder={r.holder}", f"attempt={r.attempt}"]
    if r.previous_status is not None:
        parts.append(f"after={r.previous_status.value}")
    return " ".join(parts)


async def won(b: Any, request: ClaimRequest) -> Lease:
    result = await b.claim(request)
    assert result.lease is not None, short(result)
    lease: Lease = result.lease
    return lease


async def test_no_record_wins_attempt_1_token_1(backend: Any) -> None:
    s = base_slot()
    r = await backend.claim(req(s, "a"))
    assert short(r) == "won attempt=1 token=1 owner=a"
    assert r.lease.expires_at - r.now == LIVE
    assert r.fingerprint is None
    assert r.record_slot is None


async def test_same_slot_live_is_taken_with_holder_and_expiry(backend: Any) -> None:
    s = base_slot()
    first = await backend.claim(req(s, "a"))
    r = await backend.claim(req(s, "b"))
    assert short(r) == "taken holder=a attempt=1"
    assert r.expires_at == first.lease.expires_at
    assert r.record_slot == s


@pytest.mark.parametrize("outcome", [ReleaseOutcome.DONE, ReleaseOutcome.FAILED])
async def test_same_slot_done_or_failed_is_done(backend: Any, outcome: ReleaseOutcome) -> None:
    s = base_slot()
    lease = await won(backend, req(s, "a"))
    assert await backend.release(lease, outcome) is True
    assert short(await backend.claim(req(s, "b"))) == "done holder=a attempt=1"
    assert short(await backend.claim(req(s, "b", lease=GONE))) == "done holder=a attempt=1"


async def test_released_slot_is_taken_over_at_once(backend: Any) -> None:
    s = base_slot()
    lease = await won(backend, req(s, "a"))
    assert await backend.release(lease, ReleaseOutcome.HANDOVER) is True
    r = await backend.claim(req(s, "b"))
    assert short(r) == "won attempt=2 token=2 owner=b after=released"
    # The old holder is fenced off: its lease no longer renews or releases.
    assert await backend.renew(lease, LIVE) is None
    assert await backend.release(lease, ReleaseOutcome.DONE) is False


async def test_expired_lease_is_taken_over(backend: Any) -> None:
    s = base_slot()
    lease = await won(backend, req(s, "a", lease=GONE))
    r = await backend.claim(req(s, "b"))
    assert short(r) == "won attempt=2 token=2 owner=b after=running"
    assert await backend.renew(lease, LIVE) is None


async def test_expired_lease_nobody_took_over_is_lost(backend: Any) -> None:
    s = base_slot()
    lease = await won(backend, req(s, "a", lease=GONE))
    assert await backend.renew(lease, LIVE) is None
    assert short(await backend.claim(req(s, "b"))) == "won attempt=2 token=2 owner=b after=running"


async def test_a_claim_past_stale_after_is_stale(backend: Any) -> None:
    s = base_slot()
    assert short(await backend.claim(replace(req(s, "a"), stale_after=1))).startswith("stale")
    await won(backend, replace(req(s, "a"), stale_after=10**13))


async def test_max_attempts_exhausted(backend: Any) -> None:
    s = base_slot()
    await won(backend, req(s, "a", lease=GONE, max_attempts=2))
    assert short(await backend.claim(req(s, "b", lease=GONE, max_attempts=2))) == (
        "won attempt=2 token=2 owner=b after=running")
    r = await backend.claim(req(s, "c", max_attempts=2))
    assert short(r) == "exhausted holder=b attempt=2 after=running"
    assert short(await backend.claim(req(s, "c", max_attempts=3))) == (
        "won attempt=3 token=3 owner=c after=running")


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.BUFFER_ONE])
async def test_older_slot_live_skips_the_new_one(backend: Any, overlap: Overlap) -> None:
    s = base_slot()
    await won(backend, req(s, "a"))
    r = await backend.claim(req(s + 10_000, "b", overlap=overlap))
    assert short(r) == "skipped holder=a attempt=1"
    assert r.record_slot == s
    assert r.expires_at is not None
    assert short(await backend.claim(req(s, "b", overlap=overlap))) == "taken holder=a attempt=1"


async def test_older_slot_live_replace_revokes_it(backend: Any) -> None:
    s = base_slot()
    old = await won(backend, req(s, "a"))
    r = await backend.claim(req(s + 10_000, "b", overlap=Overlap.REPLACE))
    assert short(r) == "won attempt=1 token=2 owner=b"
    assert r.record_slot == s
    assert await backend.renew(old, LIVE) is None
    assert await backend.release(old, ReleaseOutcome.DONE) is False
    assert short(await backend.claim(req(s, "c", overlap=Overlap.REPLACE))) == "stale holder=b attempt=1"


async def test_older_slot_live_allow_runs_both(backend: Any) -> None:
    s = base_slot()
    allow = Overlap.ALLOW
    old = await won(backend, req(s, "a", overlap=allow))
    new = await won(backend, req(s + 10_000, "b", overlap=allow))
    assert (new.attempt, new.token) == (1, 2)
    assert await backend.renew(old, LIVE) is not None
    assert short(await backend.claim(req(s, "c", overlap=allow))) == "taken holder=a attempt=1"
    assert short(await backend.claim(req(s + 10_000, "c", overlap=allow))) == "taken holder=b attempt=1"
    assert await backend.release(old, ReleaseOutcome.DONE) is True
    # The older slot's record is gone once it ended; the job's record is the newest slot.
    assert short(await backend.claim(req(s, "c", overlap=allow))) == "stale holder=b attempt=1"
    state = await backend.inspect(NS, "job")
    assert (state.slot, state.owner, state.token) == (s + 10_000, "b", 2)


async def test_allow_takeover_of_an_older_slot_advances_the_job_token(backend: Any) -> None:
    s = base_slot()
    allow = Overlap.ALLOW
    await won(backend, req(s, "a", overlap=allow, lease=300))
    await won(backend, req(s + 10_000, "b", overlap=allow))
    await asyncio.sleep(0.35)  # the older slot's 300 ms lease expires
    r = await backend.claim(req(s, "c", overlap=allow))
    assert short(r) == "won attempt=2 token=3 owner=c after=running"
    r = await backend.claim(req(s + 20_000, "d", overlap=allow))
    assert short(r) == "won attempt=1 token=4 owner=d"


async def test_older_slot_in_any_other_state_is_superseded(backend: Any) -> None:
    s = base_slot()
    await won(backend, req(s, "a", lease=GONE))  # still 'running', but expired
    r = await backend.claim(req(s + 10_000, "b", lease=GONE))
    assert short(r) == "won attempt=1 token=2 owner=b"
    assert r.record_slot == s
    done = await won(backend, req(s + 20_000, "c", lease=GONE))
    await backend.release(done, ReleaseOutcome.DONE)
    assert short(await backend.claim(req(s + 30_000, "d"))) == "won attempt=1 token=4 owner=d"


async def test_newer_slot_in_the_store_is_stale(backend: Any) -> None:
    s = base_slot()
    await won(backend, req(s + 10_000, "a"))
    r = await backend.claim(req(s, "b"))
    assert short(r) == "stale holder=a attempt=1"
    assert r.record_slot == s + 10_000


async def test_slot_beyond_max_skew_is_early(backend: Any) -> None:
    future = base_slot() + 120_000  # one minute ahead of the store's clock
    r = await backend.claim(req(future, "a"))
    assert short(r) == "early"
    assert r.now is not None
    assert 55_000 < future - r.now <= 60_000
    assert await backend.inspect(NS, "job") is None
    assert short(await backend.claim(req(future, "a", skew=120_000))) == "won attempt=1 token=1 owner=a"


async def test_fingerprint_is_stored_and_returned(backend: Any) -> None:
    s = base_slot()
    await won(backend, req(s, "a", fp="every:10s", lease=GONE))
    assert (await backend.claim(req(s, "b", fp="every:20s"))).fingerprint == "every:10s"
    assert (await backend.claim(req(s, "c", fp="every:30s"))).fingerprint == "every:20s"
    r = await backend.claim(req(s + 10_000, "c", fp="every:30s", overlap=Overlap.REPLACE))
    assert r.fingerprint == "every:20s"
    state = await backend.inspect(NS, "job")
    assert state.fingerprint == "every:30s"


async def test_renew_checks_slot_token_and_owner(backend: Any) -> None:
    s = base_slot()
    lease = await won(backend, req(s, "a", lease=1_000))
    renewed = await backend.renew(lease, LIVE)
    assert renewed is not None
    assert renewed.expires_at > lease.expires_at
    assert (renewed.slot, renewed.token, renewed.attempt, renewed.owner) == (s, 1, 1, "a")
    for forged in (
        Lease(NS, "job", s, 1, 1, "b", 0),
        Lease(NS, "job", s, 1, 2, "a", 0),
        Lease(NS, "job", s + 1, 1, 1, "a", 0),
        Lease(NS, "other", s, 1, 1, "a", 0),
    ):
        assert await backend.renew(forged, LIVE) is None
        assert await backend.release(forged, ReleaseOutcome.DONE) is False
    assert await backend.release(lease, ReleaseOutcome.DONE) is True
    assert await backend.renew(lease, LIVE) is None
    assert await backend.release(lease, ReleaseOutcome.FAILED) is False


async def test_inspect_and_jobs_read_the_newest_records(backend: Any) -> None:
    s = base_slot()
    lease = await won(backend, req(s, "a", job="b-job", fp="cron:x"))
    await won(backend, req(s, "z", job="a-job"))
    await backend.release(lease, ReleaseOutcome.FAILED)
    state = await backend.inspect(NS, "b-job")
    assert isinstance(state, JobState)
    assert (state.slot, state.attempt, state.token, state.owner, state.status.value, state.fingerprint) == (
        s, 1, 1, "a", "failed", "cron:x")
    assert state.now >= state.updated_at
    assert [j.job for j in await backend.jobs(NS)] == ["a-job", "b-job"]
    assert await backend.jobs("elsewhere") == []
    assert await backend.inspect(NS, "missing") is None


async def test_claim_many_answers_in_request_order(backend: Any) -> None:
    s = base_slot()
    await won(backend, req(s, "x", job="held"))
    results = await backend.claim_many([
        req(s, "a", job="fresh"), req(s, "a", job="held"), req(s + 999_999, "a", job="ahead"),
        req(s, "b", job="fresh"),
    ])
    assert [short(r) for r in results] == [
        "won attempt=1 token=1 owner=a", "taken holder=x attempt=1", "early", "taken holder=a attempt=1",
    ]
    assert await backend.claim_many([]) == []


def _normal(value: Any) -> Any:
    """A result with the store's times removed, so two stores can be compared."""
    if isinstance(value, ClaimResult):
        lease = value.lease
        return (value.outcome, value.slot, value.holder, value.attempt, value.previous_status,
                value.fingerprint, value.record_slot,
                None if lease is None else (lease.slot, lease.attempt, lease.token, lease.owner))
    if isinstance(value, Lease):
        return (value.slot, value.attempt, value.token, value.owner)
    if isinstance(value, JobState):
        return (value.job, value.slot, value.attempt, value.token, value.owner, value.status,
                value.fingerprint)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


async def _random_run(b: Any, seed: int, s: int) -> list[Any]:
    rng = random.Random(seed)
    leases: list[Lease] = []
    seen: list[Any] = []
    newest = 0  # slots mostly move forward, as a schedule's do, with a few late claims
    for _ in range(200):
        op = rng.random()
        if op < 0.55 or not leases:
            overlap = rng.choice(list(Overlap))
            newest += rng.random() < 0.15
            index = max(0, newest - (rng.random() < 0.15))
            r = req(s + 1_000 * index, rng.choice("abc"), job=rng.choice(["j1", "j2"]),
                    lease=rng.choice([LIVE, GONE]), max_attempts=rng.choice([1, 2, 3]),
                    overlap=overlap, fp=rng.choice(["f1", "f2"]))
            result = await b.claim(r)
            if result.lease is not None:
                leases.append(result.lease)
            seen.append(result)
        elif op < 0.75:
            lease = rng.choice(leases)
            renewed = await b.renew(lease, rng.choice([LIVE, GONE]))
            seen.append(renewed)
        elif op < 0.95:
            lease = rng.choice(leases)
            seen.append(await b.release(lease, rng.choice(list(ReleaseOutcome))))
        else:
            seen.append(await b.jobs(NS))
    return [_normal(v) for v in seen]


@pytest.mark.parametrize("seed", range(6))
async def test_random_sequences_match_the_reference_model(tmp_path: Path, seed: int) -> None:
    s = base_slot()
    memory = MemoryBackend()
    sqlite = SqliteBackend(tmp_path / "jobs.db")
    await sqlite.open()
    try:
        expected = await _random_run(memory, seed, s)
        got = await _random_run(sqlite, seed, s)
    finally:
        await sqlite.close()
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert g == e, f"step {i}: sqlite {g!r} != memory {e!r}"
