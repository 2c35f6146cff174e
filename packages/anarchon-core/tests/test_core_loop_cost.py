"""What a slot costs the event loop, counted (not timed): the callbacks a run schedules."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from anarchon import MemoryBackend, MemoryStore, Scheduler
from anarchon._wakeup import Wakeup
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


def _timer_callbacks(jobs: int, seconds: float, *, history: int = 0) -> Counter[str]:
    """The timer callbacks that one scheduler with `jobs` jobs due every second runs over `seconds`
    of virtual time (MemoryBackend: the keeper is on the loop), by their function's name."""
    clock = VirtualClock(START)
    scheduler = Scheduler(MemoryBackend(MemoryStore(clock)), instance_id="i0", clock=clock, history=history)

    async def handler() -> None:
        return None

    for j in range(jobs):
        scheduler.every(f"j{j}", "1s", handler, catch_up=0)
    fired: Counter[str] = Counter()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        counting = False
        call_at = loop.call_at

        def counted(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            when, callback, *rest = args

            def fire(*a: Any) -> None:
                if counting:
                    fired[getattr(callback, "__qualname__", repr(callback))] += 1
                callback(*a)
            return call_at(when, fire, *rest, **kwargs)

        loop.call_at = counted  # type: ignore[method-assign,assignment]
        async with scheduler:
            await asyncio.sleep(2.5)
            counting = True
            await asyncio.sleep(seconds)
            counting = False
        del loop.call_at

    clock.run(main())
    return fired


def test_a_deadline_ends_a_background_wait_with_one_timer_callback_and_no_cancellation() -> None:
    # The planner, the renewals and the history writer sleep until their next deadline: each deadline
    # is one timer callback that ends the wait. Under asyncio.timeout it would cancel the waiting task
    # and turn the CancelledError into a TimeoutError (its callback, `Timeout._on_timeout`, would show).
    fired = _timer_callbacks(10, 60, history=50)
    assert "Timeout._on_timeout" not in fired, fired
    assert fired["_expire"] > 0, fired


def test_an_idle_scheduler_wakes_only_for_its_periodic_checks() -> None:
    # With no job, over a virtual minute the loop's timers are the lag watch (every half second), the
    # controls poll (every heartbeat, 5 s), the catalogue's refresh (every minute) and this test's
    # own sleep: no planner, renewal or history timer fires to find nothing due.
    fired = _timer_callbacks(0, 60, history=50)
    assert fired == Counter({"_set_result_unless_cancelled": 2 * 60 + 60 // 5 + 1, "_expire": 1}), fired


def test_wakeup_wait_returns_when_set_or_at_its_deadline() -> None:
    clock = VirtualClock(START)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        wake = Wakeup()
        t0 = loop.time()
        assert await wake.wait(1.5) is False
        assert loop.time() - t0 == 1.5
        loop.call_later(0.25, wake.set)
        t0 = loop.time()
        assert await wake.wait(10) is True
        assert loop.time() - t0 == 0.25
        assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        assert await wake.wait() is True  # still set: at once
        wake.clear()
        loop.call_later(3, wake.set)
        assert await wake.wait() is True
        assert loop.time() - t0 == 3.25

    clock.run(main())
