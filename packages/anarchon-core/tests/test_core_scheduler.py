"""The engine, in virtual time: nothing here sleeps in real time."""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import Counter
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest

from anarchon import (
    BackendUnavailable,
    ClaimRequest,
    ClaimResult,
    ConfigError,
    DuplicateJobError,
    JobContext,
    JobNameError,
    JobStatus,
    MemoryBackend,
    MemoryClaimBackend,
    MemoryStore,
    OptionError,
    RunCancelled,
    ScheduleError,
    Scheduler,
    to_ms,
)
from anarchon.backends import BackendBase
from anarchon.testing import FaultyBackend, SkewedClock, VirtualClock, crash

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


def run(clock: VirtualClock, coro: Coroutine[Any, Any, None]) -> None:
    clock.run(coro)


class CountingBackend(MemoryBackend):
    """A memory backend that counts the claims sent through it."""

    def __init__(self, store: MemoryStore, **options: Any) -> None:
        super().__init__(store, **options)
        self.claims = 0

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        self.claims += len(requests)
        return await super().claim_many(requests)


class Cluster:
    """Several schedulers in one process over one in-memory store, on one virtual clock."""

    def __init__(self, clock: VirtualClock, n: int, *, notify: bool = True, announce: bool = True,
                 backend: type[CountingBackend] = CountingBackend, **settings: Any) -> None:
        self.clock = clock
        self.store = MemoryStore(clock)
        self.starts: list[tuple[str, int, int, str]] = []  # job, slot, attempt, instance
        self.stamps: list[int] = []  # virtual wall time of each start
        self.backends = [backend(self.store, notify=notify, announce=announce) for _ in range(n)]
        self.schedulers = [
            Scheduler(FaultyBackend(backend), instance_id=f"i{k}", clock=clock, **settings)
            for k, backend in enumerate(self.backends)
        ]

    def record(self, ctx: JobContext) -> None:
        self.starts.append((ctx.name, ctx.slot, ctx.attempt, ctx.instance_id))
        self.stamps.append(self.clock.now_ms())

    def every_second(self, jobs: int) -> None:
        """Register `jobs` jobs due every second on every scheduler, each recording its starts."""
        async def handler(ctx: JobContext) -> None:
            self.record(ctx)

        for s in self.schedulers:
            for i in range(jobs):
                s.every(f"job{i}", "1s", handler, catch_up=0)

    async def claims_sent(self, after_s: float, for_s: float) -> int:
        """Start every scheduler, and stop them all `after_s` + `for_s` later: the claims sent in the
        last `for_s`."""
        for s in self.schedulers:
            await s.start()
        await asyncio.sleep(after_s)
        before = sum(b.claims for b in self.backends)
        await asyncio.sleep(for_s)
        sent = sum(b.claims for b in self.backends) - before
        for s in self.schedulers:
            await s.stop()
        return sent

    def duplicates(self) -> dict[tuple[str, int, int], int]:
        counts = Counter((job, slot, attempt) for job, slot, attempt, _ in self.starts)
        return {k: v for k, v in counts.items() if v > 1}


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


def test_the_issue_example_runs_as_written(clock: VirtualClock, capsys: pytest.CaptureFixture[str]) -> None:
    scheduler = Scheduler(backend=MemoryBackend(clock=clock), lease="6s", heartbeat="1s", log=True,
                          clock=clock)
    seen: list[int] = []

    @scheduler.every("sync", "10s", catch_up=0)
    async def sync(ctx: JobContext) -> None:
        seen.append(ctx.slot)
        await ctx.sleep(0.2)

    async def digest(ctx: JobContext) -> None:
        print("digest", ctx.scheduled_at.isoformat(), ctx.attempt)

    (scheduler
        .cron("digest", "0 8 * * 1-5", digest, timezone="Europe/Athens")
        .at("migrate", datetime(2027, 1, 1, tzinfo=UTC), lambda: None))

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(35)

    with mock.patch.object(logging.root, "handlers", []):  # as in a script, not beside pytest's capture
        run(clock, main())
    assert seen == [T0 + 10_000, T0 + 20_000, T0 + 30_000]
    err = capsys.readouterr().err
    assert err.count("anarchon: sync slot=2026-12-01T10:00:10Z won attempt=1") == 1, err


def test_three_replicas_run_each_slot_once(clock: VirtualClock) -> None:
    c = Cluster(clock, 3, lease="6s", heartbeat="1s")
    for s in c.schedulers:
        async def handler(ctx: JobContext) -> None:
            c.record(ctx)
            await ctx.sleep(0.5)

        s.every("sync", "1s", handler, catch_up=0)

    async def main() -> None:
        for s in c.schedulers:
            await s.start()
        await asyncio.sleep(60.8)  # every run (0.5 s, started within 50 ms of its slot) has ended
        for s in c.schedulers:
            await s.stop()

    run(clock, main())
    slots = sorted(slot for _, slot, _, _ in c.starts)
    assert slots == [T0 + k * 1000 for k in range(1, 61)]
    assert not c.duplicates()
    assert len({inst for *_, inst in c.starts}) == 3  # jitter spreads the wins


def test_handler_errors_never_stop_the_scheduler(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MemoryBackend(clock=clock)
    scheduler = Scheduler(backend, clock=clock)
    calls: list[int] = []

    @scheduler.every("boom", "1s", catch_up=0)
    async def boom(ctx: JobContext) -> None:
        calls.append(ctx.slot)
        raise ValueError("handler bug")

    @scheduler.every("sync-boom", "1s", catch_up=0)
    def sync_boom() -> None:
        raise KeyError("sync handler bug")

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(3.5)
        state = await backend.inspect("anarchon", "boom")
        assert state is not None and state.status is JobStatus.FAILED

    run(clock, main())
    assert len(calls) == 3
    assert "handler bug" in caplog.text and "Traceback" in caplog.text


def test_timeout_cancels_and_fails_the_run(clock: VirtualClock) -> None:
    backend = MemoryBackend(clock=clock)
    scheduler = Scheduler(backend, clock=clock)
    reasons: list[str] = []

    @scheduler.every("slow", "10s", timeout="2s", catch_up=0)
    async def slow(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(5)
        finally:
            reasons.append(ctx.signal.reason or "")

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(13)
        state = await backend.inspect("anarchon", "slow")
        assert state is not None and state.status is JobStatus.FAILED

    run(clock, main())
    assert reasons == ["timeout"]


@pytest.mark.parametrize("announce", [True, False])
def test_pushed_wins_spare_the_other_replicas_their_claims(clock: VirtualClock, announce: bool) -> None:
    c = Cluster(clock, 3, announce=announce, lease="6s", heartbeat="1s")
    for s in c.schedulers:
        async def handler(ctx: JobContext) -> None:
            c.record(ctx)
            await ctx.sleep(0.2)

        for i in range(20):
            s.every(f"job{i}", "1s", handler, catch_up=0)

    async def main() -> None:
        for s in c.schedulers:
            await s.start()
        await asyncio.sleep(30.5)
        for s in c.schedulers:
            await s.stop()

    run(clock, main())
    assert len(c.starts) == 20 * 30
    assert not c.duplicates()
    assert len({inst for *_, inst in c.starts}) == 3
    claims = sum(b.claims for b in c.backends)
    if announce:
        # The first claim of each jitter group wins it and the store pushes its wins: the other
        # replicas' claims, due later within the jitter, are not sent (ties in the same ms are).
        assert claims <= 1.2 * len(c.starts), claims
    else:
        assert claims == 3 * len(c.starts)


def test_replicas_share_each_boundary_and_claim_only_their_own_share(clock: VirtualClock) -> None:
    """Where wins are announced, each group of jobs has one leader per slot, the same on every replica:
    the others claim it a jitter later, by when the leader's wins are pushed, so once the replicas
    have heard of each other every slot costs one claim, and the runs spread evenly."""
    c = Cluster(clock, 3, lease="6s", heartbeat="1s")
    c.every_second(60)
    sent: list[int] = []

    async def main() -> None:
        # (After the first boundaries, in which every replica claims every slot.)
        sent.append(await c.claims_sent(3.5, 20))

    run(clock, main())
    assert not c.duplicates()
    later = [(job, slot, inst) for (job, slot, _, inst), at in zip(c.starts, c.stamps, strict=True)
             if slot > T0 + 3500]
    assert len(later) == 60 * 20
    assert sent == [len(later)]  # not one claim more than the runs
    share = Counter(inst for *_, inst in later)
    assert min(share.values()) >= 0.2 * len(later), share
    late = [at - slot for (_, slot, _, _), at in zip(c.starts, c.stamps, strict=True) if slot > T0 + 3500]
    assert max(late) <= 50  # every run within the jitter: each leader claims its own at once


def test_each_replica_leads_its_even_part_of_every_boundary(clock: VirtualClock) -> None:
    """With three replicas, none leads more than two of a slot's four groups of jobs, at any boundary.
    (Each group led by whichever replica hashes highest gives one replica three or four groups, three
    quarters of the boundary's runs or all of them, at a third of the boundaries: the boundary's
    latest runs then wait for that one replica.)"""
    c = Cluster(clock, 3, lease="6s", heartbeat="1s")
    c.every_second(60)

    async def main() -> None:
        # (From the sixth boundary: by then every replica has heard the others' wins.)
        await c.claims_sent(5.5, 20)

    run(clock, main())
    groups: dict[tuple[int, str], set[int]] = {}
    for job, slot, _, inst in c.starts:
        if slot > T0 + 5500:
            groups.setdefault((slot, inst), set()).add(zlib.crc32(job.encode()) % 4)
    slots = {slot for slot, _ in groups}
    assert len(slots) == 20
    for slot in slots:
        led = sorted(len(groups.get((slot, inst), ())) for inst in ("i0", "i1", "i2"))
        assert sum(led) == 4 and max(led) <= 2, (slot, led)


@pytest.mark.parametrize(("answered_in", "until"), [(0.3, 15), (0.6, 15.4)], ids=["300ms", "600ms"])
def test_followers_wait_as_long_as_a_leaders_wins_take_to_be_heard(
    clock: VirtualClock, answered_in: float, until: float
) -> None:
    """Claims of 1 s jobs that take 300 ms to reach the store: the others' claims, a jitter after
    the slot, would go out before the leader's win is heard. They learn how long that takes and wait
    for it. At 600 ms (a store near its limit) the wins are heard after half the interval: the others
    still wait for them rather than claim every slot themselves, which would triple the store's load
    and make the wins later still. (`until`: stopped after the last slot's runs.)"""

    class Slow(CountingBackend):
        async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
            await asyncio.sleep(answered_in)
            return await super().claim_many(requests)

    c = Cluster(clock, 3, backend=Slow, lease="6s", heartbeat="1s")
    c.every_second(20)
    sent: list[int] = []

    async def main() -> None:
        sent.append(await c.claims_sent(5.5, until))

    run(clock, main())
    later = [(job, slot, inst) for job, slot, _, inst in c.starts if slot > T0 + 5500]
    assert len(later) == 20 * 15 and len({(job, slot) for job, slot, _ in later}) == len(later)
    # Claiming every slot themselves, the followers would send 3 claims a run; the wait keeps it near 1.
    # (At 600 ms a follower's random jitter now and then sends one group of 5 before the win is heard.)
    assert sent[0] <= 1.2 * len(later), (sent, len(later))
    assert len({inst for *_, inst in later}) == 3


def test_a_crashed_leaders_share_is_claimed_late_for_one_boundary(clock: VirtualClock) -> None:
    """A replica that crashes leads some groups in the others' view: those slots are claimed a jitter
    late, won, and the winner stops counting it, so the next boundaries run on time."""
    c = Cluster(clock, 3, lease="6s", heartbeat="1s")
    c.every_second(60)

    async def main() -> None:
        for s in c.schedulers:
            await s.start()
        await asyncio.sleep(10.5)
        await crash(c.schedulers[2])
        await asyncio.sleep(10)
        for s in c.schedulers[:2]:
            await s.stop()

    run(clock, main())
    crashed = T0 + 10_500
    after = [(slot, at - slot) for (_, slot, _, inst), at in zip(c.starts, c.stamps, strict=True)
             if slot > crashed]
    slots = sorted({slot for slot, _ in after})
    assert len(after) == 60 * len(slots) and len(slots) >= 9  # nothing missed
    # (A leader's runs start within about 25 ms: its claims go within a third of the 50 ms jitter. The
    # others claim a jitter after the slot at the earliest.)
    late = [(slot, late) for slot, late in after if late > 40]
    assert late  # the crashed leader's groups waited for the others
    assert max(ms for _, ms in late) <= 100 + 5  # a jitter, and a claim's own jitter
    assert len({slot for slot, _ in late}) == 1  # the first late win tells every replica


def test_a_slot_handed_over_before_a_pushed_claim_was_due_is_taken_over(clock: VirtualClock) -> None:
    """B learns from a push that A won, then A hands the slot over before B's own claim is due: B
    claims it after all (a pushed win does not hide a pushed handover)."""
    store = MemoryStore(clock)
    starts: list[tuple[int, str, int]] = []
    # a's clock runs 5 ms ahead: it claims 5 ms before the slot, so b's claim (due within its jitter
    # after the slot, possibly at 0 ms) is never sent before a has won and stopped.
    schedulers = [Scheduler(MemoryBackend(store), instance_id=name, clock=SkewedClock(clock, ahead),
                            jitter=jitter)
                  for name, jitter, ahead in (("a", 0, 5), ("b", "50ms", 0))]
    for s in schedulers:
        async def long(ctx: JobContext) -> None:
            starts.append((ctx.attempt, ctx.instance_id, clock.now_ms()))
            await ctx.sleep(30)

        s.every("report", "1m", long, catch_up=0)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(59.996)  # a (no jitter) won at its slot; b's claim is due within 50 ms
        assert [(attempt, who) for attempt, who, _ in starts] == [(1, "a")]
        stopped_at = clock.now_ms()
        await schedulers[0].stop()
        await asyncio.sleep(1)
        assert [(attempt, who) for attempt, who, _ in starts] == [(1, "a"), (2, "b")]
        assert starts[1][2] - stopped_at <= 100
        await schedulers[1].stop()

    run(clock, main())


@pytest.mark.parametrize("announce", [True, False])
@pytest.mark.parametrize("notify", [True, False])
def test_graceful_stop_hands_over_within_two_heartbeats(
    clock: VirtualClock, notify: bool, announce: bool
) -> None:
    c = Cluster(clock, 2, notify=notify, announce=announce, lease="6s", heartbeat="1s")
    for s in c.schedulers:
        async def long(ctx: JobContext) -> None:
            c.record(ctx)
            await ctx.sleep(30)

        s.every("report", "1m", long, catch_up=0)

    async def main() -> None:
        for s in c.schedulers:
            await s.start()
        await asyncio.sleep(62)
        winner = next(s for s in c.schedulers if s.active_runs)
        stopped_at = clock.now_ms()
        await winner.stop()
        await asyncio.sleep(5)
        assert [a for _, _, a, _ in c.starts] == [1, 2]
        assert c.starts[1][3] != winner.instance_id
        delay = c.stamps[1] - stopped_at
        # Pushed: within the jitter. Polled: within two heartbeats.
        assert delay <= (100 if notify else 2000), delay
        for s in c.schedulers:
            await s.stop()

    run(clock, main())


@pytest.mark.parametrize("announce", [True, False])
def test_crash_is_taken_over_within_lease_heartbeat_jitter(clock: VirtualClock, announce: bool) -> None:
    c = Cluster(clock, 3, announce=announce, lease="6s", heartbeat="1s")
    stamps: list[int] = []
    for s in c.schedulers:
        async def long(ctx: JobContext) -> None:
            c.record(ctx)
            stamps.append(clock.now_ms())
            await ctx.sleep(20)

        s.every("report", "1m", long, catch_up=0)

    async def main() -> None:
        for s in c.schedulers:
            await s.start()
        await asyncio.sleep(61)
        winner = next(s for s in c.schedulers if s.active_runs)
        crashed_at = clock.now_ms()
        await crash(winner)
        await asyncio.sleep(10)
        assert [a for _, _, a, _ in c.starts] == [1, 2]
        assert stamps[1] - crashed_at <= 6000 + 1000 + 50
        for s in c.schedulers:
            if s is not winner:
                await s.stop()

    run(clock, main())


def test_frozen_runner_loses_its_lease_and_its_signal_is_set(clock: VirtualClock) -> None:
    c = Cluster(clock, 2, lease="6s", heartbeat="1s")
    signals: dict[str, JobContext] = {}
    for s in c.schedulers:
        async def long(ctx: JobContext) -> None:
            c.record(ctx)
            signals[ctx.instance_id] = ctx
            await ctx.signal.wait()

        s.every("report", "1m", long, catch_up=0)

    async def main() -> None:
        for s in c.schedulers:
            await s.start()
        await asyncio.sleep(61)
        winner = next(s for s in c.schedulers if s.active_runs)
        assert isinstance(winner.backend, FaultyBackend)
        winner.backend.freeze(10)
        await asyncio.sleep(12)
        frozen = signals[winner.instance_id]
        assert frozen.cancelled and frozen.signal.reason == "lease lost"
        assert [a for _, _, a, _ in c.starts] == [1, 2]
        for s in c.schedulers:
            await s.stop()

    run(clock, main())


def test_catch_up_runs_the_latest_missed_slot_only(clock: VirtualClock) -> None:
    backend = MemoryBackend(clock=clock)
    ran: list[int] = []
    scheduler = Scheduler(backend, clock=clock)
    scheduler.every("hourly", "1h", lambda ctx: ran.append(ctx.slot), catch_up="5m")
    late = Scheduler(MemoryBackend(clock=clock), clock=clock)
    late.every("hourly", "1h", lambda ctx: ran.append(-ctx.slot), catch_up="5m")
    off = Scheduler(MemoryBackend(clock=clock), clock=clock)
    off.every("hourly", "1h", lambda ctx: ran.append(0), catch_up=0)

    async def main() -> None:
        await asyncio.sleep(180)  # 10:03: the 10:00 slot is 3 minutes old
        async with scheduler, off:
            await asyncio.sleep(1)
        await asyncio.sleep(300)  # 10:09: beyond the window
        async with late:
            await asyncio.sleep(1)

    run(clock, main())
    assert ran == [T0]


@pytest.mark.parametrize("offset_ms", [0, 1, 120, 260, 380, 450, 499, 500, 501, 620, 777, 880, 949, 951, 999])
def test_a_job_started_at_any_moment_runs_every_on_time_slot_after_its_first(
    offset_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    # A 1 s job whose runs take 400 ms, started anywhere in a second, catch-up on (the default).
    # Before the rule, a start past the middle caught up the slot that had just passed, ran it
    # late, and the next on-time slot was skipped (overlap) behind it.
    clock = VirtualClock(T0 + offset_ms)
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock)
    ran: list[int] = []

    @scheduler.every("tick", "1s")
    async def tick(ctx: JobContext) -> None:
        ran.append((ctx.slot - T0) // 1000)
        await asyncio.sleep(0.4)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(6 - offset_ms / 1000)  # until 10:00:06

    run(clock, main())
    caught_up = offset_ms <= 500  # the missed slot (10:00:00) is nearer than the next one
    assert ran == list(range(0 if caught_up else 1, 6)), ran
    assert "skipped" not in caplog.text


def test_a_long_interval_job_is_caught_up_long_after_its_slot() -> None:
    # A daily job 3 hours late, within catch_up: its next slot is 21 hours away, so the missed one
    # runs now (for long intervals the room the rule asks for is 5 minutes, not half the interval).
    start = VirtualClock(T0 + 3 * 3_600_000)  # 13:00; the job's slots are at 10:00
    scheduler = Scheduler(MemoryBackend(clock=start), clock=start)
    ran: list[int] = []
    scheduler.every("daily", "1d", lambda ctx: ran.append(ctx.slot), offset="10h", catch_up="24h")
    near = Scheduler(MemoryBackend(clock=start), clock=start)
    near.every("daily", "1d", lambda ctx: ran.append(-ctx.slot), offset="13h3m", catch_up="24h")

    async def main() -> None:
        async with scheduler, near:  # `near`'s next slot is 3 minutes away: no catch-up
            await asyncio.sleep(1)

    run(start, main())
    assert ran == [T0]


def test_at_in_the_past_beyond_catch_up_never_runs_and_says_why(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock)
    ran: list[int] = []
    scheduler.at("migrate", datetime(2026, 11, 30, tzinfo=UTC), lambda: ran.append(1))

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(1)

    run(clock, main())
    assert ran == []
    assert "migrate slot=2026-11-30T00:00:00Z will not run" in caplog.text
    assert "beyond catch_up" in caplog.text


@pytest.mark.parametrize(("overlap", "expected"), [
    ("skip", [0, 30]),            # 10 and 20 are skipped while slot 0 runs (25 s)
    ("buffer_one", [0, 25, 30]),  # the newest skipped slot (20) runs as soon as slot 0 ends
    ("replace", [0, 10, 20, 30]),
    ("allow", [0, 10, 20, 30]),
])
def test_overlap_policies(clock: VirtualClock, overlap: str, expected: list[int]) -> None:
    c = Cluster(clock, 2, lease="6s", heartbeat="1s")
    began: list[int] = []
    for s in c.schedulers:
        async def long(ctx: JobContext) -> None:
            c.record(ctx)
            began.append((clock.now_ms() - T0) // 1000)
            try:
                await ctx.sleep(25 if ctx.slot == T0 + 10_000 else 3)
            except RunCancelled:
                pass

        s.every("long", "10s", long, overlap=overlap, catch_up=0)  # type: ignore[arg-type]

    async def main() -> None:
        await asyncio.sleep(9)
        for s in c.schedulers:
            await s.start()
        await asyncio.sleep(33)
        for s in c.schedulers:
            await s.stop()

    run(clock, main())
    assert [b - 10 for b in began] == expected
    assert not c.duplicates()


def test_max_attempts_and_retry(clock: VirtualClock) -> None:
    c = Cluster(clock, 2, lease="6s", heartbeat="1s")
    attempts: list[int] = []
    for s in c.schedulers:
        async def flaky(ctx: JobContext) -> None:
            attempts.append(ctx.attempt)
            raise RuntimeError("flaky")

        s.every("flaky", "1h", flaky, retry="1s", max_attempts=3, catch_up=0)

    async def main() -> None:
        for s in c.schedulers:
            await s.start()
        await asyncio.sleep(3600 + 30)
        for s in c.schedulers:
            await s.stop()
        state = await c.schedulers[0].backend.inspect("anarchon", "flaky")
        assert state is not None
        assert state.status is JobStatus.FAILED and state.attempt == 3

    run(clock, main())
    assert attempts == [1, 2, 3]


def test_claims_due_together_go_in_one_round_trip(clock: VirtualClock) -> None:
    backend = MemoryBackend(clock=clock)
    scheduler = Scheduler(backend, clock=clock, jitter=0)
    ran: list[int] = []

    async def noop(ctx: JobContext) -> None:  # async: a worker thread would end in real, not virtual, time
        ran.append(ctx.slot)

    for i in range(100):
        scheduler.every(f"job{i}", "1s", noop, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(0.5)
            before = backend.store.calls
            await asyncio.sleep(1)
            calls = backend.store.calls - before
            # One claim_many for the 100 jobs, then the 100 runs that end together are released in
            # one release_many.
            assert len(ran) == 100
            assert calls == 1 + 1
            states = await backend.jobs(scheduler.namespace)
            assert [s.status for s in states] == [JobStatus.DONE] * 100

    run(clock, main())


def test_a_herd_is_claimed_a_chunk_at_a_time_and_the_first_runs_start_before_the_last_claims(
    clock: VirtualClock
) -> None:
    from anarchon._engine import CLAIM_CHUNK

    sizes: list[int] = []
    answered: list[float] = []

    class Busy(MemoryBackend):
        """A store that takes 1 ms per claim: 5,000 claims take 5 s."""

        async def claim_many(self, requests: Any) -> Any:
            sizes.append(len(requests))
            await asyncio.sleep(len(requests) / 1000)
            results = await super().claim_many(requests)
            answered.append(clock.seconds)
            return results

    scheduler = Scheduler(Busy(clock=clock), clock=clock, jitter=0)
    began: list[float] = []

    async def noop(ctx: JobContext) -> None:
        began.append(clock.seconds)

    for i in range(5000):
        scheduler.every(f"job{i}", "1h", noop, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(3600 + 10)

    run(clock, main())
    assert len(began) == 5000
    assert sizes == [CLAIM_CHUNK, CLAIM_CHUNK, 5000 - 2 * CLAIM_CHUNK], sizes
    # The first chunk's runs start once it is answered, seconds before the last chunk is.
    assert min(began) <= answered[0] < answered[-1] - 2, (min(began), answered)


def test_a_fast_clock_cannot_run_a_slot_early(clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(clock)
    ran_at: list[int] = []
    fast = Scheduler(MemoryBackend(store), clock=SkewedClock(clock, 5000), max_skew="2s")
    fast.every("x", "1m", lambda ctx: ran_at.append(clock.now_ms() - ctx.slot), catch_up=0)

    async def main() -> None:
        async with fast:
            await asyncio.sleep(70)

    run(clock, main())
    assert ran_at and all(-2000 <= lag <= 100 for lag in ran_at), ran_at
    assert "early: this instance's clock runs" in caplog.text


def test_a_blocked_event_loop_counts_as_a_lost_lease(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock, lease="2s", heartbeat="0.5s")
    seen: list[JobContext] = []

    @scheduler.every("blocker", "1m", catch_up=0)
    async def blocker(ctx: JobContext) -> None:
        seen.append(ctx)
        clock.advance(3)  # as if the handler blocked the loop for 3 s: no renewal could be sent
        await ctx.sleep(2)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(63)

    with pytest.raises(RunCancelled):  # noqa: PT012 - the signal is what ends the handler
        try:
            run(clock, main())
        finally:
            assert seen and seen[0].signal.reason == "lease lost"
            raise RunCancelled("checked")
    assert "blocker slot=" in caplog.text and "lease lost" in caplog.text
    assert "too late" in caplog.text


def test_claim_only_backend_respects_half_the_horizon(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MemoryClaimBackend(clock=clock, horizon="4s")
    scheduler = Scheduler(backend, clock=clock)
    ran: list[int] = []
    scheduler.every("x", "10s", lambda ctx: ran.append(ctx.slot))

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(19.5)
            clock.advance(3)  # a 3 s stall: the due slot (20 s) is older than horizon / 2
            await asyncio.sleep(1)

    run(clock, main())
    assert T0 + 10_000 in ran and T0 + 20_000 not in ran
    assert "beyond half the backend's dedupe horizon" in caplog.text


def test_store_failing_mid_run_loses_nothing(clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="anarchon")  # the first failure is an INFO line
    backend = FaultyBackend(MemoryBackend(clock=clock))
    scheduler = Scheduler(backend, clock=clock, lease="6s", heartbeat="1s")
    ran: list[int] = []
    scheduler.every("x", "10s", lambda ctx: ran.append(ctx.slot), catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(9)
            backend.crashed = True  # the store goes away for 3 s around the slot at 10 s
            await asyncio.sleep(3)
            backend.crashed = False
            await asyncio.sleep(5)

    run(clock, main())
    assert ran == [T0 + 10_000]
    assert "claim of 1 slot(s) failed" in caplog.text


def test_fingerprint_change_is_warned_once(clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(clock)
    old = Scheduler(MemoryBackend(store), clock=clock)
    old.every("x", "10s", lambda: None, catch_up=0)
    new = Scheduler(MemoryBackend(store), clock=clock)
    new.every("x", "5s", lambda: None, catch_up=0)

    async def main() -> None:
        async with old:
            await asyncio.sleep(11)
        async with new:
            await asyncio.sleep(16)

    run(clock, main())
    assert caplog.text.count("the store holds schedule 'every:10000+0'") == 1


# -- bad input at registration ------------------------------------------------------------------


@pytest.fixture
def scheduler() -> Scheduler[MemoryBackend]:
    return Scheduler(MemoryBackend())


@pytest.mark.parametrize("expr", ["61 * * * *", "every tuesday"])
def test_invalid_cron(scheduler: Scheduler[MemoryBackend], expr: str) -> None:
    with pytest.raises(ScheduleError, match=repr(expr).replace("*", r"\*")):
        scheduler.cron("c", expr, lambda: None)


@pytest.mark.parametrize("bad", ["10 parsecs", 0, -5])
def test_invalid_interval(scheduler: Scheduler[MemoryBackend], bad: object) -> None:
    with pytest.raises(ScheduleError, match=repr(bad)):
        scheduler.every("e", bad, lambda: None)  # type: ignore[call-overload]


def test_unknown_timezone(scheduler: Scheduler[MemoryBackend]) -> None:
    with pytest.raises(ScheduleError, match="'Mars/Olympus'"):
        scheduler.cron("c", "0 8 * * *", lambda: None, timezone="Mars/Olympus")


def test_duplicate_name_names_the_first_handler(scheduler: Scheduler[MemoryBackend]) -> None:
    def first() -> None: ...

    scheduler.every("dup", "1s", first)
    with pytest.raises(DuplicateJobError, match=r"'dup'.*first"):
        scheduler.every("dup", "2s", lambda: None)


@pytest.mark.parametrize("name", ["", "   ", "x" * 201, "bad\nname"])
def test_bad_names(scheduler: Scheduler[MemoryBackend], name: str) -> None:
    # A string that cannot be a name is a value error; only a name that is no string is a type error.
    with pytest.raises(JobNameError, match="invalid job name") as info:
        scheduler.every(name, "1s", lambda: None)
    assert isinstance(info.value, ValueError) and not isinstance(info.value, TypeError)


def test_a_name_that_is_not_a_string_is_a_type_error(scheduler: Scheduler[MemoryBackend]) -> None:
    with pytest.raises(ConfigError, match="invalid job name 42"):
        scheduler.every(42, "1s", lambda: None)  # type: ignore[call-overload]


def test_handler_not_callable(scheduler: Scheduler[MemoryBackend]) -> None:
    with pytest.raises(ConfigError, match="not callable"):
        scheduler.every("x", "1s", "print")  # type: ignore[call-overload]


def test_handler_with_too_many_arguments(scheduler: Scheduler[MemoryBackend]) -> None:
    with pytest.raises(ConfigError, match="takes 2 arguments"):
        scheduler.every("x", "1s", lambda a, b: None)


def test_unknown_option(scheduler: Scheduler[MemoryBackend]) -> None:
    with pytest.raises(TypeError, match="unknown option 'colour'"):
        scheduler.every("x", "1s", lambda: None, colour="blue")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unknown option 'leese'"):
        Scheduler(MemoryBackend(), leese="5s")  # type: ignore[call-overload]


@pytest.mark.parametrize("option", ["overlap", "max_attempts", "catch_up", "lease", "heartbeat", "retry"])
def test_lease_only_option_on_claim_only_backend(option: str) -> None:
    claim_only: Scheduler[MemoryClaimBackend] = Scheduler(MemoryClaimBackend())
    value: Any = {"overlap": "skip", "max_attempts": 2, "retry": True}.get(option, "10s")
    with pytest.raises(TypeError, match=rf"option '{option}' needs a lease backend.*MemoryClaimBackend"):
        claim_only.every("x", "1m", lambda: None, **{option: value})


def test_lease_option_on_claim_only_scheduler() -> None:
    with pytest.raises(TypeError, match="'lease' needs a lease backend"):
        Scheduler(MemoryClaimBackend(), lease="30s")  # type: ignore[arg-type]


@pytest.mark.parametrize(("lease", "heartbeat"), [("10s", "5s"), ("10s", "6s")])
def test_heartbeat_must_be_less_than_half_the_lease(lease: str, heartbeat: str) -> None:
    with pytest.raises(OptionError, match="less than half the lease"):
        Scheduler(MemoryBackend(), lease=lease, heartbeat=heartbeat)
    with pytest.raises(OptionError, match="less than half the lease"):
        Scheduler(MemoryBackend()).every("x", "1m", lambda: None, lease=lease, heartbeat=heartbeat)


def test_backend_is_required() -> None:
    with pytest.raises(TypeError, match="a backend is required: none is assumed"):
        Scheduler()  # type: ignore[call-overload]


class _Unreachable(BackendBase):
    capabilities = MemoryClaimBackend.capabilities

    @property
    def url(self) -> str:
        return "redis://user:***@10.255.255.1:6379/0"

    async def open(self) -> None:
        raise ConnectionRefusedError("connection refused")

    async def claim(self, request: ClaimRequest) -> Any:
        raise AssertionError("never opened")


def test_unreachable_backend_at_start_names_the_redacted_url() -> None:
    scheduler = Scheduler(_Unreachable())

    async def main() -> None:
        with pytest.raises(BackendUnavailable, match=r"redis://user:\*\*\*@10\.255\.255\.1") as info:
            await scheduler.start()
        assert "secret" not in str(info.value)

    asyncio.run(main())


def test_decorator_returns_the_function(scheduler: Scheduler[MemoryBackend]) -> None:
    def f(ctx: JobContext) -> None: ...

    assert scheduler.every("f", "1s")(f) is f
    assert scheduler.jobs["f"].takes_ctx


def test_sync_handler_runs_in_a_worker_thread() -> None:
    import threading

    scheduler = Scheduler(MemoryBackend(), jitter=0)
    threads: list[str] = []
    scheduler.every("t", "0.2s", lambda: threads.append(threading.current_thread().name), catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(0.5)

    asyncio.run(main())
    assert threads and all(name != "MainThread" for name in threads)




def test_a_boundary_is_claimed_in_few_batches_and_its_wins_spread(clock: VirtualClock) -> None:
    class Counting(MemoryBackend):
        batches = 0

        async def claim_many(self, requests: Any) -> Any:
            Counting.batches += 1
            return await super().claim_many(requests)

    store = MemoryStore(clock)
    winners: dict[int, set[str]] = {}
    schedulers = [Scheduler(Counting(store), instance_id=f"i{k}", clock=clock) for k in range(3)]
    for s in schedulers:
        async def job(ctx: JobContext) -> None:
            winners.setdefault(ctx.slot, set()).add(ctx.instance_id)

        for i in range(40):
            s.every(f"job{i}", "1s", job, catch_up=0)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(20.5)
        for s in schedulers:
            await s.stop()

    run(clock, main())
    assert len(winners) == 20
    # At most one claim_many per jitter group per instance per boundary: 3 x 4 x 20.
    assert Counting.batches <= 3 * 4 * 20
    # One replica does not take every job of a boundary (which a crash would then stall).
    assert sum(len(w) >= 2 for w in winners.values()) >= 15


def test_one_malformed_claim_result_does_not_lose_the_rest_of_the_batch(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    from dataclasses import replace

    class Broken(MemoryBackend):
        async def claim_many(self, requests: Any) -> Any:
            results = await super().claim_many(requests)
            return [replace(r, lease=None) if r.job == "bad" else r for r in results]

    scheduler = Scheduler(Broken(clock=clock), clock=clock, jitter=0)
    ran: list[str] = []
    for name in ("bad", "good1", "good2"):
        async def job(ctx: JobContext) -> None:
            ran.append(ctx.name)

        scheduler.every(name, "10s", job, catch_up=0)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(10.5)

    run(clock, main())
    assert sorted(ran) == ["good1", "good2"]
    assert "bad slot=2026-12-01T10:00:10Z: handling the claim's result failed" in caplog.text
