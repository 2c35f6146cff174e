"""The run supervisor (`_runs`), in virtual time: a run is released only once its handler has ended.

A plain function runs in a worker thread, which cannot be cancelled. Virtual time stands still while
a worker thread runs (`GatedLoop`), but for the time a thread waits for a virtual moment: its handler
here blocks until a timer of the loop releases its slot, so it returns at a chosen virtual time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import selectors
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, TypeVarTuple, Unpack

import pytest

from anarchon import JobContext, JobStatus, MemoryBackend, MemoryStore, RunCancelled, Scheduler
from anarchon.testing import VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Gate:
    """Worker threads started by a `GatedLoop`, and those of them waiting for a virtual moment."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy = 0
        """Worker threads started whose end the loop has not yet seen."""
        self.parked: dict[threading.Event, int] = {}
        """Worker threads waiting for a virtual moment, by the event they wait on."""

    def working(self) -> bool:
        with self.lock:
            return self.busy > sum(self.parked.values())


class _GatedSelector(selectors.DefaultSelector):
    """Advances the virtual clock only while no worker thread is working (see `GatedLoop`)."""

    def __init__(self, clock: VirtualClock, gate: Gate) -> None:
        super().__init__()
        self._clock = clock
        self._gate = gate

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            return super().select(None)
        if self._gate.working():
            # Time stands still: wait for real (a thread's end wakes the loop) and advance nothing.
            return super().select(min(timeout, 0.005))
        self._clock.advance(timeout)
        return []


class GatedLoop(asyncio.SelectorEventLoop):
    """A virtual-time loop that advances time only while every worker thread it started is parked
    (waiting for a virtual moment): a thread's real work takes no virtual time, and a thread that
    wakes is seen to end before time moves on."""

    def __init__(self, clock: VirtualClock) -> None:
        self.gate = Gate()
        super().__init__(_GatedSelector(clock, self.gate))
        self._vclock = clock

    def time(self) -> float:
        return self._vclock.seconds

    def run_in_executor(self, executor: concurrent.futures.Executor | None,
                        func: Callable[[Unpack[Ts]], T], *args: *Ts) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.gate.busy += 1
        future.add_done_callback(self._ended)
        return future

    def _ended(self, _future: asyncio.Future[Any]) -> None:
        self.gate.busy -= 1

    def park(self, event: threading.Event) -> None:
        """In a worker thread: wait for `event`, which `unpark_at` sets at a virtual moment."""
        gate = self.gate
        with gate.lock:
            if event.is_set():
                return
            gate.parked[event] = gate.parked.get(event, 0) + 1
        event.wait(30)  # (real seconds: a safety net, never reached when the test works)

    def unpark_at(self, when: float, event: threading.Event) -> None:
        """Set `event` at loop time `when`, unparking its threads before time can move on."""
        gate = self.gate

        def wake() -> None:
            with gate.lock:
                gate.parked.pop(event, None)
                event.set()

        self.call_at(when, wake)


def run(clock: VirtualClock, main: Any) -> None:
    """`clock.run(main)` on a `GatedLoop`."""
    with asyncio.Runner(loop_factory=lambda: GatedLoop(clock)) as runner:
        runner.run(main)


def gated() -> GatedLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, GatedLoop)
    return loop


class Overlaps:
    """Counts the handlers of one job running at once, across threads and schedulers; its plain
    function handler returns once the virtual loop's timer releases its slot."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.starts: list[tuple[int, int, str]] = []
        """(slot, attempt, instance) of each start."""
        self._released: dict[int, threading.Event] = {}

    def begin(self, ctx: JobContext) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.starts.append((ctx.slot, ctx.attempt, ctx.instance_id))

    def end(self) -> None:
        with self._lock:
            self.now -= 1

    def _event(self, slot: int) -> threading.Event:
        with self._lock:
            return self._released.setdefault(slot, threading.Event())

    def release(self, slots: list[int], after_s: float) -> None:
        """Let the threads of each slot return `after_s` virtual seconds after the slot."""
        loop = gated()
        self._loop = loop
        for slot in slots:
            loop.unpark_at((slot - self._clock.start_ms) / 1000 + after_s, self._event(slot))

    def release_all(self) -> None:
        with self._lock:
            self._closing = True
            events = list(self._released.values())
        for event in events:
            self._loop.unpark_at(0, event)

    _closing = False
    _loop: GatedLoop

    def handler(self, *, then_check: bool = False) -> Any:
        """A plain function that ignores its signal until its slot is released (then raises
        `RunCancelled` if `then_check` and it was asked to end meanwhile)."""

        def handler(ctx: JobContext) -> None:
            self.begin(ctx)
            try:
                release = self._event(ctx.slot)
                if not self._closing:
                    self._loop.park(release)
                if then_check:
                    ctx.raise_if_cancelled()
            finally:
                self.end()

        return handler


def slot_grid(first_ms: int, every_s: float, n: int) -> list[int]:
    return [first_ms + round(k * every_s * 1000) for k in range(n)]


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


def test_a_thread_that_outlives_its_timeout_keeps_the_lease_and_the_next_slots_skip(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MemoryBackend(clock=clock)
    scheduler = Scheduler(backend, clock=clock, lease="6s", heartbeat="1s")
    seen = Overlaps(clock)
    states: list[JobStatus] = []

    async def main() -> None:
        scheduler.every("slow", "5s", seen.handler(), timeout="2s", catch_up=0)
        seen.release(slot_grid(clock.now_ms(), 5, 8), 12)
        try:
            async with scheduler:
                await asyncio.sleep(31)
                state = await backend.inspect("anarchon", "slow")
                assert state is not None
                states.append(state.status)
        finally:
            seen.release_all()

    with caplog.at_level(logging.INFO, logger="anarchon"):
        run(clock, main())
    assert seen.most == 1, f"two runs of 'slow' at once: {seen.starts}"
    # Runs of 12 s every 5 s, each holding the lease until its thread returns: slots in between skip.
    assert len(seen.starts) >= 2, seen.starts
    slots = [slot for slot, _, _ in seen.starts]
    assert all(b - a >= 15_000 for a, b in itertools.pairwise(slots)), slots
    assert "outlived its timeout of 2000 ms" in caplog.text and "keeps its lease" in caplog.text
    assert "skipped" in caplog.text
    assert states and states[0] in (JobStatus.RUNNING, JobStatus.FAILED)


def test_a_thread_that_outlives_its_timeout_ends_the_run_failed(clock: VirtualClock) -> None:
    backend = MemoryBackend(clock=clock)
    scheduler = Scheduler(backend, clock=clock, lease="6s", heartbeat="1s")
    seen = Overlaps(clock)
    states: list[JobStatus | None] = []

    async def main() -> None:
        when = clock.now_ms() + 1000
        scheduler.at("once", when / 1000, seen.handler(), timeout="2s")
        seen.release([when], 8)
        async with scheduler:
            for _ in range(2):
                await asyncio.sleep(5)
                state = await backend.inspect("anarchon", "once")
                states.append(None if state is None else state.status)

    run(clock, main())
    # At 6 s the thread (8 s) still runs: the run holds its lease, though its timeout passed at 3 s.
    assert states == [JobStatus.RUNNING, JobStatus.FAILED], states
    assert seen.most == 1 and len(seen.starts) == 1


class Pair:
    """Two schedulers on one store, one job each, on one virtual clock."""

    def __init__(self, clock: VirtualClock, **settings: Any) -> None:
        self.store = MemoryStore(clock)
        self.schedulers = [
            Scheduler(MemoryBackend(self.store), instance_id=f"i{k}", clock=clock, lease="6s",
                      heartbeat="1s", stop_timeout="1s", **settings)
            for k in range(2)
        ]

    async def start(self) -> None:
        for s in self.schedulers:
            await s.start()

    def winner(self) -> Scheduler[MemoryBackend]:
        return next(s for s in self.schedulers if s.active_runs)

    async def stop(self) -> None:
        for s in self.schedulers:
            await s.stop()


@pytest.mark.parametrize("then_check", [False, True], ids=["returns", "raises-cancelled"])
def test_a_stop_never_hands_over_a_thread_that_is_still_running(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture, then_check: bool
) -> None:
    pair = Pair(clock)
    seen = Overlaps(clock)
    stopped: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for s in pair.schedulers:
            s.every("report", "1m", seen.handler(then_check=then_check), catch_up=0)
        seen.release([clock.now_ms() + 60_000], 20)
        await pair.start()
        try:
            await asyncio.sleep(61)
            winner = pair.winner()
            stop = asyncio.ensure_future(winner.stop())
            await asyncio.sleep(10)
            # 10 s into the stop (stop_timeout 1 s): the thread runs, the lease is kept, no attempt 2.
            assert not stop.done() and seen.starts == [(seen.starts[0][0], 1, winner.instance_id)]
            await stop
            stopped.append(loop.time())
            await asyncio.sleep(3)
        finally:
            seen.release_all()
            await pair.stop()

    with caplog.at_level(logging.INFO, logger="anarchon"):
        run(clock, main())
    assert seen.most == 1, f"two runs of one slot at once: {seen.starts}"
    stuck = [r.getMessage() for r in caplog.records if "still runs" in r.getMessage()]
    assert len(stuck) == 1 and "test_core_runs" not in stuck[0], stuck
    assert "handler Overlaps.handler.<locals>.handler" in stuck[0]
    assert "cannot be cancelled" in stuck[0] and "lease is kept" in stuck[0]
    attempts = [attempt for _, attempt, _ in seen.starts]
    # A thread that returns ends the run done; one that raises RunCancelled hands the slot over.
    assert attempts == ([1, 2] if then_check else [1]), seen.starts


def test_a_coroutine_that_ignores_its_cancellation_keeps_its_lease_until_it_ends(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    pair = Pair(clock)
    seen = Overlaps(clock)

    async def stubborn(ctx: JobContext) -> None:
        seen.begin(ctx)
        try:
            end = asyncio.get_running_loop().time() + 20
            while asyncio.get_running_loop().time() < end:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(1)
            raise RunCancelled("done ignoring")
        finally:
            seen.end()

    async def main() -> None:
        for s in pair.schedulers:
            s.every("report", "1m", stubborn, catch_up=0)
        await pair.start()
        await asyncio.sleep(61)
        winner = pair.winner()
        await winner.stop()
        await asyncio.sleep(3)
        await pair.stop()

    with caplog.at_level(logging.INFO, logger="anarchon"):
        run(clock, main())
    assert seen.most == 1, f"two runs of one slot at once: {seen.starts}"
    assert [a for _, a, _ in seen.starts] == [1, 2], seen.starts
    assert any("did not end when cancelled" in r.getMessage() for r in caplog.records)


def test_an_async_handler_that_ignores_its_signal_is_cancelled_after_stop_timeout(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    pair = Pair(clock)
    seen = Overlaps(clock)

    async def deaf(ctx: JobContext) -> None:
        seen.begin(ctx)
        try:
            await asyncio.sleep(20)
        finally:
            seen.end()

    async def main() -> None:
        for s in pair.schedulers:
            s.every("report", "1m", deaf, catch_up=0)
        await pair.start()
        await asyncio.sleep(61)
        await pair.winner().stop()
        await asyncio.sleep(3)
        await pair.stop()

    with caplog.at_level(logging.INFO, logger="anarchon"):
        run(clock, main())
    assert seen.most == 1 and [a for _, a, _ in seen.starts] == [1, 2], seen.starts
    assert not any("still runs" in r.getMessage() for r in caplog.records)


def test_replace_never_starts_a_newer_slot_beside_a_thread_that_runs_on(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    pair = Pair(clock)
    seen = Overlaps(clock)

    async def main() -> None:
        for s in pair.schedulers:
            s.every("sync", "5s", seen.handler(), overlap="replace", catch_up=0)
        first = (clock.now_ms() // 5000 + 1) * 5000
        seen.release(slot_grid(first, 5, 10), 12)  # each thread returns 12 s after its slot
        await pair.start()
        try:
            await asyncio.sleep(40)
        finally:
            seen.release_all()
            await pair.stop()

    with caplog.at_level(logging.INFO, logger="anarchon"):
        run(clock, main())
    assert seen.most == 1, f"two runs of 'sync' at once: {seen.starts}"
    slots = [slot for slot, _, _ in seen.starts]
    # Each run holds its lease until its thread returns (12 s), then the newest slot due starts.
    assert len(slots) >= 3 and all(b - a == 10_000 for a, b in itertools.pairwise(slots)), slots
    asked = [r.getMessage() for r in caplog.records if "is asked to end" in r.getMessage()]
    assert asked and "handler Overlaps.handler.<locals>.handler" in asked[0], asked
    assert "cannot be cancelled" in asked[0] and "keeps its lease" in asked[0]


def test_replace_cancels_an_async_handler_that_ignores_its_signal_then_starts_the_newer_slot(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    pair = Pair(clock)
    seen = Overlaps(clock)
    began: list[int] = []

    async def deaf(ctx: JobContext) -> None:
        seen.begin(ctx)
        began.append(clock.now_ms() - ctx.slot)
        try:
            await asyncio.sleep(25)  # not ctx.sleep: the signal alone does not end it
        finally:
            seen.end()

    async def main() -> None:
        for s in pair.schedulers:
            s.every("report", "10s", deaf, overlap="replace", catch_up=0)
        await pair.start()
        await asyncio.sleep(35)
        await pair.stop()

    with caplog.at_level(logging.INFO, logger="anarchon"):
        run(clock, main())
    assert seen.most == 1, f"two runs of 'report' at once: {seen.starts}"
    slots = [slot for slot, _, _ in seen.starts]
    assert len(slots) >= 3 and all(b - a == 10_000 for a, b in itertools.pairwise(slots)), slots
    # Cancelled after stop_timeout (1 s): each newer slot starts within that and the jitter.
    assert all(ms <= 1_500 for ms in began[1:]), began
    assert "an async handler, cancelled if it still runs in 1000 ms" in caplog.text
    assert "replaced by a newer slot: released as failed" in caplog.text
