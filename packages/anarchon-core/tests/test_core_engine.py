"""The engine on its own, in virtual time: built from settings and jobs (no Scheduler), it sends the
claims due together in one call and carries out each claim's verdict as it is."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from anarchon import ClaimRequest, ClaimResult, Job, JobContext, MemoryBackend, MemoryStore, Settings, to_ms
from anarchon._engine import Engine
from anarchon._options import resolve
from anarchon._schedules import Every
from anarchon._sweeper import Task
from anarchon.backends import SCHEDULES_CHANGED, ScheduleWrite
from anarchon.testing import VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


class Hook:
    """Records the observer hooks the engine emits."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(self, name: str, /, **kwargs: Any) -> None:
        self.emitted.append((name, kwargs))

    def wants(self, name: str) -> bool:
        return True


class Spy(MemoryBackend):
    """A memory backend that records each claim call, and can answer one late."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.calls: list[int] = []
        self.delay_s = 0.0

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        self.calls.append(len(requests))
        results = await super().claim_many(requests)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return results


def settings(backend: MemoryBackend, clock: VirtualClock, **given: Any) -> Settings:
    return Settings.parse(backend, {"instance_id": "e1", "clock": clock, "lease": "6s", "heartbeat": "1s",
                                    **given})


def job(name: str, handler: Any, every: str = "10s") -> Job:
    return Job(name, Every.parse(every), resolve({"catch_up": 0}, lease_ms=6000, heartbeat_ms=1000), handler)


async def start(backend: MemoryBackend, clock: VirtualClock, jobs: list[Job], hook: Hook,
                **kwargs: Any) -> Engine:
    return await Engine.start(backend, settings(backend, clock), jobs, hook=hook, owner=object(),
                              sibling=lambda: (None, "a test"), **kwargs)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


def test_the_claims_of_one_boundary_go_out_in_one_call_per_batch(clock: VirtualClock) -> None:
    backend = Spy(MemoryStore(clock))
    ran: list[str] = []

    async def handler(ctx: JobContext) -> None:
        ran.append(ctx.name)

    async def main() -> None:
        engine = await start(backend, clock, [job(f"j{i}", handler) for i in range(50)], Hook())
        await asyncio.sleep(11)
        await engine.stop()

    clock.run(main())
    assert sorted(ran) == sorted(f"j{i}" for i in range(50))
    assert sum(backend.calls) == 50 and len(backend.calls) <= 4, backend.calls


def test_wins_answered_after_the_next_slot_are_released_unrun_one_warning_a_batch(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = Spy(MemoryStore(clock))
    backend.delay_s = 12  # every answer of the first boundary comes after the next slot
    ran: list[int] = []

    async def handler(ctx: JobContext) -> None:
        ran.append(ctx.slot)

    batches: list[int] = []

    async def main() -> None:
        engine = await start(backend, clock, [job(f"j{i}", handler) for i in range(5)], Hook())
        await asyncio.sleep(13)
        batches.extend(backend.calls)
        backend.delay_s = 0
        await asyncio.sleep(10)
        await engine.stop()

    with caplog.at_level(logging.WARNING, logger="anarchon"):
        clock.run(main())
    late = [m for m in caplog.messages if "late, after the" in m and "next slot" in m]
    said = sum(int(m.split()[0]) if m[0].isdigit() else 1 for m in late)
    assert said == 5 and len(late) == len(batches[:len(late)]) <= 4, (late, batches)
    assert ran == [T0 + 20_000] * 5  # the +10 slot never ran; the next one did


def test_stop_waits_for_the_runs_and_hands_the_unfinished_over(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    backend = MemoryBackend(store)

    async def handler(ctx: JobContext) -> None:
        await ctx.sleep(60)

    async def main() -> None:
        engine = await start(backend, clock, [job("long", handler, "1m")], Hook())
        await asyncio.sleep(61)
        assert engine.runs.names() == ["long"]
        await engine.stop()
        state = await backend.inspect("anarchon", "long")
        assert state is not None and str(state.status) == "released"

    clock.run(main())


def test_a_pushed_schedule_write_wakes_the_sweep_at_once(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    backend = MemoryBackend(store)
    ran: list[tuple[str, int]] = []

    async def report(ctx: JobContext) -> None:
        ran.append((ctx.name, ctx.slot))

    async def main() -> None:
        engine = await start(backend, clock, [], Hook(), tasks={"report": Task("report", report, True)})
        assert engine.sweeper is not None
        sweeps = engine.sweeper.sweeps
        await asyncio.sleep(0.3)
        write = ScheduleWrite("s", "report", '{"every": 1000, "offset": 0}', "{}", "{}", False, T0 + 1000)
        await MemoryBackend(store).put_schedule("anarchon", write, expect="absent")
        await asyncio.sleep(0.25)  # the push, then one sweep (at most one per 200 ms), well within 1 s
        assert engine.sweeper.sweeps == sweeps + 1 and engine.sweeper.planned == 1
        await asyncio.sleep(3)
        await engine.stop()

    clock.run(main())
    assert [slot for _, slot in ran][:2] == [T0 + 1000, T0 + 2000]


def test_schedules_changed_is_not_a_handover(clock: VirtualClock) -> None:
    backend = MemoryBackend(MemoryStore(clock))

    async def main() -> None:
        engine = await start(backend, clock, [job("a", lambda: None)], Hook())
        engine._pushed("a", SCHEDULES_CHANGED)  # no sweeper here: nothing, and no claim of slot -2
        await asyncio.sleep(0)
        plan = engine.planner.plan_of("a")
        assert plan is not None and not plan.watches
        await engine.stop()

    clock.run(main())
