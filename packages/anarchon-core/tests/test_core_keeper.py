"""The lease keeper: renewal timing (virtual time), and the keeper thread beside a blocked loop.

The keeper-thread tests run in real time, a few seconds each: what they show is that a thread keeps
renewing while the scheduler's loop is blocked by `time.sleep`, which virtual time cannot show.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

import pytest

from anarchon import (
    ClaimRequest,
    ClaimResult,
    JobContext,
    JobStatus,
    Lease,
    MemoryBackend,
    MemoryClaimBackend,
    MemoryStore,
    ReleaseOutcome,
    ScheduleError,
    Scheduler,
    hookimpl,
    plugin_manager,
    to_ms,
)
from anarchon._job import Job
from anarchon._keeper_thread import KeeperThread
from anarchon._options import resolve
from anarchon._renewals import Renewals, hold
from anarchon._schedules import Every
from anarchon._tasks import Tasks
from anarchon.testing import VirtualClock

T = TypeVar("T")
START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


def keeper_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "anarchon-keeper"]


# -- renewal timing (virtual time) ------------------------------------------------------------------


class _SlowRenewals(MemoryBackend):
    """Each renewal reaches the store `delay_s` after it was sent; records when each was sent."""

    def __init__(self, store: MemoryStore, delay_s: float) -> None:
        super().__init__(store)
        self.delay_s = delay_s
        self.sent: list[float] = []

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        self.sent.append(asyncio.get_running_loop().time())
        await asyncio.sleep(self.delay_s)
        return await super().renew_many(renewals)


def test_a_renewal_slower_than_the_heartbeat_neither_delays_the_next_nor_loses_the_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each renewal takes 1.2 s, more than the 1 s heartbeat. Sending the next one a heartbeat after
    # the last *answer* put two round trips (2.4 s) plus a heartbeat inside the 3 s lease, and the
    # lease was lost. Renewals go out every heartbeat from their send times instead.
    clock = VirtualClock(START)
    store = MemoryStore(clock)
    slow = _SlowRenewals(store, 1.2)
    schedulers: list[Scheduler[MemoryBackend]] = [
        Scheduler(slow, instance_id="holder", clock=clock, lease="3s", heartbeat="1s", jitter=0),
        Scheduler(MemoryBackend(store), instance_id="backup", clock=clock, lease="3s", heartbeat="1s",
                  jitter="100ms"),
    ]
    starts: list[tuple[str, int]] = []
    for s in schedulers:
        async def long(ctx: JobContext) -> None:
            starts.append((ctx.instance_id, ctx.attempt))
            await ctx.sleep(10)

        # The backup starts once the holder runs the +60 s slot, and catches that slot up at once:
        # taken, so it watches it and would take it over as attempt 2 if the holder lost its lease.
        s.every("long", "1m", long, catch_up="5m" if s is schedulers[1] else 0)

    async def main() -> None:
        await schedulers[0].start()
        await asyncio.sleep(61)
        await schedulers[1].start()
        await asyncio.sleep(14)
        for s in schedulers:
            await s.stop()
        state = await MemoryBackend(store).inspect("anarchon", "long")
        assert state is not None and state.status is JobStatus.DONE and state.attempt == 1, state

    clock.run(main())
    assert starts == [("holder", 1)], starts
    assert "lease lost" not in caplog.text
    gaps = [round(b - a, 3) for a, b in zip(slow.sent, slow.sent[1:], strict=False)]
    assert gaps and all(g == 1.0 for g in gaps), gaps


class _Network(MemoryBackend):
    """A store behind a network, in virtual time: every call costs a round trip `rtt`; `reset()` fails
    the calls in flight at once (a request or an answer may be lost on the way), and each call that
    starts on a reset connection first pays `reconnect` more round trips for a new one (a pool)."""

    def __init__(self, store: MemoryStore, rtt: float, reconnect: int, deadline: float | None = None) -> None:
        super().__init__(store)
        self.deadline = deadline
        """The client gives up on a call after this long; its request may still reach the store."""
        self.rtt = rtt
        self.reconnect = reconnect
        self.epoch = 0
        self.warm = 0
        """The epoch whose connection is established."""
        self._broken = asyncio.Event()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.refusing = False

    def partition(self) -> None:
        """Hold every request and answer until `heal()`, then deliver them in order."""
        self.flowing.clear()

    def refuse(self) -> None:
        """Refuse every connection until `heal()`: calls fail at once, and the pool's connections die."""
        self.refusing = True
        self.reset()

    def heal(self) -> None:
        self.refusing = False
        self.flowing.set()

    def reset(self) -> None:
        self.epoch += 1
        self._broken.set()
        self._broken = asyncio.Event()

    async def _leg(self, seconds: float, epoch: int) -> None:
        broken = self._broken
        if self.epoch != epoch:
            raise ConnectionResetError("connection reset by peer")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await broken.wait()
                raise ConnectionResetError("connection reset by peer")

    async def _trip(self, call: Callable[[], Awaitable[T]]) -> T:
        if self.deadline is None:
            return await self._trip_on(call)
        trip = asyncio.ensure_future(self._trip_on(call))
        try:
            async with asyncio.timeout(self.deadline):
                return await asyncio.shield(trip)
        except TimeoutError:
            trip.add_done_callback(lambda t: t.cancelled() or t.exception())
            raise ConnectionError(f"no answer within {self.deadline} s") from None

    async def _trip_on(self, call: Callable[[], Awaitable[T]]) -> T:
        if self.refusing:
            await asyncio.sleep(0.001)
            raise ConnectionRefusedError("connection refused")
        epoch = self.epoch
        if self.warm != epoch:
            await self._leg(self.reconnect * self.rtt, epoch)
            self.warm = epoch
        await self._leg(self.rtt / 2, epoch)
        await self.flowing.wait()
        result = await call()
        await self._leg(self.rtt / 2, epoch)
        await self.flowing.wait()
        return result

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        return await self._trip(lambda: super(_Network, self).claim_many(requests))

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        return await self._trip(lambda: super(_Network, self).renew_many(renewals))

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        return await self._trip(lambda: super(_Network, self).release_many(releases))


def _long_runs_over_a_network(rtt: float, reconnect: int, resets_every: float | None,
                              caplog: pytest.LogCaptureFixture) -> list[tuple[int, int]]:
    """A holder (lease 3 s, heartbeat 1 s) behind `_Network`: 20 runs of 6 s, one every 10 s.
    Returns (slot, attempt) of every start; the caller checks that no lease was lost."""
    clock = VirtualClock(START)
    net = _Network(MemoryStore(clock), rtt, reconnect)
    net.warm = -1  # the first call opens the connection
    holder = Scheduler(net, instance_id="holder", clock=clock, lease="3s", heartbeat="1s", jitter=0)
    starts: list[tuple[int, int]] = []

    async def long(ctx: JobContext) -> None:
        starts.append((ctx.slot, ctx.attempt))
        await ctx.sleep(6)

    holder.every("long", "10s", long, catch_up=0)

    async def resets() -> None:
        assert resets_every is not None
        while True:
            await asyncio.sleep(resets_every)
            net.reset()

    async def main() -> None:
        await holder.start()
        chaos = asyncio.ensure_future(resets()) if resets_every else None
        await asyncio.sleep(205)  # slots 10:00:10 to 10:03:20
        if chaos is not None:
            chaos.cancel()
        await holder.stop()

    caplog.set_level(logging.DEBUG, logger="anarchon")
    clock.run(main())
    return starts


@pytest.mark.parametrize("reconnect", [0, 3])
def test_a_400_ms_round_trip_never_loses_a_lease(reconnect: int, caplog: pytest.LogCaptureFixture) -> None:
    # Lease 3 s, heartbeat 1 s: a renewal has lease - heartbeat = 2 s to come back, five 400 ms round
    # trips; a new connection (TCP, the store's handshake) plus the call takes four.
    starts = _long_runs_over_a_network(0.4, reconnect, None, caplog)
    assert len(starts) == 20 and {attempt for _, attempt in starts} == {1}, starts
    assert "lease lost" not in caplog.text and "renew failed" not in caplog.text


def test_a_connection_reset_at_any_moment_never_loses_a_lease_nor_a_slot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A reset every 2.3 s hits renewals at every phase of the heartbeat, requests and answers alike:
    # each failed renewal is sent again at once on a new connection (three round trips more), so the
    # lease holds while (reconnect + 2) round trips fit in lease - heartbeat. Before, a failed
    # renewal waited for the next heartbeat, and that one had to reconnect within a heartbeat.
    # A failed claim is sent again at once too, so no slot is lost to a reset.
    starts = _long_runs_over_a_network(0.3, 3, 2.3, caplog)
    assert "lease lost" not in caplog.text
    assert caplog.text.count("renew failed") > 10  # the resets did hit renewals
    # A claim whose answer a reset lost won in the store: its resend finds the slot held by this very
    # instance, which has no token to run it with, so it is taken over when that lease ends (attempt 2);
    # that run can make the next slot skip. Every other slot runs as attempt 1.
    # A claim whose answer a reset lost won in the store: its resend is answered that same lease again,
    # which is renewed and run at once. Every slot runs, as attempt 1.
    assert all(attempt == 1 for _, attempt in starts), starts
    assert len(starts) >= 20 and len({slot for slot, _ in starts}) == len(starts), starts


def test_a_reset_just_after_a_boundary_does_not_lose_the_slot(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="anarchon")
    # A reset 5 ms after each boundary fails every claim in flight. The claim is sent again at once,
    # within the jitter (20 ms at least), and its slot runs, about a new connection late; retried a
    # second later, it met the next boundary and was replaced by the newer slot.
    clock = VirtualClock(START)
    net = _Network(MemoryStore(clock), 0.02, 3)
    scheduler = Scheduler(net, clock=clock, lease="3s", heartbeat="1s", jitter=0)
    lags: dict[int, int] = {}

    async def tick(ctx: JobContext) -> None:
        lags[ctx.slot] = clock.now_ms() - ctx.slot

    scheduler.every("tick", "1s", tick, catch_up=0)

    async def main() -> None:
        async with scheduler:
            for _ in range(10):
                await asyncio.sleep(1 - (clock.now_ms() % 1000) / 1000 + 0.005)
                net.reset()
            await asyncio.sleep(0.5)

    clock.run(main())
    # Each reset is a blip, answered by the retry: one line each, no warning that the store is away.
    assert caplog.text.count("failed on memory://") == 10, caplog.text
    assert "unreachable" not in caplog.text and "answer again" not in caplog.text, caplog.text
    assert sorted(lags) == [T0 + 1000 * i for i in range(1, 11)], lags
    assert max(lags.values()) < 300, lags


def test_after_a_partition_the_current_slot_runs_not_the_claims_held_in_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # For 30 s every request is held, then delivered at the heal: the claims of slots 10 s, 20 s and
    # 30 s reach the store together. Those of 10 s and 20 s arrive after their next slot was due (their
    # `stale_after`): the store answers STALE and writes nothing, so slot 30 s wins and runs within a
    # heartbeat of the heal. No older slot runs, and none is won to be released unrun.
    caplog.set_level(logging.INFO, logger="anarchon")
    clock = VirtualClock(START)
    net = _Network(MemoryStore(clock), 0.02, 0)
    scheduler = Scheduler(net, clock=clock, lease="3s", heartbeat="1s", jitter=0)
    starts: list[tuple[int, int, int]] = []  # (slot, attempt, ms after the start of the test)

    async def job(ctx: JobContext) -> None:
        starts.append((ctx.slot - T0, ctx.attempt, clock.now_ms() - T0))
        await ctx.sleep(2)

    scheduler.every("job", "10s", job, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(5)
            net.partition()
            await asyncio.sleep(30)
            net.heal()
            await asyncio.sleep(20)

    clock.run(main())
    assert [(slot, attempt) for slot, attempt, _ in starts] == [(30_000, 1), (40_000, 1), (50_000, 1)], starts
    assert 35_000 <= starts[0][2] <= 36_000, starts  # within a heartbeat of the heal
    assert "not run" not in caplog.text and "still runs on" not in caplog.text, caplog.text


def test_after_a_partition_a_claim_whose_answer_never_came_delays_the_current_slot_by_a_lease_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # As above, but the client gives up on each call after 10 s: the claims held in the partition
    # still reach the store at the heal, after their slots' `stale_after`: STALE, nothing written.
    # (Without that rule the first would win there for this instance, which never hears of it and
    # has no token to release it, and the current slot would wait a lease behind it.) The current
    # slot runs within a heartbeat of the heal, as attempt 1. No older slot runs.
    caplog.set_level(logging.INFO, logger="anarchon")
    clock = VirtualClock(START)
    net = _Network(MemoryStore(clock), 0.02, 0, deadline=10)
    scheduler = Scheduler(net, clock=clock, lease="3s", heartbeat="1s", jitter=0)
    starts: list[tuple[int, int, int]] = []

    async def job(ctx: JobContext) -> None:
        starts.append((ctx.slot - T0, ctx.attempt, clock.now_ms() - T0))
        await ctx.sleep(1)  # over before the next slot, even when run 3 s late

    scheduler.every("job", "10s", job, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(5)
            net.partition()
            await asyncio.sleep(30)
            net.heal()
            await asyncio.sleep(20)

    clock.run(main())
    assert [(slot, attempt) for slot, attempt, _ in starts] == [(30_000, 1), (40_000, 1), (50_000, 1)], starts
    assert 35_000 <= starts[0][2] <= 36_000, starts  # within a heartbeat of the heal
    assert "still runs on" not in caplog.text and "not run" not in caplog.text, caplog.text


@pytest.mark.parametrize("heal_at", [round(35.1 + 0.2 * i, 1) for i in range(20)])
def test_after_a_refused_outage_the_current_slot_runs_within_a_heartbeat_of_the_heal(heal_at: float) -> None:
    # For 30 s every connection is refused: each claim fails at once and is retried, backing off to
    # half a heartbeat. At the heal a new connection costs 3 round trips (150 ms); the current slot
    # (30 s) still runs within a heartbeat of the heal, wherever in the slot the heal falls.
    clock = VirtualClock(START)
    net = _Network(MemoryStore(clock), 0.05, 3)
    scheduler = Scheduler(net, clock=clock, lease="3s", heartbeat="1s", jitter=0)
    starts: list[tuple[int, int, int]] = []

    async def job(ctx: JobContext) -> None:
        starts.append((ctx.slot - T0, ctx.attempt, clock.now_ms() - T0))

    scheduler.every("job", "10s", job, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(heal_at - 30)
            net.refuse()
            await asyncio.sleep(30)
            net.heal()
            await asyncio.sleep(20)

    clock.run(main())
    assert [(slot, attempt) for slot, attempt, _ in starts] == [(30_000, 1), (40_000, 1), (50_000, 1)], starts
    assert starts[0][2] - heal_at * 1000 <= 1000, starts  # within a heartbeat of the heal


def test_a_claim_whose_answer_was_lost_runs_at_once_on_its_own_lease_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The claim of slot 10 s is held in a partition; the client gives up on it after 2 s and retries,
    # and both reach the store at the heal, before the slot's `stale_after`. The first wins there for
    # this instance, which never hears of it; the retry is answered with that same lease again
    # (`reissued`), renewed and run at once: attempt 1, right after the heal. The next slot runs on time.
    caplog.set_level(logging.INFO, logger="anarchon")
    clock = VirtualClock(START)
    net = _Network(MemoryStore(clock), 0.02, 0, deadline=2)
    scheduler = Scheduler(net, clock=clock, lease="3s", heartbeat="1s", jitter=0)
    starts: list[tuple[int, int, int]] = []

    async def job(ctx: JobContext) -> None:
        starts.append((ctx.slot - T0, ctx.attempt, clock.now_ms() - T0))
        await ctx.sleep(1)

    scheduler.every("job", "10s", job, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(9.9)
            net.partition()
            await asyncio.sleep(2.6)
            net.heal()
            await asyncio.sleep(10)

    clock.run(main())
    assert [(slot, attempt) for slot, attempt, _ in starts] == [(10_000, 1), (20_000, 1)], starts
    assert 12_500 <= starts[0][2] <= 12_500 + 500, starts
    assert "lease lost" not in caplog.text, caplog.text


def test_slots_held_by_unanswered_claims_are_freed_in_one_batch(caplog: pytest.LogCaptureFixture) -> None:
    # 20 jobs every second. The store wins slot 10 s of each for this instance, but the answer is held
    # in a partition until 12.3 s; the client gives up on it after 2 s. (Slot 11 s's claims reach the
    # store after that slot's `stale_after` and are answered STALE.) The claims of slot 12 s are then
    # skipped behind the slots this instance holds: those are claimed again (answered with its own
    # leases, `reissued`) in one batch, not one claim per job, released as done (their next slots are
    # due: one line for the lot), and slot 12 s is claimed again and runs.
    caplog.set_level(logging.INFO, logger="anarchon")
    clock = VirtualClock(START)

    singles: list[int] = []  # the slots claimed one at a time

    class Counted(_Network):
        async def claim(self, request: ClaimRequest) -> ClaimResult:
            singles.append(request.slot - T0)
            return await super().claim(request)

    net = Counted(MemoryStore(clock), 0.02, 0, deadline=2)
    scheduler = Scheduler(net, clock=clock, lease="5s", heartbeat="1s", jitter=0)
    starts: list[tuple[str, int]] = []

    async def job(ctx: JobContext) -> None:
        starts.append((ctx.name, ctx.slot - T0))

    for i in range(20):
        scheduler.every(f"j{i}", "1s", job, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(10.015)  # the claims of slot 10 s reached the store; not the answer
            net.partition()
            await asyncio.sleep(2.285)
            net.heal()
            await asyncio.sleep(6)

    clock.run(main())
    # The held slots are freed in one batch. (Slot 12 s's claims are retried each after a random delay
    # within 20 ms, so one of them may be sent alone.)
    assert 10_000 not in singles, singles
    assert len(starts) == len(set(starts)), starts
    for slot in range(12_000, 19_000, 1000):
        assert {j for j, s in starts if s == slot} == {f"j{i}" for i in range(20)}, (slot, starts)
    assert not [j for j, s in starts if 10_000 <= s <= 11_000]  # answered or found after the next slot
    late = [r.getMessage() for r in caplog.records if "late, after" in r.getMessage()]
    assert 1 <= len(late) <= 2 and "20 slots" in late[0], late


# -- the keeper thread (real time) ------------------------------------------------------------------


@pytest.fixture
def no_keeper_left() -> Iterator[None]:
    before = set(keeper_threads())
    yield
    deadline = time.monotonic() + 5
    while set(keeper_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(keeper_threads()) - before, "a keeper thread outlived its scheduler"


def _pair(
    store: MemoryStore, handler: Any, **settings: Any
) -> tuple[Scheduler[MemoryBackend], Scheduler[MemoryBackend]]:
    """The blocker (claims first, on the test's loop) and a backup (its own thread, claims later)."""
    when = time.time() + 0.6
    blocker = Scheduler(MemoryBackend(store), instance_id="blocker", **settings)
    backup = Scheduler(MemoryBackend(store), instance_id="backup", **settings)
    blocker.at("block", when, handler, jitter=0)
    backup.at("block", when, handler, jitter="300ms")
    return blocker, backup


@pytest.mark.usefixtures("no_keeper_left")
def test_an_async_handler_that_blocks_its_loop_for_three_leases_finishes_as_attempt_1() -> None:
    store = MemoryStore()
    starts: list[tuple[str, int]] = []

    async def block(ctx: JobContext) -> None:
        starts.append((ctx.instance_id, ctx.attempt))
        if ctx.instance_id == "blocker":
            time.sleep(3)  # noqa: ASYNC251 - three leases: the loop cannot renew, the keeper thread does

    blocker, backup = _pair(store, block, lease="1s", heartbeat="0.3s")

    async def main() -> None:
        await blocker.start()
        assert len(keeper_threads()) == 1
        backup.start_in_thread()
        try:
            await asyncio.sleep(5)
        finally:
            await blocker.stop()
            assert backup.stop_thread(timeout=5)
        state = await MemoryBackend(store).inspect("anarchon", "block")
        assert state is not None and state.status is JobStatus.DONE and state.attempt == 1, state

    asyncio.run(main())
    assert starts == [("blocker", 1)], starts


@pytest.mark.usefixtures("no_keeper_left")
def test_a_handler_that_blocks_its_loop_beyond_block_limit_is_taken_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    starts: list[tuple[str, int, float]] = []
    ends: list[tuple[str, str | None]] = []

    async def block(ctx: JobContext) -> None:
        starts.append((ctx.instance_id, ctx.attempt, time.monotonic()))
        if ctx.instance_id == "blocker":
            time.sleep(4.5)  # noqa: ASYNC251 - "for good", as far as this test can wait
            await asyncio.sleep(0.1)  # the loop is back: the lost lease reaches the run
        ends.append((ctx.instance_id, ctx.signal.reason))

    blocker, backup = _pair(store, block, lease="1s", heartbeat="0.3s", block_limit="1.5s")

    async def main() -> None:
        await blocker.start()
        backup.start_in_thread()
        try:
            await asyncio.sleep(6)
        finally:
            await blocker.stop()
            assert backup.stop_thread(timeout=5)

    asyncio.run(main())
    assert [(who, attempt) for who, attempt, _ in starts] == [("blocker", 1), ("backup", 2)], starts
    took = starts[1][2] - starts[0][2]
    # block_limit + lease + heartbeat, plus the half second between the thread's checks and the
    # backup's jitter.
    assert took <= 1.5 + 1 + 0.3 + 0.5 + 0.3 + 0.2, took
    assert took >= 1.5, f"taken over after {took:.2f} s, before block_limit"
    assert ("blocker", "lease lost") in ends, ends
    assert "beyond block_limit (1500 ms)" in caplog.text


def test_the_keeper_checks_on_the_loop_less_often_while_it_keeps_no_lease() -> None:
    # Each check wakes the keeper's loop and the scheduler's: at rest, with the default heartbeat,
    # it comes every half heartbeat (2.5 s), not every half second.
    async def main() -> None:
        renewals = Renewals(MemoryBackend(), logging.getLogger("test"), Tasks(logging.getLogger("test")))
        assert renewals.poke(10.5, 12.5) == 12.5
        lease = Lease("ns", "job", 0, 1, 1, "me", 0)
        job = Job("job", Every.parse("1s"), resolve({}, lease_ms=30_000, heartbeat_ms=5_000), lambda: None)
        held = hold(lease, job, 10.0, 10.0, lambda why: None)
        renewals.post("keep", held)
        assert renewals.poke(11.0, 13.0) == 11.0  # a lease is kept: every half second
        assert renewals.poke(11.5) == 11.5
        renewals.post("forget", held)
        assert renewals.poke(12.0, 14.0) == 14.0

    asyncio.run(main())


@pytest.mark.usefixtures("no_keeper_left")
def test_an_idle_keeper_thread_asks_the_loop_every_half_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[float] = []
    answer = KeeperThread._answer

    def counted(self: KeeperThread, asked: float) -> None:
        answers.append(asked)
        answer(self, asked)

    monkeypatch.setattr(KeeperThread, "_answer", counted)
    scheduler = Scheduler(MemoryBackend())  # the default heartbeat, 5 s
    scheduler.every("hourly", "1h", lambda: None, catch_up=0)

    async def main() -> None:
        async with scheduler:
            assert len(keeper_threads()) == 1
            await asyncio.sleep(4)

    asyncio.run(main())
    # Once, at 2.5 s (twice a second, it would be eight times). A loaded machine can only make the
    # thread ask later, and 1.5 s late is still in time.
    assert 1 <= len(answers) <= 2, answers


@pytest.mark.usefixtures("no_keeper_left")
def test_a_run_that_blocks_the_loop_while_the_keeper_was_idle_is_still_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The thread checks every 2.5 s while no lease is kept; the run's lease reaches it at its next
    # check, which then finds the loop silent, and from there it checks every half second.
    starts: list[int] = []

    async def blocking(ctx: JobContext) -> None:
        starts.append(ctx.attempt)
        time.sleep(6)  # noqa: ASYNC251 - the point: the loop is blocked
        await asyncio.sleep(0.1)  # the loop is back: the lost lease reaches the run

    scheduler = Scheduler(MemoryBackend(), block_limit="1s")
    scheduler.at("block", time.time() + 0.3, blocking, jitter=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(7)

    asyncio.run(main())
    assert starts == [1]
    assert "beyond block_limit (1000 ms)" in caplog.text, caplog.text


class _BlockedAfterClaim(MemoryBackend):
    """The first claim is won, then the caller's loop is blocked for longer than the lease before it
    sees the answer (thousands of results to handle, a GC pause)."""

    blocked = False

    async def claim(self, request: Any) -> Any:
        result = await super().claim(request)
        if result.won and not self.blocked:
            self.blocked = True
            time.sleep(1.2)  # noqa: ASYNC251 - the point: the loop is blocked
        return result


@pytest.mark.usefixtures("no_keeper_left")
def test_a_claim_answered_after_its_lease_ran_out_is_not_run_but_taken_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The lease expired before the run could start: an expired lease does not renew (a renewal that
    # reaches the store late revives nothing), so attempt 1 never starts; the slot is claimed again
    # at once and runs as attempt 2.
    caplog.set_level(logging.INFO, logger="anarchon")
    scheduler = Scheduler(_BlockedAfterClaim(), lease="1s", heartbeat="0.3s")
    ran: list[int] = []
    scheduler.at("late", time.time() + 0.3, lambda ctx: ran.append(ctx.attempt), jitter=0)

    async def main() -> None:
        async with scheduler:
            assert len(keeper_threads()) == 1
            await asyncio.sleep(2)
        state = await scheduler.backend.inspect("anarchon", "late")
        assert state is not None and state.status is JobStatus.DONE and state.attempt == 2, state

    asyncio.run(main())
    assert ran == [2]
    assert "not started: the claim is" in caplog.text


def test_the_keeper_thread_ends_with_stop_thread_and_with_the_interpreter() -> None:
    scheduler = Scheduler(MemoryBackend(), lease="2s", heartbeat="0.5s")
    scheduler.every("tick", "100ms", lambda: None, catch_up=0)
    scheduler.start_in_thread()
    assert len(keeper_threads()) == 1
    assert scheduler.stop_thread(timeout=5)
    assert keeper_threads() == []

    # A process that exits without stopping its scheduler: the keeper thread is ended at exit.
    script = textwrap.dedent("""
        import atexit, threading, time
        from anarchon import MemoryBackend, Scheduler

        # Registered first, so it runs last: after anarchon's own exit hook.
        atexit.register(lambda: print("left:", [t.name for t in threading.enumerate()
                                                 if t.name == "anarchon-keeper"], flush=True))
        scheduler = Scheduler(MemoryBackend(), lease="2s", heartbeat="0.5s")
        scheduler.every("tick", "100ms", lambda: None, catch_up=0)
        scheduler.start_in_thread()
        time.sleep(0.5)
        print("running:", [t.name for t in threading.enumerate() if t.name == "anarchon-keeper"], flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["running: ['anarchon-keeper']", "left: []"], done.stdout
    assert "Fatal" not in done.stderr, done.stderr


# -- where no second connection can be opened -----------------------------------------------------


class _GivenClient(MemoryBackend):
    """Stands for a backend given a client object it does not own."""

    def sibling(self) -> None:  # type: ignore[override]
        return None


class _NoSibling(MemoryBackend):
    """A third-party backend that knows no way to open a second connection."""

    sibling = None  # type: ignore[assignment]


class _SiblingFailsToOpen(MemoryBackend):
    def sibling(self) -> MemoryBackend:  # type: ignore[override]
        class Down(MemoryBackend):
            async def open(self) -> None:
                raise ConnectionRefusedError("second connection refused")

        return Down(self.store)


@pytest.mark.parametrize(("backend", "level", "why"), [
    (_GivenClient(), logging.INFO, "given a client object that it does not own"),
    (_NoSibling(), logging.INFO, "_NoSibling has no sibling() to open a second connection with"),
    (_SiblingFailsToOpen(), logging.WARNING, "its second connection did not open: ConnectionRefusedError"),
])
@pytest.mark.usefixtures("no_keeper_left")
def test_without_a_second_connection_the_loop_renews_and_the_log_says_why_once(
    backend: MemoryBackend, level: int, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="anarchon")
    scheduler = Scheduler(backend, lease="1s", heartbeat="0.3s")
    ran: list[int] = []

    async def long(ctx: JobContext) -> None:
        ran.append(ctx.attempt)
        await ctx.sleep(1.5)  # longer than the lease: renewed on the loop

    scheduler.at("long", time.time() + 0.2, long, jitter=0)

    async def main() -> None:
        async with scheduler:
            assert keeper_threads() == []
            await asyncio.sleep(2)
        state = await backend.inspect("anarchon", "long")
        assert state is not None and state.status is JobStatus.DONE, state

    asyncio.run(main())
    assert ran == [1]
    lines = [r for r in caplog.records if "renewed on the scheduler's event loop" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == level and why in lines[0].getMessage(), caplog.text
    assert "lease lost" not in caplog.text


def test_a_virtual_time_scheduler_keeps_its_keeper_on_its_loop(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="anarchon")
    clock = VirtualClock(START)
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock)

    async def main() -> None:
        async with scheduler:
            assert keeper_threads() == []

    clock.run(main())
    assert "runs on an injected clock" in caplog.text


_SHARED: dict[str, MemoryStore] = {}


class _NamedStoreBackend(MemoryBackend):
    """`named-memory://name`: a store shared by name; no sibling(), so a second connection can only
    come from its URL."""

    url_schemes: ClassVar[tuple[str, ...]] = ("named-memory",)
    sibling = None  # type: ignore[assignment]

    @classmethod
    def from_url(cls, url: str) -> _NamedStoreBackend:
        return cls(_SHARED.setdefault(url.partition("://")[2], MemoryStore()))


class _NamedStorePlugin:
    @hookimpl
    def anarchon_backends(self) -> list[type[Any]]:
        return [_NamedStoreBackend]


@pytest.mark.usefixtures("no_keeper_left")
def test_a_scheduler_made_from_a_url_opens_its_second_connection_from_that_url() -> None:
    plugin = _NamedStorePlugin()
    plugin_manager().register(plugin, name="named-memory-test")
    try:
        scheduler = Scheduler.from_url("named-memory://keeper-test", lease="1s", heartbeat="0.3s")

        async def main() -> None:
            async with scheduler:
                assert len(keeper_threads()) == 1

        asyncio.run(main())
    finally:
        plugin_manager().unregister(plugin)


def test_block_limit_is_a_lease_backend_option() -> None:
    assert Scheduler(MemoryBackend(), block_limit="90s").block_limit_ms == 90_000
    assert Scheduler(MemoryBackend()).block_limit_ms == 60_000
    with pytest.raises(TypeError, match="'block_limit' needs a lease backend"):
        Scheduler(MemoryClaimBackend(), block_limit="1m")  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="'soon'"):
        Scheduler(MemoryBackend(), block_limit="soon")


class _CountingSingles(_Network):
    """`_Network`, counting the claims sent one at a time (not in a batch)."""

    singles = 0

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        self.singles += 1
        return await super().claim(request)


def _answered_late(jobs: int, seconds: float) -> tuple[list[tuple[str, int]], _CountingSingles]:
    """`jobs` jobs every second for `seconds`, every answer coming back 1.4 s after its claim (0.7 s
    each way): the store grants each slot before the job's next one is due, but the instance hears of
    it after, so the slot is released unrun. Returns the runs started and the store."""
    clock = VirtualClock(START)
    net = _CountingSingles(MemoryStore(clock), 1.4, 0)
    scheduler = Scheduler(net, clock=clock, lease="5s", heartbeat="1s", jitter=0)
    runs: list[tuple[str, int]] = []

    async def job(ctx: JobContext) -> None:
        runs.append((ctx.name, ctx.slot))

    for i in range(jobs):
        scheduler.every(f"job{i}", "1s", job, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(seconds)

    clock.run(main())
    return runs, net


def test_wins_answered_after_their_next_slot_are_told_in_one_line_per_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A store answering thousands of late wins at once (an overloaded one) gets one warning per claim
    # batch, not one per slot, which would add to the load.
    caplog.set_level(logging.WARNING, logger="anarchon")
    runs, _ = _answered_late(20, 6.5)
    assert runs == []
    late = [r.getMessage() for r in caplog.records if "late, after" in r.getMessage()]
    assert late, caplog.text
    assert all(m.startswith("20 slots won 1400 to 1400 ms late") for m in late), late


def test_thousands_of_late_wins_are_remembered_and_never_claimed_one_by_one() -> None:
    # With 1,500 jobs: each round's late wins are released unrun, and the next round's claims reach
    # the store before those releases, so the store skips them behind this instance's own slot. The
    # instance must know every such slot as one it released, and claim again later in a batch, not
    # take it for the slot of a lost answer, freed by one claim per job.
    runs, net = _answered_late(1_500, 5.5)
    assert runs == []
    assert net.singles == 0
