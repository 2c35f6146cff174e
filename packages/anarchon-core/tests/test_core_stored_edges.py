"""Edge cases of schedules as data found in review, each a regression test, in virtual time."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from anarchon import DuplicateJobError, JobContext, MemoryBackend, MemoryStore, Scheduler, Schedules, to_ms
from anarchon.testing import VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


@pytest.fixture
def clock() -> VirtualClock:
    random.seed(1)
    return VirtualClock(START)


def replicas(clock: VirtualClock, n: int, runs: list[tuple[str, int, int, str, str]], *,
             notify: bool = True, **settings: Any) -> tuple[MemoryStore, list[Scheduler[MemoryBackend]]]:
    store = MemoryStore(clock)
    out = []
    for k in range(n):
        s = Scheduler(MemoryBackend(store, notify=notify), instance_id=f"i{k}", clock=clock,
                      **({"lease": "6s", "heartbeat": "1s"} | settings))

        @s.task("a")
        async def a(ctx: JobContext) -> None:
            runs.append((ctx.name, ctx.slot, ctx.attempt, ctx.instance_id, "a"))

        @s.task("b")
        async def b(ctx: JobContext) -> None:
            runs.append((ctx.name, ctx.slot, ctx.attempt, ctx.instance_id, "b"))

        out.append(s)
    return store, out


def test_removed_then_added_again_under_the_same_id_runs_the_new_task(clock: VirtualClock) -> None:
    """A schedule removed and added again under its id never reuses a version: every replica plans the
    new one (its task, spec and args), even when both writes land between two sweeps."""
    runs: list[tuple[str, int, int, str, str]] = []
    store, schedulers = replicas(clock, 2, runs, notify=False)  # (SQLite: no push)
    admin = Schedules(MemoryBackend(store), clock=clock)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await admin.add("s", "a", every="2s")
        await asyncio.sleep(5.5)  # +2, +4 ran with task a
        await admin.remove("s")
        await admin.add("s", "b", every="2s")  # version 1 again
        await asyncio.sleep(10)  # +6 ... +14 should run task b
        for s in schedulers:
            await s.stop()

    clock.run(main())
    after = [task for _, slot, _, _, task in runs if slot > T0 + 6_000]
    assert after and set(after) == {"b"}, runs


def _long_replicas(clock: VirtualClock, starts: list[tuple[int, int, str]], n: int = 2,
                   seconds: float = 30) -> tuple[MemoryStore, list[Scheduler[Any]]]:
    from anarchon.testing import FaultyBackend

    store = MemoryStore(clock)
    schedulers: list[Scheduler[Any]] = []
    for k in range(n):
        s = Scheduler(FaultyBackend(MemoryBackend(store)), instance_id=f"i{k}", clock=clock, lease="6s",
                      heartbeat="1s")

        @s.task("long")
        async def long(ctx: JobContext, **_: Any) -> None:
            starts.append((ctx.slot, ctx.attempt, ctx.instance_id))
            await ctx.sleep(seconds)

        schedulers.append(s)
    return store, schedulers


def test_a_killed_runner_is_taken_over_even_after_its_schedule_was_updated(clock: VirtualClock) -> None:
    """A write of a schedule whose slot is running keeps the backups watching that slot: when its
    holder dies, the slot is taken over as attempt 2, as a code job's is."""
    from anarchon.testing import crash

    starts: list[tuple[int, int, str]] = []
    store, schedulers = _long_replicas(clock, starts)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        admin = Schedules(MemoryBackend(store), clock=clock)
        added = await admin.add("job", "long", every="1m")
        await asyncio.sleep(61)  # slot +60 runs (30 s)
        await admin.update("job", version=added.version, args={"x": 1})  # for the next runs
        await asyncio.sleep(2)
        winner = next(s for s in schedulers if s.active_runs)
        await crash(winner)
        await asyncio.sleep(15)  # lease 6 s: attempt 2 due by +69 s
        for s in schedulers:
            if s is not winner:
                await s.stop()

    clock.run(main())
    assert [a for _, a, _ in starts] == [1, 2], starts


def test_a_slot_handed_over_at_a_stop_is_caught_up_by_the_next_start(clock: VirtualClock) -> None:
    """The due index moves past a slot only once it is settled: a slot handed over at a stop is
    claimed again by the replica that starts next, as a code job's is."""
    store = MemoryStore(clock)
    starts: list[tuple[str, int, int]] = []

    def make(k: int) -> Scheduler[MemoryBackend]:
        s = Scheduler(MemoryBackend(store), instance_id=f"i{k}", clock=clock, lease="6s", heartbeat="1s",
                      stop_timeout="1s")

        @s.task("long")
        async def long(ctx: JobContext) -> None:
            starts.append((ctx.name, ctx.slot, ctx.attempt))
            await ctx.sleep(30)

        @s.every("code", "1m")
        async def code(ctx: JobContext) -> None:
            starts.append((ctx.name, ctx.slot, ctx.attempt))
            await ctx.sleep(30)

        return s

    async def main() -> None:
        first = make(0)
        await first.start()
        await Schedules(MemoryBackend(store), clock=clock).add("stored", "long", every="1m")
        await asyncio.sleep(63)  # both run slot +60
        await first.stop()  # a deploy: both released as handover
        second = make(1)
        await second.start()
        await asyncio.sleep(10)
        await second.stop()

    clock.run(main())
    assert ("code", T0 + 60_000, 2) in starts, starts  # (passes)
    assert ("stored", T0 + 60_000, 2) in starts, starts


class SlowClaims(MemoryBackend):
    """A busy store: each claim's round trip takes 2.5 s (the herd of a big boundary)."""

    async def claim(self, request: Any) -> Any:
        await asyncio.sleep(1.25)
        result = await super().claim(request)
        await asyncio.sleep(1.25)
        return result

    async def claim_many(self, requests: Any) -> Any:
        await asyncio.sleep(1.25)
        results = await super().claim_many(requests)
        await asyncio.sleep(1.25)
        return results


def test_a_backup_keeps_watching_a_slot_whose_claim_was_in_flight_across_two_sweeps(
        clock: VirtualClock) -> None:
    """A plan whose claim is in flight is not evicted by the sweep: its answer (taken) watches the
    slot, and when the winner dies a backup takes it over."""
    from anarchon.testing import crash

    store = MemoryStore(clock)
    starts: list[tuple[int, int, str]] = []
    schedulers: list[Scheduler[Any]] = []
    for k in range(2):
        from anarchon.testing import FaultyBackend

        s = Scheduler(FaultyBackend(SlowClaims(store)), instance_id=f"i{k}", clock=clock, lease="10s",
                      heartbeat="1s")

        @s.task("long")
        async def long(ctx: JobContext) -> None:
            starts.append((ctx.slot, ctx.attempt, ctx.instance_id))
            await ctx.sleep(30)

        schedulers.append(s)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await Schedules(MemoryBackend(store), clock=clock).add("job", "long", every="1m")
        await asyncio.sleep(66)  # slot +60 won (answered at ~+62.5) and running
        winner = next(s for s in schedulers if s.active_runs)
        await crash(winner)
        await asyncio.sleep(25)  # its lease (10 s) expires; a backup should take the slot over
        for s in schedulers:
            if s is not winner:
                await s.stop()

    clock.run(main())
    assert [a for _, a, _ in starts] == [1, 2], starts


def test_a_lease_the_replicas_cannot_use_is_refused_when_written_not_dropped_when_run(
        clock: VirtualClock) -> None:
    """A lease the replicas' default heartbeat cannot serve is refused when written, with the fix,
    not accepted and then never run."""
    runs: list[tuple[str, int, int, str, str]] = []
    store, schedulers = replicas(clock, 2, runs, lease="30s", heartbeat="5s")  # the defaults
    admin = Schedules(MemoryBackend(store), clock=clock)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        try:
            await admin.add("s", "a", every="10s", lease="3s")
        except ValueError:
            return  # refused with one clear error: fine
        await asyncio.sleep(35)
        for s in schedulers:
            await s.stop()

    clock.run(main())
    # Either the add was refused, or the schedule runs.
    stored = [r for r in runs if r[0] == "s"]
    assert stored or not store.schedules.get("anarchon"), "accepted, and never run"


def test_timezone_with_every_is_refused_not_ignored(clock: VirtualClock) -> None:
    admin = Schedules(MemoryBackend(MemoryStore(clock)), clock=clock)

    async def main() -> None:
        with pytest.raises(ValueError, match="timezone"):
            await admin.add("daily", "a", every="1d", timezone="Europe/Athens")

    clock.run(main())


def test_a_code_job_registered_while_running_under_a_planned_schedules_name(clock: VirtualClock) -> None:
    """A code job registered while running cannot take the name of a stored schedule planned here."""
    runs: list[tuple[str, int, int, str, str]] = []
    store, schedulers = replicas(clock, 1, runs, notify=False)
    admin = Schedules(MemoryBackend(store), clock=clock)

    async def main() -> None:
        s = schedulers[0]
        await s.start()
        await admin.add("x", "a", every="2s")
        await asyncio.sleep(3)

        async def x(ctx: JobContext) -> None: ...

        with pytest.raises(DuplicateJobError, match="'x' is a stored schedule"):
            s.every("x", "3s", x)
        await asyncio.sleep(3)
        await s.stop()

    clock.run(main())
    assert len([r for r in runs if r[0] == "x"]) >= 2, runs


def test_schedules_no_replica_can_run_are_not_reread_every_sweep(clock: VirtualClock) -> None:
    """A replica reads only the due schedules of its own tasks: those of a task it lacks are not
    paged through at every sweep."""
    runs: list[tuple[str, int, int, str, str]] = []
    store, schedulers = replicas(clock, 1, runs, notify=False)
    admin = Schedules(MemoryBackend(store), clock=clock)
    pages: list[int] = []

    class Counting(MemoryBackend):
        async def due_schedules(self, namespace: str, **kw: Any) -> Any:
            got = await super().due_schedules(namespace, **kw)
            pages.append(len(got))
            return got

    async def main() -> None:
        for i in range(3000):
            await admin.add(f"o{i}", "not-deployed-yet", every="1h")
        s = schedulers[0]
        s.backend.__class__ = Counting  # count the due index's pages this replica reads
        await s.start()
        await asyncio.sleep(30)
        await s.stop()

    clock.run(main())
    assert sum(pages) < 3000 * 3, f"{sum(pages)} rows read in 30 s for 3000 schedules nobody here runs"


def test_async_with_on_a_running_schedulers_schedules_leaves_its_store_open(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    s = Scheduler(MemoryBackend(store), instance_id="i0", clock=clock, lease="6s", heartbeat="1s")

    @s.task("report")
    async def report(ctx: JobContext) -> None: ...

    async def main() -> None:
        async with s:
            subscribed = len(store.subscriptions)
            async with s.schedules as schedules:
                await schedules.list()
            assert len(store.subscriptions) == subscribed  # (closing the backend drops them)

    clock.run(main())


def test_one_jobs_view_finds_a_stored_schedule_past_the_first_thousand_in_few_calls(
    clock: VirtualClock,
) -> None:
    from anarchon.inspect import Inspector

    store = MemoryStore(clock)

    async def main() -> None:
        admin = Schedules(MemoryBackend(store), clock=clock)
        for i in range(1001):
            await admin.add(f"s{i:05d}", "report", every="1h")
        before = store.calls
        view = await Inspector(MemoryBackend(store)).job("s01000")
        assert view is not None and view.stored is not None and view.origin == "schedule"
        assert store.calls - before <= 8, store.calls - before

    clock.run(main())


def test_a_new_cron_expression_keeps_the_stored_timezone(clock: VirtualClock) -> None:
    admin = Schedules(MemoryBackend(MemoryStore(clock)), clock=clock)

    async def main() -> None:
        added = await admin.add("r", "report", cron="0 9 * * *", timezone="Europe/Athens")
        updated = await admin.update("r", version=added.version, cron="0 10 * * *")
        assert updated.description == "cron '0 10 * * *' (Europe/Athens)"
        with pytest.raises(ValueError, match="invalid version '3'"):
            await admin.update("r", version="3", cron="0 11 * * *")  # type: ignore[arg-type]

    clock.run(main())


def test_pausing_a_one_off_schedule_keeps_its_place_in_the_due_index(clock: VirtualClock) -> None:
    admin = Schedules(MemoryBackend(MemoryStore(clock)), clock=clock)

    async def main() -> None:
        added = await admin.add("once", "report", at=START.timestamp() + 60)
        paused = await admin.pause("once")
        assert paused.paused and paused.next_due == added.next_due

    clock.run(main())
