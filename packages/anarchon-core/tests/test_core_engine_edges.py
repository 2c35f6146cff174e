"""Edge cases of the engine found in review, each a regression test, in virtual time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from anarchon import (
    ClaimRequest,
    JobContext,
    JobStatus,
    MemoryBackend,
    MemoryClaimBackend,
    MemoryStore,
    Scheduler,
    to_ms,
)
from anarchon.testing import FaultyBackend, SkewedClock, VirtualClock, crash

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


def cluster(clock: VirtualClock, n: int, **settings: Any) -> list[Scheduler[FaultyBackend]]:
    store = MemoryStore(clock)
    return [
        Scheduler(FaultyBackend(MemoryBackend(store)), instance_id=f"i{k}", clock=clock, **settings)
        for k in range(n)
    ]


def test_a_renewal_that_hangs_past_the_lease_sets_the_signal_at_the_deadline() -> None:
    # The store stops answering the runner (a partition, not a paused process): its event loop is
    # alive, so it must see by its own clock that the lease ran out, before a backup takes over.
    clock = VirtualClock(START)
    schedulers = cluster(clock, 2, lease="6s", heartbeat="1s")
    contexts: dict[int, JobContext] = {}
    cancelled_at: dict[int, float] = {}
    started_at: dict[int, float] = {}
    for s in schedulers:
        async def long(ctx: JobContext) -> None:
            contexts[ctx.attempt] = ctx
            started_at[ctx.attempt] = clock.seconds
            await ctx.signal.wait()
            cancelled_at[ctx.attempt] = clock.seconds

        s.every("report", "1h", long, catch_up=0)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(3600.5)
        winner = next(s for s in schedulers if s.active_runs)
        winner.backend.freeze(30)  # every call to the store now waits 30 s
        await asyncio.sleep(10)
        for s in schedulers:
            if s is not winner:
                await s.stop()

    clock.run(main())
    assert 2 in started_at, "the backup took the slot over"
    assert contexts[1].signal.reason == "lease lost"
    # Signalled when its lease ran out by its own clock, not when the hung call came back (30 s).
    # (Compared in whole microseconds: both moments are float sums of the clock's steps.)
    assert round(cancelled_at[1], 6) <= round(started_at[2], 6), (cancelled_at, started_at)


def test_stop_right_after_the_timer_loop_was_woken_does_not_hang() -> None:
    # Registering a job while running wakes the timer loop; stop() in the same step used to lose
    # its cancellation (asyncio.wait_for on Python 3.11), so the loop kept claiming and stop() hung.
    clock = VirtualClock(START)
    backend = MemoryBackend(clock=clock)
    scheduler = Scheduler(backend, clock=clock)
    ran: list[str] = []

    async def noop(ctx: JobContext) -> None:
        ran.append(ctx.name)

    scheduler.every("hourly", "1h", noop, catch_up=0)

    async def main() -> None:
        await scheduler.start()
        await asyncio.sleep(1)
        scheduler.every("often", "10s", noop, catch_up=0)
        stopping = asyncio.ensure_future(scheduler.stop())
        await asyncio.sleep(30)
        assert stopping.done(), "stop() hung"
        assert not scheduler.running

    clock.run(main())
    assert ran == []  # nothing is claimed once stop() began


def test_a_finished_run_is_recorded_done_after_a_store_outage_shorter_than_the_lease() -> None:
    # The handler finishes just as the store goes away for 3 s (lease 6 s). The release must be
    # retried while the lease lasts; giving up sooner lets the lease expire and a backup re-run a
    # slot that already completed.
    clock = VirtualClock(START)
    schedulers = cluster(clock, 2, lease="6s", heartbeat="1s")
    starts: list[tuple[int, str]] = []

    async def outage() -> None:
        for s in schedulers:
            s.backend.crashed = True
        await asyncio.sleep(3)
        for s in schedulers:
            s.backend.crashed = False

    for s in schedulers:
        async def report(ctx: JobContext) -> None:
            starts.append((ctx.attempt, ctx.instance_id))
            await asyncio.sleep(2)
            asyncio.get_running_loop().create_task(outage())
            await asyncio.sleep(0)

        s.every("report", "1h", report, catch_up=0)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(3630)
        for s in schedulers:
            await s.stop()
        state = await schedulers[0].backend.inspect("anarchon", "report")
        assert state is not None and state.status is JobStatus.DONE and state.attempt == 1, state

    clock.run(main())
    assert [a for a, _ in starts] == [1]


def test_after_a_stall_the_newest_due_slot_runs_not_the_oldest_missed_one() -> None:
    # The loop is blocked from 5.5 s to 9 s. The 6 s slot is long gone and 9 s is due: claiming 6
    # first (as before) won it and then skipped 9 (overlap skip), so the current slot never ran.
    clock = VirtualClock(START)
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock, jitter=0)
    ran: list[int] = []

    async def tick(ctx: JobContext) -> None:
        ran.append((ctx.slot - T0) // 1000)
        await ctx.sleep(0.1)

    async def blocker() -> None:
        clock.advance(3.5)  # a handler that blocks the event loop for 3.5 s

    scheduler.every("tick", "1s", tick, catch_up=0)
    scheduler.at("blocker", (T0 + 5500) / 1000, blocker)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(11.5)

    clock.run(main())
    assert ran == [1, 2, 3, 4, 5, 9, 10, 11]


def test_catch_up_that_fires_after_the_next_boundary_yields_to_it() -> None:
    # Started 10 ms before 10:00 with catch-up on; the loop is busy for 20 ms, so the catch-up
    # claim of 09:59 goes out at 10:00:00.010, when 10:00 is due. 10:00 must run, not 09:59.
    clock = VirtualClock(T0 - 10)
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock, jitter=0)
    ran: list[int] = []

    async def minute(ctx: JobContext) -> None:
        ran.append((ctx.slot - T0) // 1000)
        await ctx.sleep(1)

    scheduler.every("minute", "1m", minute, catch_up="5m")

    async def main() -> None:
        async with scheduler:
            clock.advance(0.02)  # busy for 20 ms right after start
            await asyncio.sleep(5)

    clock.run(main())
    assert ran == [0]


def test_overlap_allow_takes_over_an_older_run_after_a_newer_slot_was_claimed() -> None:
    # overlap="allow" keeps one record per slot, so a crashed older run must still be taken over
    # (a run is re-attempted after expiry), even though the backups got or lost a newer slot of the job.
    clock = VirtualClock(START)
    schedulers = cluster(clock, 3, lease="6s", heartbeat="1s")
    starts: list[tuple[int, int, float]] = []
    for s in schedulers:
        async def long(ctx: JobContext) -> None:
            starts.append(((ctx.slot - T0) // 1000, ctx.attempt, clock.seconds))
            await ctx.sleep(25)

        s.every("long", "10s", long, catch_up=0, overlap="allow")

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(22)  # slot 10 runs on one instance, slot 20 is claimed as well
        holder = next(s for s in schedulers if any(c.slot == T0 + 10_000 for c in s.active_runs))
        await crash(holder)
        await asyncio.sleep(20)
        for s in schedulers:
            if s is not holder:
                await s.stop()

    clock.run(main())
    retaken = [at for slot, attempt, at in starts if slot == 10 and attempt == 2]
    assert retaken and retaken[0] <= 22 + 6 + 1 + 0.05, starts


def test_overlap_allow_takes_over_an_older_slot_handed_over_at_a_graceful_stop() -> None:
    # Under overlap="allow" the slot a stopping instance runs may be older than the job's newest
    # slot. Its handover must keep the slot's record (released), as for the newest slot, so that
    # the backup's re-claim takes it over as attempt 2 instead of finding nothing (stale).
    clock = VirtualClock(START)
    schedulers = cluster(clock, 2, lease="6s", heartbeat="1s", stop_timeout="2s")
    starts: list[tuple[int, int, str, float]] = []
    for s in schedulers:
        async def long(ctx: JobContext) -> None:
            starts.append(((ctx.slot - T0) // 1000, ctx.attempt, ctx.instance_id, clock.seconds))
            await ctx.sleep(25)

        s.every("long", "10s", long, catch_up=0, overlap="allow")

    async def main() -> tuple[str, str, float]:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(22)  # slot 10 runs, and slot 20, the job's newest, runs as well
        holder = next(s for s in schedulers if any(c.slot == T0 + 10_000 for c in s.active_runs))
        other = next(s for s in schedulers if s is not holder)
        stopped = clock.seconds
        await holder.stop()
        await asyncio.sleep(3)
        await other.stop()
        return holder.instance_id, other.instance_id, stopped

    holder_id, other_id, stopped = clock.run(main())
    assert any(slot == 20 for slot, _, _, _ in starts), starts
    retaken = [(who, at) for slot, attempt, who, at in starts if slot == 10 and attempt == 2]
    assert retaken, f"the older slot handed over at the stop was never taken over: {starts}"
    who, at = retaken[0]
    assert who == other_id != holder_id, starts
    assert at <= stopped + 1.1, starts  # pushed: at once, not after the lease


def test_overlap_allow_retries_an_older_slot_after_a_handler_error() -> None:
    # `retry` hands the failed slot over and claims it again: under overlap="allow" that slot may be
    # older than the job's newest one by then, and its attempt 2 must still run.
    clock = VirtualClock(START)
    backend = MemoryBackend(clock=clock)
    scheduler = Scheduler(backend, clock=clock, lease="6s", heartbeat="1s")
    starts: list[tuple[int, int, float]] = []

    async def flaky(ctx: JobContext) -> None:
        starts.append(((ctx.slot - T0) // 1000, ctx.attempt, clock.seconds))
        await ctx.sleep(15)
        if ctx.attempt == 1:
            raise RuntimeError("flaky")

    scheduler.every("flaky", "10s", flaky, catch_up=0, overlap="allow", retry="1s", max_attempts=3)

    async def main() -> None:
        await scheduler.start()
        await asyncio.sleep(28)  # slot 10 fails at 25, after slot 20 began; its retry is due at 26
        await scheduler.stop()

    clock.run(main())
    retried = [at for slot, attempt, at in starts if slot == 10 and attempt == 2]
    assert retried and retried[0] <= 26 + 1.1, starts


def test_a_class_whose_instances_are_async_callables_is_a_plain_handler() -> None:
    # The class itself is called (a constructor, not a coroutine function); its async __call__
    # describes its instances. Treated as async, every run failed: "can't be used in 'await'".
    made: list[JobContext] = []

    class Command:
        def __init__(self, ctx: JobContext) -> None:
            made.append(ctx)

        async def __call__(self) -> None: ...

    scheduler = Scheduler(MemoryBackend(), jitter=0)
    scheduler.every("command", "0.2s", Command, catch_up=0)

    async def main() -> None:
        async with scheduler:
            # Real time on a shared machine: wait for a run to end done (a run still going at the
            # stop would be handed over, which says nothing about this handler).
            state = None
            for _ in range(200):
                await asyncio.sleep(0.05)
                state = await scheduler.backend.inspect("anarchon", "command")
                if state is not None and state.status is JobStatus.DONE:
                    break
            assert state is not None and state.status is JobStatus.DONE, state

    asyncio.run(main())
    assert made


class _SlowAfterClaim(MemoryBackend):
    """Answers claims, then the caller's loop is blocked for `block_s` before it sees the answer
    (thousands of results to handle, a GC pause); `meanwhile` runs in that gap."""

    def __init__(self, store: MemoryStore, clock: VirtualClock, block_s: float) -> None:
        super().__init__(store)
        self.clock = clock
        self.block_s = block_s
        self.meanwhile: Any = None

    async def claim(self, request: Any) -> Any:
        return (await self.claim_many([request]))[0]

    async def claim_many(self, requests: Any) -> Any:
        results = await super().claim_many(requests)
        if self.block_s and any(r.won for r in results):
            self.clock.advance(self.block_s)
            if self.meanwhile is not None:
                await self.meanwhile()
            self.block_s = 0
        return results


def _late_start_cluster(clock: VirtualClock) -> tuple[MemoryStore, _SlowAfterClaim, list[Scheduler[Any]]]:
    store = MemoryStore(clock)
    slow = _SlowAfterClaim(store, clock, block_s=3)
    first = Scheduler(slow, instance_id="slow", clock=clock, lease="2s", heartbeat="0.5s", jitter=0)
    # The backup's clock runs 500 ms behind: its boundary claim comes after the blocked winner's
    # handler would start, so the run's own renewal is what decides (no race in the same loop step).
    backup = Scheduler(MemoryBackend(store), instance_id="backup", clock=SkewedClock(clock, -500),
                       lease="2s", heartbeat="0.5s", jitter=0)
    return store, slow, [first, backup]


async def _run_for(schedulers: list[Scheduler[Any]], seconds: float) -> None:
    """Start every scheduler, let `seconds` of virtual time pass, stop them all."""
    for s in schedulers:
        await s.start()
    await asyncio.sleep(seconds)
    for s in schedulers:
        await s.stop()


def test_a_run_whose_lease_ran_out_before_it_started_does_not_start_and_runs_once_as_a_takeover() -> None:
    # The winner's loop was blocked for longer than the lease between the claim and the handler's
    # start. Its renewal comes after the lease ended, so it fails even though nobody took the slot
    # over yet, and the run does not start; the slot is claimed again and runs once, as attempt 2.
    # (A run started on the expired lease would run beside a backup's takeover.)
    clock = VirtualClock(START)
    _store, _slow, schedulers = _late_start_cluster(clock)
    runs: list[tuple[str, int, int]] = []
    for s in schedulers:
        async def job(ctx: JobContext) -> None:
            runs.append((ctx.instance_id, ctx.slot, ctx.attempt))
            await ctx.sleep(1)

        s.every("report", "1m", job, catch_up=0)

    clock.run(_run_for(schedulers, 70))
    # (The backup, 500 ms behind, also sees 10:00:00 as a boundary at start; only 10:01 is blocked.)
    assert [r[1:] for r in runs if r[1] == T0 + 60_000] == [(T0 + 60_000, 2)], runs


def test_a_run_whose_lease_was_taken_over_before_it_started_does_not_start(caplog: Any) -> None:
    # Same gap, but the backup took the expired slot over inside it: the late winner's renewal
    # fails and its handler never starts, so the slot does not run twice.
    clock = VirtualClock(START)
    store, slow, schedulers = _late_start_cluster(clock)
    runs: list[tuple[str, int, int]] = []
    for s in schedulers:
        async def job(ctx: JobContext) -> None:
            runs.append((ctx.instance_id, ctx.slot, ctx.attempt))

        s.every("report", "1m", job, catch_up=0)

    async def takeover() -> None:
        request = ClaimRequest("anarchon", "report", T0 + 60_000, "backup", lease_ms=2000,
                               fingerprint="every:60000+0")
        result = await MemoryBackend(store).claim(request)
        assert result.won and result.lease is not None and result.lease.attempt == 2, result

    slow.meanwhile = takeover

    clock.run(_run_for(schedulers, 70))
    assert ("slow", T0 + 60_000, 1) not in runs, runs
    assert "not started: the claim is 3000 ms old" in caplog.text


def test_stop_cancels_an_async_handler_that_ignores_the_signal_and_hands_it_over() -> None:
    # The handler runs in the run's own task (no task of its own): after stop_timeout, stop() must
    # cancel it there, and the run is still released as a handover for a backup's attempt 2.
    clock = VirtualClock(START)
    store = MemoryStore(clock)
    schedulers = [Scheduler(MemoryBackend(store), instance_id=f"i{k}", clock=clock, lease="6s",
                            heartbeat="1s", stop_timeout="2s") for k in range(2)]
    events: list[tuple[str, int, str, float]] = []
    for s in schedulers:
        async def stubborn(ctx: JobContext) -> None:
            events.append(("start", ctx.attempt, ctx.instance_id, clock.seconds))
            try:
                await asyncio.sleep(30)  # ignores ctx.signal
            except asyncio.CancelledError:
                events.append(("cancelled", ctx.attempt, ctx.instance_id, clock.seconds))
                raise

        s.every("stubborn", "1m", stubborn, catch_up=0)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(61)
        winner = next(s for s in schedulers if s.active_runs)
        stopped = clock.seconds
        await winner.stop()
        assert clock.seconds - stopped < 2.5, "stop() waited for the handler beyond stop_timeout"
        await asyncio.sleep(1)
        other = next(s for s in schedulers if s is not winner)
        assert [e[:2] for e in events] == [("start", 1), ("cancelled", 1), ("start", 2)], events
        assert events[2][2] == other.instance_id
        await other.stop()

    clock.run(main())


_EXITS = """
import asyncio, sys
from datetime import UTC, datetime
from anarchon import MemoryBackend, MemoryStore, Scheduler
from anarchon.testing import VirtualClock

clock = VirtualClock(datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
backend = MemoryBackend(MemoryStore(clock))
scheduler = Scheduler(backend, clock=clock, lease="6s", heartbeat="1s")

@scheduler.every("exits", "1m", catch_up=0)
async def exits() -> None:
    raise {exc}

async def main() -> None:
    async with scheduler:
        await asyncio.sleep(120)

try:
    clock.run(main())
except BaseException as exc:
    print(type(exc).__name__, backend.store.jobs[(scheduler.namespace, "exits")].current.status.value)
"""


def test_a_handler_that_ends_the_process_leaves_its_run_for_a_handover() -> None:
    # SystemExit or KeyboardInterrupt from a handler ends the process, not the run: the run is
    # released as a handover (another replica runs it), never recorded as done. In a subprocess,
    # because the exception goes through the event loop and out of it.
    import subprocess
    import sys

    for exc in ("SystemExit(3)", "KeyboardInterrupt()"):
        out = subprocess.run([sys.executable, "-c", _EXITS.format(exc=exc)], capture_output=True, text=True,
                             timeout=60)
        assert out.stdout.split() == [exc.split("(")[0], "released"], (out.stdout, out.stderr[-2000:])


class _GatedClaims(MemoryClaimBackend):
    """Claims wait for `gate`: a claim in flight when stop() is called."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(clock=clock)
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def claim(self, request: Any) -> Any:
        self.waiting.set()
        await self.gate.wait()
        return await super().claim(request)


def test_a_claim_only_slot_won_during_stop_still_runs() -> None:
    # A claim-only backend has no handover: the other replicas were told `taken`. A slot won while
    # this instance stops must run here (with its signal set), or nobody runs it.
    clock = VirtualClock(START)
    ran: list[tuple[int, bool]] = []

    async def main() -> None:
        backend = _GatedClaims(clock)
        scheduler = Scheduler(backend, clock=clock, stop_timeout="2s")

        @scheduler.every("gated", "1m")
        async def gated(ctx: JobContext) -> None:
            ran.append((ctx.slot, ctx.cancelled))

        await scheduler.start()
        await backend.waiting.wait()  # the 10:01 claim is in flight
        stopping = asyncio.ensure_future(scheduler.stop())
        await asyncio.sleep(0.5)
        backend.gate.set()
        await stopping

    clock.run(main())
    assert ran == [(T0 + 60_000, True)], ran


class _SlowReleases(MemoryBackend):
    """Releases wait `delay_s` in a queue before the store applies them; claims and renewals do not
    (an overloaded store whose release batches queue behind other work)."""

    def __init__(self, store: MemoryStore, delay_s: float) -> None:
        super().__init__(store)
        self.delay_s = delay_s

    async def release_many(self, releases: Any) -> list[bool]:
        await asyncio.sleep(self.delay_s)
        return await super().release_many(releases)


def test_a_finished_run_keeps_its_lease_while_its_release_is_slow(caplog: Any) -> None:
    # The handler returns at once, but the store applies the release 5 s later (lease 2 s). The
    # lease must be renewed until the release lands: once it ran out, the backup took the slot
    # over as attempt 2 and ran a slot that had already completed.
    clock = VirtualClock(START)
    store = MemoryStore(clock)
    schedulers = [Scheduler(_SlowReleases(store, 5), instance_id=f"i{k}", clock=clock, lease="2s",
                            heartbeat="0.5s") for k in range(2)]
    runs: list[tuple[str, int, int]] = []
    for s in schedulers:
        async def job(ctx: JobContext) -> None:
            runs.append((ctx.instance_id, ctx.slot, ctx.attempt))

        s.every("report", "1m", job, catch_up=0)

    async def main() -> None:
        await _run_for(schedulers, 70)
        state = await MemoryBackend(store).inspect("anarchon", "report")
        assert state is not None and state.status is JobStatus.DONE and state.attempt == 1, state

    clock.run(main())
    assert [r for r in runs if r[1] == T0 + 60_000] == [(runs[0][0], T0 + 60_000, 1)], runs
    assert "lease lost" not in caplog.text


class _CountingRenewals(_SlowAfterClaim):
    """Records the size of every renew_many call, and every single renew."""

    def __init__(self, store: MemoryStore, clock: VirtualClock, block_s: float) -> None:
        super().__init__(store, clock, block_s)
        self.batches: list[int] = []
        self.singles = 0

    async def renew(self, lease: Any, lease_ms: int) -> Any:
        self.singles += 1
        return await super().renew(lease, lease_ms)

    async def renew_many(self, renewals: Any) -> Any:
        self.batches.append(len(renewals))
        return await super().renew_many(renewals)


def test_renewals_made_together_go_out_in_one_renew_many() -> None:
    # Thousands of runs whose claim came back late each renewed alone before starting: under
    # overload that was a storm of single round trips (74,000 in one minute of scenario C on
    # PostgreSQL) that delayed every release behind it. They go out as one batch per loop step,
    # and so do the heartbeats of runs that last.
    clock = VirtualClock(START)
    store = MemoryStore(clock)
    backend = _CountingRenewals(store, clock, block_s=3)
    scheduler = Scheduler(backend, instance_id="slow", clock=clock, lease="2s", heartbeat="0.5s", jitter=0)
    runs: list[str] = []
    for k in range(40):
        async def job(ctx: JobContext) -> None:
            runs.append(ctx.name)
            await ctx.sleep(2)

        scheduler.every(f"job{k}", "1m", job, catch_up=0)

    clock.run(_run_for([scheduler], 65))
    assert sorted(runs) == sorted(f"job{k}" for k in range(40)), runs
    assert backend.singles == 0, "a renewal went out alone"
    # One batch renews all 40 before they start; then each heartbeat renews the 40 together.
    assert backend.batches[0] == 40, backend.batches
    assert len(backend.batches) <= 6 and min(backend.batches) == 40, backend.batches


def test_stop_called_from_a_handler_does_not_wait_for_that_handler() -> None:
    # A job that shuts its own scheduler down (a one-off migration, a "drain" job): stop() used to
    # wait for every run, the caller's own included, until stop_timeout, then cancel the caller and
    # hand its slot over for a re-run. It now begins the stop and returns; the scheduler stops once
    # the handler has returned, and the run is recorded done.
    clock = VirtualClock(START)
    store = MemoryStore(clock)
    scheduler = Scheduler(MemoryBackend(store), clock=clock, stop_timeout="30s")
    events: list[tuple[str, float]] = []

    @scheduler.every("drain", "1m")
    async def drain(ctx: JobContext) -> None:
        events.append(("handler", clock.seconds))
        await scheduler.stop()
        events.append(("stop returned", clock.seconds))
        assert ctx.cancelled  # the stop signals every run, this one too
        await asyncio.sleep(1)
        events.append(("handler ends", clock.seconds))

    async def main() -> None:
        await scheduler.start()
        for _ in range(240):  # two minutes at most
            if events and not scheduler.running:
                break
            await asyncio.sleep(0.5)
        events.append(("stopped", clock.seconds))
        state = await MemoryBackend(store).inspect("anarchon", "drain")
        assert state is not None and state.status is JobStatus.DONE and state.attempt == 1, state

    clock.run(main())
    names = [name for name, _ in events]
    assert names == ["handler", "stop returned", "handler ends", "stopped"], events
    started = events[0][1]
    assert events[1][1] - started < 0.1, events
    assert events[3][1] - started < 3, f"the stop waited for its own caller: {events}"


def test_a_crashed_run_of_an_at_job_is_taken_over() -> None:
    # A one-off job has no next boundary. Its backups' watches were dropped as if one were about to
    # settle the slot (the boundary of the run's own slot, long past), so a crashed holder's slot was
    # never taken over.
    clock = VirtualClock(START)
    schedulers = cluster(clock, 2, lease="6s", heartbeat="1s")
    starts: list[tuple[int, str, float]] = []
    for s in schedulers:
        async def migrate(ctx: JobContext) -> None:
            starts.append((ctx.attempt, ctx.instance_id, clock.seconds))
            await ctx.sleep(30)

        s.at("migrate", (T0 + 60_000) / 1000, migrate)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(61)
        holder = next(s for s in schedulers if s.active_runs)
        await crash(holder)
        await asyncio.sleep(10)
        for s in schedulers:
            if s is not holder:
                await s.stop()

    clock.run(main())
    assert [a for a, _, _ in starts] == [1, 2], starts
    assert starts[1][1] != starts[0][1] and starts[1][2] <= 61 + 6 + 1 + 0.05, starts
