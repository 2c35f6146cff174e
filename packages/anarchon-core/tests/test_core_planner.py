"""The planner on its own, in virtual time: when each claim is handed over, and what follows a claim.

No backend and no engine: a planner, jobs, and a `claim` callback that records each batch with the
virtual time at which it came.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from anarchon import Job, to_ms
from anarchon._options import resolve
from anarchon._outcomes import Action, Step
from anarchon._planner import Due, Planner
from anarchon._schedules import At, Every
from anarchon.testing import VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)
LOG = logging.getLogger("anarchon.test")


def job(name: str, every: str = "10s", **options: object) -> Job:
    return Job(name, Every.parse(every), resolve(options, lease_ms=6000, heartbeat_ms=1000), lambda: None)


class Recorder:
    """The batches handed to `claim`: (virtual ms, [(job, slot, kind), ...])."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.batches: list[tuple[int, list[tuple[str, int, str]]]] = []
        self.entries: list[Due] = []

    def claim(self, batch: list[Due]) -> None:
        self.entries.extend(batch)
        self.batches.append((self.clock.now_ms(), [(d.plan.job.name, d.slot, d.kind) for d in batch]))

    def slots(self, name: str) -> list[int]:
        return [slot for _, batch in self.batches for n, slot, kind in batch if n == name and kind == "slot"]


def run_for(clock: VirtualClock, planner: Planner, recorder: Recorder, seconds: float,
            during: object = None) -> None:
    async def main() -> None:
        task = asyncio.ensure_future(planner.run(recorder.claim))
        if callable(during):
            await during()
        await asyncio.sleep(seconds)
        planner.close()
        task.cancel()

    clock.run(main())


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


def test_each_boundary_is_claimed_once_within_its_jitter(clock: VirtualClock) -> None:
    planner = Planner(clock, LOG, jitter_ms=None, horizon_ms=None)
    rec = Recorder(clock)
    planner.add(job("a", catch_up=0))
    run_for(clock, planner, rec, 35)
    assert rec.slots("a") == [T0 + 10_000, T0 + 20_000, T0 + 30_000]
    for at, batch in rec.batches:
        (_, slot, _), = batch
        assert slot <= at <= slot + 50, (at, slot)  # min(50 ms, interval / 10)


def test_jobs_due_together_come_in_few_batches(clock: VirtualClock) -> None:
    planner = Planner(clock, LOG, jitter_ms=None, horizon_ms=None)
    rec = Recorder(clock)
    for i in range(100):
        planner.add(job(f"j{i}", catch_up=0))
    run_for(clock, planner, rec, 11)
    assert sum(len(b) for _, b in rec.batches) == 100
    assert len(rec.batches) <= 4  # one per jitter group at most


def test_a_missed_slot_is_caught_up_only_when_the_next_is_far_enough(clock: VirtualClock) -> None:
    rec = Recorder(clock)
    planner = Planner(clock, LOG, jitter_ms=0, horizon_ms=None)
    clock.advance(3)  # started 3 s after the slot at T0: the next is 7 s away, over half the interval
    planner.add(job("far"))
    clock.advance(5)  # ... and this one 8 s after it: the next is 2 s away, under half
    planner.add(job("near"))
    run_for(clock, planner, rec, 1)
    kinds = [(n, slot, kind) for _, b in rec.batches for n, slot, kind in b]
    assert ("far", T0, "catchup") in kinds and not [k for k in kinds if k[0] == "near"]


def test_a_bounded_plan_queues_no_boundary_past_its_bound_until_extended(clock: VirtualClock) -> None:
    planner = Planner(clock, LOG, jitter_ms=0, horizon_ms=None)
    rec = Recorder(clock)
    planner.add(job("s", catch_up=0), until=T0 + 20_000)

    async def extend_later() -> None:
        await asyncio.sleep(35)
        plan = planner.plan_of("s")
        assert plan is not None and planner.idle(plan)
        planner.extend(plan, T0 + 60_000)

    run_for(clock, planner, rec, 30, extend_later)
    # The boundary held back at +30 is claimed late when the bound moves on, not skipped.
    assert rec.slots("s") == [T0 + 10_000, T0 + 20_000, T0 + 30_000, T0 + 40_000, T0 + 50_000, T0 + 60_000]


def test_a_removed_plan_is_claimed_no_more(clock: VirtualClock) -> None:
    planner = Planner(clock, LOG, jitter_ms=0, horizon_ms=None)
    rec = Recorder(clock)
    planner.add(job("gone", catch_up=0))
    planner.add(job("kept", catch_up=0))

    async def remove_later() -> None:
        await asyncio.sleep(15)
        planner.remove("gone")
        assert planner.plan_of("gone") is None

    run_for(clock, planner, rec, 20, remove_later)
    assert rec.slots("gone") == [T0 + 10_000]
    assert rec.slots("kept") == [T0 + 10_000, T0 + 20_000, T0 + 30_000]


def test_no_slot_at_or_before_a_plans_not_before_is_caught_up(clock: VirtualClock) -> None:
    planner = Planner(clock, LOG, jitter_ms=0, horizon_ms=None)
    rec = Recorder(clock)
    clock.advance(3)
    planner.add(job("written-after", "10s"), not_before=T0)  # written at the slot itself
    planner.add(job("written-before", "10s"), not_before=T0 - 1)
    run_for(clock, planner, rec, 1)
    caught = {n for _, b in rec.batches for n, _, kind in b if kind == "catchup"}
    assert caught == {"written-before"}


def test_a_late_instance_jumps_to_the_newest_slot(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    planner = Planner(clock, LOG, jitter_ms=0, horizon_ms=None)
    rec = Recorder(clock)
    planner.add(job("a", "1s", catch_up=0))

    async def block() -> None:
        await asyncio.sleep(1.5)
        clock.advance(5)  # the loop was blocked: slots +2 ... +6 came due at once

    with caplog.at_level(logging.INFO, logger="anarchon.test"):
        run_for(clock, planner, rec, 1, block)
    slots = rec.slots("a")
    assert slots[0] == T0 + 1000 and T0 + 6000 in slots
    assert not set(slots) & {T0 + 3000, T0 + 4000, T0 + 5000}, slots
    assert "missed: this instance is" in caplog.text


def test_a_watch_is_claimed_again_after_its_delay_and_settled_by_the_next_boundary(
    clock: VirtualClock,
) -> None:
    planner = Planner(clock, LOG, jitter_ms=0, horizon_ms=None)
    rec = Recorder(clock)
    planner.add(job("a", "10s", catch_up=0))

    async def taken() -> None:
        await asyncio.sleep(10.5)  # +10 claimed; say it was taken, holder's lease ends in 2 s
        entry = rec.entries[-1]
        planner.settle(entry.plan, Action(Step.WATCH, entry.slot, 2000, backup=True, supersedes=True))
        await asyncio.sleep(3)
        planner.settle(entry.plan, Action(Step.WATCH, entry.slot, 20_000, backup=True, supersedes=True))

    run_for(clock, planner, rec, 10, taken)
    watches = [(at, slot) for at, b in rec.batches for _, slot, kind in b if kind == "watch"]
    assert watches == [(T0 + 12_500, T0 + 10_000)], watches  # the second watch: the +20 boundary came first
    assert rec.slots("a") == [T0 + 10_000, T0 + 20_000]


def test_a_one_off_job_is_claimed_once(clock: VirtualClock) -> None:
    planner = Planner(clock, LOG, jitter_ms=0, horizon_ms=None)
    rec = Recorder(clock)
    planner.add(Job("once", At(T0 + 5000), resolve({}, lease_ms=6000, heartbeat_ms=1000), lambda: None))
    run_for(clock, planner, rec, 30)
    assert rec.slots("once") == [T0 + 5000]
