"""Cluster-wide pause, resume and trigger, in virtual time over one in-memory store."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from anarchon import (
    ConfigError,
    Event,
    JobContext,
    JobControl,
    JobRegistered,
    MemoryBackend,
    MemoryClaimBackend,
    MemoryStore,
    Scheduler,
    UnknownJob,
    to_ms,
)
from anarchon.inspect import Inspector
from anarchon.testing import FaultyBackend, VirtualClock, crash

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


class Replicas:
    """Three schedulers on one store and one virtual clock, each recording the runs it starts."""

    def __init__(self, clock: VirtualClock, n: int = 3, *, heartbeat: str = "1s",
                 notify: bool = True) -> None:
        self.clock = clock
        self.store = MemoryStore(clock)
        self.starts: list[tuple[int, str, int]] = []  # slot, instance, virtual time
        self.skipped: list[tuple[str, int]] = []  # instance, slot
        self.reasons: set[str | None] = set()
        self.contexts: list[JobContext] = []
        self.schedulers: list[Scheduler[MemoryBackend]] = []
        for k in range(n):
            s = Scheduler(MemoryBackend(self.store, notify=notify), instance_id=f"i{k}", clock=clock,
                          lease="60s" if heartbeat != "1s" else "6s", heartbeat=heartbeat)

            async def tick(ctx: JobContext) -> None:
                self.starts.append((ctx.slot, ctx.instance_id, clock.now_ms()))
                self.contexts.append(ctx)

            def skipped(event: Event) -> None:
                self.skipped.append((event.instance, event.slot))
                self.reasons.add(event.reason)

            s.every("tick", "10s", tick, catch_up=0)
            s.on("skipped", skipped)
            self.schedulers.append(s)

    def admin(self) -> Scheduler[MemoryBackend]:
        """A process with no jobs that only issues controls."""
        return Scheduler(MemoryBackend(self.store), clock=self.clock)

    def slots(self) -> list[int]:
        return sorted(slot for slot, _, _ in self.starts)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


def test_pause_from_a_process_with_no_jobs_stops_every_replica_within_a_heartbeat(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    r = Replicas(clock)
    caplog.set_level(logging.INFO, "anarchon")

    async def main() -> None:
        for s in r.schedulers:
            await s.start()
        await asyncio.sleep(25)  # slots +10 s and +20 s run
        await r.admin().pause("tick")  # at +25 s
        await asyncio.sleep(40)  # +30 ... +60 are skipped on every replica
        await r.admin().resume("tick")  # at +65 s
        await asyncio.sleep(20)  # +70 and +80 run
        for s in r.schedulers:
            await s.stop()

    clock.run(main())
    assert r.slots() == [T0 + 10_000, T0 + 20_000, T0 + 70_000, T0 + 80_000]
    paused = {T0 + k * 10_000 for k in range(3, 7)}
    assert {slot for _, slot in r.skipped} == paused
    assert len(r.skipped) == 3 * len(paused), "each replica reports each paused slot as skipped"
    assert r.reasons == {"paused"}
    # Said once per replica: the pause, the resume, and the skipped slots summed up in one line.
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert [m for m in said if "skipped (paused)" in m] == [], "a line per paused slot at INFO"
    assert len([m for m in said if m == "tick paused: its slots are skipped until it is resumed"]) == 3, said
    assert len([m for m in said if m == "tick resumed"]) == 3, said
    summaries = [m for m in said if "slot(s) skipped in" in m]
    assert len(summaries) == 3 and all(m.startswith("4 slot(s)") and "(paused: tick x4)" in m
                                       for m in summaries), summaries
    assert "missed" not in caplog.text


def test_a_replica_learns_of_a_pause_within_one_heartbeat(clock: VirtualClock) -> None:
    r = Replicas(clock, n=2)

    async def main() -> None:
        for s in r.schedulers:
            await s.start()
        await asyncio.sleep(9.5)
        await r.admin().pause("tick")  # 0.5 s before slot +10 s, less than a heartbeat (1 s)
        await asyncio.sleep(1.5)
        for s in r.schedulers:
            await s.stop()

    clock.run(main())
    # Within 1 s every replica polls: the +10 s slot is either run (the poll came after it) or
    # skipped by all; here the last poll before the slot came at +9.x s, so the 1 s heartbeat
    # guarantees the pause is known by +10.5 s at the latest: no slot after that runs.
    assert all(slot <= T0 + 10_000 for slot in r.slots())


@pytest.mark.parametrize("notify", [True, False])
def test_a_pushed_pause_reaches_every_replica_at_once(clock: VirtualClock, notify: bool) -> None:
    r = Replicas(clock, n=2, heartbeat="20s", notify=notify)

    async def main() -> None:
        for s in r.schedulers:
            await s.start()
        await asyncio.sleep(25)  # +10 and +20 run; the replicas last polled at +20 s
        await r.admin().pause("tick")  # at +25 s; their next poll is at +40 s
        await asyncio.sleep(10)
        for s in r.schedulers:
            await s.stop()

    clock.run(main())
    pushed = [T0 + 10_000, T0 + 20_000]
    # Pushed, the +30 s slot is skipped; polled every 20 s, the pause arrives only after it ran.
    assert r.slots() == (pushed if notify else [*pushed, T0 + 30_000])
    assert {slot for _, slot in r.skipped} == ({T0 + 30_000} if notify else set())


def test_trigger_runs_once_on_one_replica_under_a_slot_of_its_own(clock: VirtualClock) -> None:
    r = Replicas(clock)

    async def main() -> None:
        for s in r.schedulers:
            await s.start()
        await asyncio.sleep(13)
        ids.append(await r.admin().trigger("tick"))  # at +13 s
        await asyncio.sleep(3)
        ids.append(await r.schedulers[1].trigger("tick"))  # at +16 s, from a replica
        await asyncio.sleep(6)
        for s in r.schedulers:
            await s.stop()

    ids: list[int] = []
    clock.run(main())
    assert ids == [T0 + 13_000, T0 + 16_000]
    assert r.slots() == [T0 + 10_000, ids[0], ids[1], T0 + 20_000]
    started = {slot: at for slot, _, at in r.starts}
    assert started[ids[0]] - ids[0] <= 1_000, "a replica claims a trigger within one heartbeat"
    assert started[ids[1]] == ids[1], "the replica that triggers claims at once"
    assert len(r.starts) == len({slot for slot, _, _ in r.starts})  # each exactly once
    kinds = {ctx.slot: (ctx.triggered, ctx.record, ctx.idempotency_key()) for ctx in r.contexts}
    assert kinds[ids[0]] == (True, "tick\x1ftrigger", f"anarchon:tick:trigger-{ids[0]}")
    assert kinds[T0 + 10_000] == (False, "tick", f"anarchon:tick:{T0 + 10_000}")


def test_a_paused_job_can_still_be_triggered(clock: VirtualClock) -> None:
    r = Replicas(clock, n=2)

    async def main() -> None:
        await r.admin().pause("tick", force=True)  # before any replica starts: even the first slot is skipped
        for s in r.schedulers:
            await s.start()
        await asyncio.sleep(15)
        trigger = await r.admin().trigger("tick")
        await asyncio.sleep(10)
        for s in r.schedulers:
            await s.stop()
        assert r.slots() == [trigger]

    clock.run(main())


def test_a_trigger_issued_while_no_replica_runs_runs_at_the_next_start(clock: VirtualClock) -> None:
    r = Replicas(clock, n=2)

    async def main() -> None:
        trigger = await r.admin().trigger("tick", force=True)  # not deployed yet
        await asyncio.sleep(3)
        for s in r.schedulers:
            await s.start()
        await asyncio.sleep(1)
        for s in r.schedulers:
            await s.stop()
        assert r.slots() == [trigger]
        for s in r.schedulers:  # restarted: the trigger ran already, it does not run again
            await s.start()
        await asyncio.sleep(1)
        for s in r.schedulers:
            await s.stop()
        assert r.slots() == [trigger]

    clock.run(main())


def test_controls_read_back_from_the_store(clock: VirtualClock) -> None:
    store = MemoryStore(clock)

    async def main() -> None:
        s = Scheduler(MemoryBackend(store), clock=clock)
        await s.pause("a", force=True)
        await s.trigger("b", force=True)
        got = await MemoryBackend(store).controls("anarchon")
        assert got == {"a": JobControl(paused=True), "b": JobControl(trigger=T0)}
        await s.resume("a", force=True)
        assert (await MemoryBackend(store).controls("anarchon"))["a"] == JobControl()

    clock.run(main())


def test_controls_on_a_claim_only_backend_are_refused_with_the_fix(clock: VirtualClock) -> None:
    s: Any = Scheduler(MemoryClaimBackend(), clock=clock)

    async def main() -> None:
        for verb in ("pause", "resume", "trigger"):
            refused = rf"cannot {verb} 'tick': .* lacks the 'control' capability"
            with pytest.raises(ConfigError, match=refused):
                await getattr(s, verb)("tick")

    clock.run(main())


def test_a_bad_job_name_is_refused(clock: VirtualClock) -> None:
    s = Scheduler(MemoryBackend(clock=clock), clock=clock)

    async def main() -> None:
        with pytest.raises(ConfigError):
            await s.pause(42)  # type: ignore[arg-type]

    clock.run(main())


def test_a_crashed_trigger_winner_is_taken_over(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    starts: list[tuple[int, int, str]] = []  # slot, attempt, instance
    schedulers = [
        Scheduler(FaultyBackend(MemoryBackend(store)), instance_id=f"i{k}", clock=clock, lease="6s",
                  heartbeat="1s")
        for k in range(3)
    ]
    for s in schedulers:
        async def report(ctx: JobContext) -> None:
            starts.append((ctx.slot, ctx.attempt, ctx.instance_id))
            await ctx.sleep(30)

        s.every("report", "1h", report, catch_up=0)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        trigger = await schedulers[0].trigger("report")
        await asyncio.sleep(0.5)
        assert [(slot, attempt) for slot, attempt, _ in starts] == [(trigger, 1)]
        winner = next(s for s in schedulers if s.instance_id == starts[0][2])
        await crash(winner)
        await asyncio.sleep(6 + 1 + 1)  # the lease, then a heartbeat's poll, and room for the claim
        assert [(slot, attempt) for slot, attempt, _ in starts] == [(trigger, 1), (trigger, 2)]
        assert starts[1][2] != winner.instance_id
        for s in schedulers:
            if s is not winner:
                await s.stop()

    clock.run(main())


def test_controls_refuse_a_job_the_namespace_does_not_know_unless_forced(clock: VirtualClock) -> None:
    r = Replicas(clock, n=1)

    async def main() -> None:
        await r.schedulers[0].start()
        await asyncio.sleep(0.1)  # it has published "tick"
        admin = r.admin()
        for verb in ("pause", "resume", "trigger"):
            with pytest.raises(UnknownJob, match=r"no job 'tikc' in namespace 'anarchon' \(known: tick\)"):
                await getattr(admin, verb)("tikc")
        assert await MemoryBackend(r.store).controls("anarchon") == {}, "nothing stored for a typo"
        await admin.pause("tick")  # known: registered by a live replica
        await admin.pause("later", force=True)  # not deployed yet
        assert sorted(await MemoryBackend(r.store).controls("anarchon")) == ["later", "tick"]
        lone = Scheduler(MemoryBackend(MemoryStore(clock)), clock=clock)
        lone.every("own", "1m", lambda: None)
        await lone.pause("own")  # its own job, registered here though never published
        await r.schedulers[0].stop()

    clock.run(main())


def test_forget_is_refused_while_a_replica_registers_the_job(clock: VirtualClock) -> None:
    r = Replicas(clock, n=1)

    async def main() -> None:
        await r.schedulers[0].start()
        await asyncio.sleep(11)  # one slot of "tick" ran: a record and a history
        async with Inspector(MemoryBackend(r.store)) as store:
            with pytest.raises(JobRegistered, match=r"cannot forget 'tick' .* register it \(i0\)"):
                await store.forget("tick")
            assert (await store.overview()).job("tick") is not None
            await r.schedulers[0].stop()
            assert await store.forget("tick", force=True)
            assert (await store.overview()).jobs == ()
            assert not await store.forget("tick", force=True), "nothing left to forget"
            assert await store.namespaces() == {}

    clock.run(main())
