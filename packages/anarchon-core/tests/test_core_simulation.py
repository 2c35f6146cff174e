"""Three schedulers, 10,000 slots of a 1 s job, with random graceful stops, crashes and freezes.

Runs in virtual time: about 10,000 s of schedule in a few seconds of real time. Checks the
guarantees of docs/guarantees.md with the documented bounds:
- at most one winner per (job, slot, attempt);
- a graceful stop hands each in-flight run over within two heartbeats;
- a crash is taken over within lease + heartbeat + jitter (or the slot is superseded by a newer one);
- a frozen runner's next renew fails and its signal is set;
- a slot is missing only when a crash, freeze or stop left a live lease on the job at its boundary.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from anarchon import JobContext, MemoryBackend, MemoryStore, Scheduler, to_ms
from anarchon.testing import FaultyBackend, VirtualClock, crash

START = datetime(2026, 12, 1, tzinfo=UTC)
LEASE, HEARTBEAT, JITTER = 1200, 400, 50
TICK_SLOTS = 10_000


@dataclass
class Fault:
    kind: str  # stop, crash, freeze
    instance: str
    at: int
    duration: int = 0
    in_flight: list[JobContext] = field(default_factory=list)


@dataclass
class Start:
    job: str
    slot: int
    attempt: int
    instance: str
    at: int


@pytest.mark.parametrize("seed", [1, 2])
def test_simulation(seed: int) -> None:
    rng = random.Random(seed)
    clock = VirtualClock(START)
    store = MemoryStore(clock)
    starts: list[Start] = []
    faults: list[Fault] = []
    ended: dict[tuple[int, int], int] = {}
    counter = iter(range(1_000_000))

    def make() -> Scheduler[FaultyBackend]:
        scheduler = Scheduler(
            FaultyBackend(MemoryBackend(store)), instance_id=f"i{next(counter)}", clock=clock,
            lease=f"{LEASE}ms", heartbeat=f"{HEARTBEAT}ms",
        )

        async def tick(ctx: JobContext) -> None:
            starts.append(Start("tick", ctx.slot, ctx.attempt, ctx.instance_id, clock.now_ms()))
            await ctx.sleep(0.05)

        async def long(ctx: JobContext) -> None:
            starts.append(Start("long", ctx.slot, ctx.attempt, ctx.instance_id, clock.now_ms()))
            try:
                await ctx.sleep(4)
            finally:
                ended[(ctx.slot, ctx.attempt)] = clock.now_ms()

        scheduler.every("tick", "1s", tick, catch_up=0)
        scheduler.every("long", "10s", long, catch_up=0)
        return scheduler

    async def main() -> None:
        live = [make() for _ in range(3)]
        for s in live:
            await s.start()
        end = TICK_SLOTS
        while clock.seconds < end - 60:
            await asyncio.sleep(rng.uniform(15, 45))
            # Aim at the instance running the long job when there is one, to test takeovers.
            holders = [s for s in live if any(c.name == "long" for c in s.active_runs)]
            target = holders[0] if holders and rng.random() < 0.7 else rng.choice(live)
            fault = Fault(rng.choice(["stop", "crash", "freeze"]), target.instance_id, clock.now_ms(),
                          in_flight=list(target.active_runs))
            faults.append(fault)
            if fault.kind == "freeze":
                fault.duration = rng.randint(LEASE + HEARTBEAT, 3 * LEASE)
                target.backend.freeze(fault.duration / 1000)
                continue
            if fault.kind == "stop":
                await target.stop()
            else:
                await crash(target)
            live.remove(target)
            await asyncio.sleep(rng.uniform(0.5, 5))
            replacement = make()
            await replacement.start()
            live.append(replacement)
        await asyncio.sleep(end - clock.seconds)
        for s in live:
            await s.stop()

    clock.run(main())
    t0 = to_ms(START)

    # 1. At most one winner per (job, slot, attempt).
    seen: dict[tuple[str, int, int], Start] = {}
    for s in starts:
        key = (s.job, s.slot, s.attempt)
        assert key not in seen, f"two winners for {key}: {seen[key]} and {s}"
        seen[key] = s

    # 1b. A takeover happens only when its holder stopped, crashed or froze: a live lease is never
    #     taken over early, which would run two attempts of one slot side by side.
    for s in starts:
        if s.attempt > 1:
            previous = seen[(s.job, s.slot, s.attempt - 1)]
            assert any(f.instance == previous.instance and f.at <= s.at for f in faults), (
                f"attempt {s.attempt} of {s.job} slot {s.slot} started with no fault on {previous}")

    def started_after(job: str, slot: int, attempt: int, by: int) -> bool:
        nxt = seen.get((job, slot, attempt + 1))
        superseded = any(s.job == job and s.slot > slot and s.at <= by for s in starts)
        return (nxt is not None and nxt.at <= by) or superseded

    stops = crashes = freezes = 0
    for fault in faults:
        for ctx in fault.in_flight:
            if ctx.attempt >= 3 or not any(s.slot == ctx.slot and s.job == ctx.name for s in starts):
                continue
            if fault.kind == "stop":
                # 2. Graceful stop: handover within two heartbeats.
                stops += 1
                assert started_after(ctx.name, ctx.slot, ctx.attempt, fault.at + 2 * HEARTBEAT), fault
            elif fault.kind == "crash":
                # 3. Crash: takeover within lease + heartbeat + jitter.
                crashes += 1
                bound = fault.at + LEASE + HEARTBEAT + JITTER
                assert started_after(ctx.name, ctx.slot, ctx.attempt, bound), (fault, ctx)
            elif ctx.name == "long" and seen["long", ctx.slot, ctx.attempt].at + 4000 > fault.at + LEASE + 99:
                # 4. Freeze: a runner cut off from the store is signalled once its lease ends (by its
                # own clock), so a run that would outlive the lease is always signalled.
                freezes += 1
                assert ctx.signal.reason == "lease lost", (fault, ctx)
                assert ended[(ctx.slot, ctx.attempt)] <= fault.at + LEASE, (fault, ctx)
                assert started_after(ctx.name, ctx.slot, ctx.attempt, fault.at + LEASE + HEARTBEAT + JITTER)
    assert stops and crashes and freezes, "the random faults must exercise every kind"

    # 5. No tick slot lost outside the documented bounds.
    ran = {s.slot for s in starts if s.job == "tick"}
    missing = [t0 + k * 1000 for k in range(2, TICK_SLOTS - 2) if t0 + k * 1000 not in ran]
    for slot in missing:
        assert any(
            f.at - 1000 <= slot <= f.at + f.duration + LEASE + HEARTBEAT + 2 * JITTER for f in faults
        ), f"tick slot {slot} lost with no fault near it"
    assert len(missing) < 0.02 * TICK_SLOTS
