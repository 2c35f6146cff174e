"""What a slot costs the event loop, counted (not timed): the callbacks a run schedules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from anarchon import MemoryBackend, MemoryStore, Scheduler
from anarchon.testing import VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def test_a_run_costs_the_loop_two_callbacks_its_first_step_and_its_release() -> None:
    # A run is a task (its first step is one callback) that waits once, for its release to land (the
    # wake-up is the other); the claims and releases of a boundary go out in a few batches, whose
    # callbacks are shared by the jobs. A done callback per task, a second wait, or a timer per run
    # would show here as one more callback per run.
    clock = VirtualClock(START)
    store = MemoryStore(clock)
    scheduler = Scheduler(MemoryBackend(store), instance_id="i0", clock=clock, history=0)
    jobs, seconds = 200, 5
    runs = 0

    async def handler() -> None:
        nonlocal runs
        runs += 1

    for j in range(jobs):
        scheduler.every(f"j{j}", "1s", handler, catch_up=0)
    scheduled = 0

    async def main() -> None:
        nonlocal scheduled
        loop = asyncio.get_running_loop()
        call_soon = loop.call_soon

        def counting(*args: Any, **kwargs: Any) -> asyncio.Handle:
            nonlocal scheduled
            scheduled += 1
            return call_soon(*args, **kwargs)

        async with scheduler:
            await asyncio.sleep(2.5)  # past the first boundaries
            runs0 = runs
            loop.call_soon = counting  # type: ignore[method-assign,assignment]
            await asyncio.sleep(seconds)
            del loop.call_soon
            assert runs - runs0 == jobs * seconds

    clock.run(main())
    per_run = scheduled / (jobs * seconds)
    # (2.1 per run: the batches' own callbacks, about 0.1 per run, come on top.)
    assert per_run < 2.5, f"{scheduled} loop callbacks for {jobs * seconds} runs: {per_run:.3f} per run"
