"""Missed slots: the slots no replica ran are counted once, by the replica that wins the next one, and
kept in the history; in virtual time over one in-memory store."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from anarchon import Cron, Event, Every, JobContext, MemoryBackend, MemoryStore, Scheduler, to_ms
from anarchon._missed import count_missed
from anarchon.inspect import MISSED, Inspector
from anarchon.testing import VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


def replica(store: MemoryStore, clock: VirtualClock, name: str, missed: list[Event], *,
            catch_up: str = "5m", handler_s: float = 0) -> Scheduler[MemoryBackend]:
    s = Scheduler(MemoryBackend(store), instance_id=name, clock=clock, lease="6s", heartbeat="1s")

    async def tick(ctx: JobContext) -> None:
        await asyncio.sleep(handler_s)

    s.every("tick", "10s", tick, catch_up=catch_up)
    s.on("missed", missed.append)
    return s


def test_slots_no_replica_ran_are_counted_once_and_kept_in_the_history(
        clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(clock)
    missed: list[Event] = []
    caplog.set_level(logging.WARNING, "anarchon")

    async def main() -> None:
        first = replica(store, clock, "a", missed)
        await first.start()
        await asyncio.sleep(25)  # +10 s and +20 s run
        await first.stop()
        await asyncio.sleep(60)  # nobody runs +30 ... +80
        later = [replica(store, clock, name, missed) for name in ("b", "c")]
        for s in later:
            await s.start()  # at +85 s: +80 is caught up, +30 ... +70 were missed
        await asyncio.sleep(3)
        for s in later:
            await s.stop()

    clock.run(main())
    assert len(missed) == 1, "two replicas started together: the winner of +80 reports the gap, once"
    event = missed[0]
    assert (event.job, event.count, event.slot, event.outcome) == ("tick", 5, T0 + 70_000, "missed")
    assert event.instance in ("b", "c")
    assert "tick: 5 slot(s) missed from 2026-12-01T10:00:30Z to 2026-12-01T10:01:10Z" in caplog.text

    async def read() -> None:
        async with Inspector(MemoryBackend(store)) as jobs:
            view = (await jobs.overview()).job("tick")
            assert view is not None and view.missed == 5
            entries = [r for r in view.runs if r.outcome == MISSED]
            assert [r.slot for r in entries] == [T0 + k * 10_000 for k in range(7, 2, -1)]
            assert {r.attempt for r in entries} == {0} and "no replica ran them" in entries[0].error
            assert view.last_success is not None and view.last_success.slot == T0 + 80_000

    clock.run(read())


def test_a_restart_within_the_interval_misses_nothing(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    missed: list[Event] = []

    async def main() -> None:
        for name in ("a", "b"):
            s = replica(store, clock, name, missed)
            await s.start()
            await asyncio.sleep(15)
            await s.stop()
            await asyncio.sleep(4)

    clock.run(main())
    assert missed == []


def test_slots_skipped_behind_a_long_run_are_not_missed(clock: VirtualClock) -> None:
    """A run that outlasts its interval makes the next slots skip (overlap): they are not missed."""
    store = MemoryStore(clock)
    missed: list[Event] = []

    async def main() -> None:
        first = replica(store, clock, "a", missed, handler_s=35)
        await first.start()
        await asyncio.sleep(12)  # +10 runs 35 s: +20, +30 and +40 are skipped behind it
        await first.stop()  # ... it is handed over, and its lease ends the run's record
        second = replica(store, clock, "b", missed, handler_s=0)
        await second.start()
        await asyncio.sleep(50)
        await second.stop()

    clock.run(main())
    assert [e.count for e in missed] == [], missed


def test_a_paused_job_misses_nothing(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    missed: list[Event] = []

    async def main() -> None:
        first = replica(store, clock, "a", missed)
        await first.start()
        await asyncio.sleep(15)
        await first.pause("tick")
        await first.stop()
        await asyncio.sleep(60)
        second = replica(store, clock, "b", missed)
        await second.start()  # paused at start: not judged
        await asyncio.sleep(5)
        await second.resume("tick")
        await asyncio.sleep(30)
        await second.stop()

    clock.run(main())
    assert missed == []


def test_counting_a_gap() -> None:
    every = Every(10_000)
    assert count_missed(every, 0, 50_000, 2) == (4, [40_000, 30_000])
    assert count_missed(every, 0, 10_000, 5) == (0, [])
    assert count_missed(every, 5_000, 10_001, 5) == (1, [10_000])
    daily = Cron("0 8 * * *")
    count, newest = count_missed(daily, T0, T0 + 3 * 86_400_000, 2)
    assert count == 3 and newest[0] - newest[1] == 86_400_000


def stored_replica(store: MemoryStore, clock: VirtualClock, name: str, missed: list[Event],
                   ran: list[tuple[str, int]], *, task: str = "report") -> Scheduler[MemoryBackend]:
    s = Scheduler(MemoryBackend(store), instance_id=name, clock=clock, lease="6s", heartbeat="1s")

    @s.task(task)
    async def report(ctx: JobContext) -> None:
        ran.append((ctx.instance_id, ctx.slot))

    s.on("missed", missed.append)
    return s


def test_a_stored_schedules_slots_that_no_replica_ran_are_counted_once(
        clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(clock)
    missed: list[Event] = []
    ran: list[tuple[str, int]] = []
    caplog.set_level(logging.WARNING, "anarchon")

    async def main() -> None:
        first = stored_replica(store, clock, "a", missed, ran)
        await first.start()
        await first.schedules.add("cust-1", "report", every="10s", catch_up="5m")
        await asyncio.sleep(25)  # +10 s and +20 s run
        await first.stop()
        await asyncio.sleep(60)  # nobody runs +30 ... +80
        later = [stored_replica(store, clock, name, missed, ran) for name in ("b", "c", "d")]
        for s in later:
            await s.start()  # at +85 s: +80 is caught up, +30 ... +70 were missed
        await asyncio.sleep(30)  # +90 ... +110 run on time: nothing more is missed
        for s in later:
            await s.stop()

    clock.run(main())
    assert sorted(slot for _, slot in ran) == [T0 + k * 10_000 for k in (1, 2, 8, 9, 10, 11)], ran
    assert len(missed) == 1, f"replicas started together: the winner of +80 reports the gap, once: {missed}"
    event = missed[0]
    assert (event.job, event.task, event.count, event.slot, event.outcome) == (
        "cust-1", "report", 5, T0 + 70_000, "missed")
    assert "cust-1: 5 slot(s) missed from 2026-12-01T10:00:30Z to 2026-12-01T10:01:10Z" in caplog.text

    async def read() -> None:
        async with Inspector(MemoryBackend(store)) as jobs:
            view = (await jobs.overview()).job("cust-1")
            assert view is not None and view.missed == 5, view

    clock.run(read())


def test_a_stored_schedules_slots_are_counted_once_a_replica_with_its_task_is_up(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    missed: list[Event] = []
    ran: list[tuple[str, int]] = []

    async def main() -> None:
        old = stored_replica(store, clock, "old", missed, ran, task="cleanup")  # a version without the task
        await old.start()
        await old.schedules.add("cust-1", "report", every="1m", catch_up="30s")
        await asyncio.sleep(640)  # ten minutes and more with no replica that can run it
        new = stored_replica(store, clock, "new", missed, ran)
        await new.start()
        await asyncio.sleep(60)
        await new.stop()
        await old.stop()

    clock.run(main())
    # Added at +0: +1m ... +10m were due with no replica able to run them; at +10m40s catch-up (30 s)
    # runs none of them, and the first run is +11m.
    assert sorted(slot for _, slot in ran) == [T0 + 11 * 60_000], ran
    assert [(e.job, e.task, e.count, e.slot, e.instance) for e in missed] == [
        ("cust-1", "report", 10, T0 + 10 * 60_000, "new")], missed
