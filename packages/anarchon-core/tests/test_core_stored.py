"""Schedules as data, in virtual time: tasks in code, schedules in the store, each slot run once."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from anarchon import (
    At,
    ConfigError,
    Cron,
    Every,
    JobContext,
    JobStatus,
    MemoryBackend,
    MemoryClaimBackend,
    MemoryStore,
    NewSchedule,
    ScheduleConflict,
    ScheduleError,
    ScheduleNotFound,
    Scheduler,
    Schedules,
    to_ms,
)
from anarchon._sweeper import shares
from anarchon.backends import SCHEDULE_PARTITIONS
from anarchon.testing import FaultyBackend, VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


class Replicas:
    """Schedulers over one in-memory store, each with the task `report` unless told otherwise."""

    def __init__(self, clock: VirtualClock, n: int = 3, *, without_task: int = 0,
                 notify: bool = True, faulty: bool = False) -> None:
        self.clock = clock
        self.store = MemoryStore(clock)
        self.runs: list[tuple[str, int, int, str, dict[str, Any]]] = []
        """(schedule id, slot, attempt, instance, args) of every run."""
        self.schedulers: list[Scheduler[Any]] = []
        for k in range(n):
            backend = MemoryBackend(self.store, notify=notify)
            s: Scheduler[Any] = Scheduler(FaultyBackend(backend) if faulty else backend, instance_id=f"i{k}",
                                          clock=clock, lease="6s", heartbeat="1s")
            if k >= without_task:
                @s.task("report")
                async def report(ctx: JobContext, **args: Any) -> None:
                    self.runs.append((ctx.name, ctx.slot, ctx.attempt, ctx.instance_id, args))
                    if "sleep" in args:  # a long run
                        await asyncio.sleep(args["sleep"])
            else:  # an older version of the service: it has other tasks, not this one
                @s.task("cleanup")
                async def cleanup(ctx: JobContext) -> None: ...
            self.schedulers.append(s)
        self.admin = Schedules(MemoryBackend(self.store), namespace="anarchon", clock=clock)

    async def start(self) -> None:
        for s in self.schedulers:
            await s.start()

    async def stop(self) -> None:
        for s in self.schedulers:
            await s.stop()

    def due_reads(self) -> list[tuple[str, int, int, tuple[int, ...] | None]]:
        """From now on, every replica's reads of the due index: (instance, clock ms, until, partitions)."""
        reads: list[tuple[str, int, int, tuple[int, ...] | None]] = []
        for s in self.schedulers:
            read = s.backend.due_schedules

            async def due(namespace: str, *, until: int, read: Any = read, me: str = s.instance_id,
                          **kw: Any) -> Any:
                parts = kw.get("partitions")
                reads.append((me, self.clock.now_ms(), until, None if parts is None else tuple(parts)))
                return await read(namespace, until=until, **kw)

            s.backend.due_schedules = due
        return reads

    def starts(self) -> list[tuple[str, int, int]]:
        """From now on, every start on any replica: (schedule id, slot, the clock's ms)."""
        began: list[tuple[str, int, int]] = []
        for s in self.schedulers:
            s.on("started", lambda e: began.append((e.job, e.slot, self.clock.now_ms())))
        return began

    def slots(self, schedule_id: str) -> list[int]:
        return sorted(slot for i, slot, _, _, _ in self.runs if i == schedule_id)

    def doubles(self) -> dict[tuple[str, int, int], int]:
        counts = Counter((i, slot, attempt) for i, slot, attempt, _, _ in self.runs)
        return {k: v for k, v in counts.items() if v > 1}


def test_a_schedule_added_from_a_process_with_no_tasks_runs_once_per_slot(clock: VirtualClock) -> None:
    r = Replicas(clock)

    async def main() -> None:
        await r.start()
        added = await r.admin.add("cust-42", "report", every="10s", args={"customer": 42})
        assert (added.version, added.task, added.kind, added.args) == (1, "report", "every", {"customer": 42})
        await asyncio.sleep(35)
        await r.stop()

    clock.run(main())
    assert r.slots("cust-42") == [T0 + 10_000, T0 + 20_000, T0 + 30_000]
    assert not r.doubles()
    assert all(args == {"customer": 42} for *_, args in r.runs)
    assert len({inst for _, _, _, inst, _ in r.runs}) >= 1


def test_add_many_writes_a_batch_a_call_and_replicas_run_each_once_per_slot(clock: VirtualClock) -> None:
    r = Replicas(clock)
    ids = [f"cust-{n:02d}" for n in range(40)]

    async def main() -> None:
        await r.start()
        taken = await r.admin.add(ids[5], "report", every="1h")
        calls = r.store.calls
        answers = await r.admin.add_many(
            [NewSchedule(i, "report", Every.parse("10s"), args={"n": n}) for n, i in enumerate(ids)],
            batch=16)
        # Three batches of at most 16 (and one read of the catalogue): not one call per schedule.
        assert r.store.calls - calls <= 4, r.store.calls - calls
        assert [a.schedule.id if a.schedule else None for a in answers] == ids
        assert [a.added for a in answers] == [i != ids[5] for i in ids]
        assert answers[5].schedule is not None and answers[5].schedule.version == taken.version
        assert answers[5].schedule == await r.admin.get(ids[5])
        versions = [a.schedule.version for a in answers if a.added and a.schedule]
        assert versions == sorted(versions) and len(set(versions)) == len(versions) > 0
        assert answers[7].schedule is not None and answers[7].schedule.args == {"n": 7}
        await asyncio.sleep(25)
        await r.stop()

    clock.run(main())
    for i in ids:
        assert r.slots(i) == ([] if i == ids[5] else [T0 + 10_000, T0 + 20_000]), i
    assert not r.doubles()


def test_add_many_with_replace_upserts_each(clock: VirtualClock) -> None:
    admin = Schedules(MemoryBackend(clock=clock), clock=clock)

    async def main() -> None:
        old = await admin.add("a", "report", every="1h", args={"v": 1})
        answers = await admin.add_many([NewSchedule("a", "report", Cron("0 9 * * *", "Europe/Athens"),
                                                    options={"timeout": "5s"}),
                                        NewSchedule("b", "report", At.parse(START + timedelta(days=1)))],
                                       replace=True)
        assert [a.added for a in answers] == [True, True]
        a = await admin.get("a")
        assert a is not None and a.kind == "cron" and a.args == {} and a.options == {"timeout": "5000ms"}
        assert a.version > old.version and a.created_at == old.created_at
        assert answers[0].schedule == a

    clock.run(main())


@pytest.mark.parametrize(("items", "text"), [
    ([NewSchedule("a", "report", Every.parse("1h")), NewSchedule("a", "report", Every.parse("2h"))],
     "comes twice"),
    ([NewSchedule("a", "report", Every.parse("1h")), NewSchedule("b", "report", At(T0 - 60_000))],
     "in the past"),
    ([NewSchedule("a", "report", Every.parse("1h")), NewSchedule("b", "report", Every.parse("1h"),
                                                                  args={"x": object()})],
     "invalid args"),
    ([NewSchedule("a", "report", Every.parse("1h")), ("b", "report", "1h")], "pass NewSchedule values"),
    ([NewSchedule("a", "report", Every.parse("1h")), NewSchedule("b", "report", Every.parse("1h"),
                                                                  options={"overlap": "sometimes"})],  # type: ignore[arg-type]
     "sometimes"),
])
def test_add_many_checks_every_schedule_before_it_writes_any(
    clock: VirtualClock, items: list[Any], text: str
) -> None:
    admin = Schedules(MemoryBackend(clock=clock), clock=clock)

    async def main() -> None:
        with pytest.raises((ScheduleError, ConfigError, ValueError, TypeError)) as info:
            await admin.add_many(items)
        assert text in str(info.value), str(info.value)
        assert (await admin.list()).items == []

    clock.run(main())


def test_changing_the_interval_moves_the_next_slot_and_no_slot_runs_twice(clock: VirtualClock) -> None:
    r = Replicas(clock)

    async def main() -> None:
        await r.start()
        s = await r.admin.add("s", "report", every="10s")
        await asyncio.sleep(21)  # +10 and +20 ran
        await r.admin.update("s", version=s.version, every="15s")
        await asyncio.sleep(40)  # +30, +45, +60 on the new grid
        await r.stop()

    clock.run(main())
    assert r.slots("s") == [T0 + 10_000, T0 + 20_000, T0 + 30_000, T0 + 45_000, T0 + 60_000]
    assert not r.doubles()


def test_removing_a_schedule_stops_it_within_a_heartbeat(clock: VirtualClock) -> None:
    r = Replicas(clock, notify=False)

    async def main() -> None:
        await r.start()
        await r.admin.add("s", "report", every="2s")
        await asyncio.sleep(6.5)  # +2, +4, +6
        await r.admin.remove("s")
        await asyncio.sleep(10)
        await r.stop()

    clock.run(main())
    slots = r.slots("s")
    assert slots[:3] == [T0 + 2000, T0 + 4000, T0 + 6000]
    assert all(slot <= T0 + 6500 + 1000 for slot in slots), slots  # at most one heartbeat after


def test_a_replica_without_the_task_never_claims_it_and_says_so_once(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    r = Replicas(clock, without_task=1)
    claims: list[str] = []
    backend = r.schedulers[0].backend
    original = backend.claim_many

    async def spy(requests: Any) -> Any:
        claims.extend(req.job for req in requests)
        return await original(requests)

    backend.claim_many = spy

    async def main() -> None:
        await r.start()
        await r.admin.add("a", "report", every="5s")
        await r.admin.add("b", "report", every="5s")
        await asyncio.sleep(21)
        await r.stop()

    with caplog.at_level(logging.WARNING, logger="anarchon"):
        clock.run(main())
    assert "a" not in claims and "b" not in claims
    assert {inst for _, _, _, inst, _ in r.runs} <= {"i1", "i2"} and r.slots("a")
    said = [m for m in caplog.messages if "task 'report' is not registered on this replica" in m]
    assert len(said) == 1, said


def test_a_killed_runner_is_taken_over_as_attempt_2(clock: VirtualClock) -> None:
    from anarchon.testing import FaultyBackend, crash

    store = MemoryStore(clock)
    starts: list[tuple[int, int, str]] = []
    schedulers = []
    for k in range(2):
        s = Scheduler(FaultyBackend(MemoryBackend(store)), instance_id=f"i{k}", clock=clock, lease="6s",
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
        await asyncio.sleep(61)
        winner = next(s for s in schedulers if s.active_runs)
        await crash(winner)
        await asyncio.sleep(10)
        for s in schedulers:
            if s is not winner:
                await s.stop()

    clock.run(main())
    assert [(a, i) for _, a, i in starts][:1][0][0] == 1
    assert [a for _, a, _ in starts] == [1, 2] and starts[0][2] != starts[1][2]


def test_add_is_refused_for_a_taken_id_and_update_compares_the_version(clock: VirtualClock) -> None:
    admin = Schedules(MemoryBackend(clock=clock), clock=clock)

    async def main() -> None:
        first = await admin.add("x", "report", cron="0 9 * * *", timezone="Europe/Athens")
        with pytest.raises(ScheduleConflict, match="exists already") as info:
            await admin.add("x", "report", every="1h")
        assert info.value.current is not None and info.value.current.version == 1
        replaced = await admin.add("x", "other", every="1h", replace=True)
        assert (replaced.version, replaced.task, replaced.kind) == (2, "other", "every")
        assert replaced.created_at == first.created_at
        with pytest.raises(ScheduleConflict, match="at version 2, not 1"):
            await admin.update("x", version=1, every="2h")
        updated = await admin.update("x", version=2, args={"a": [1, 2]}, timeout="30s")
        assert (updated.version, updated.args, updated.options) == (3, {"a": [1, 2]}, {"timeout": "30000ms"})
        assert updated.kind == "every" and updated.description == "every 1h"
        removed = await admin.remove("x", version=3)
        assert removed.id == "x" and await admin.get("x") is None
        with pytest.raises(ScheduleNotFound):
            await admin.remove("x")

    clock.run(main())


def test_list_pages_by_id_with_filters(clock: VirtualClock) -> None:
    admin = Schedules(MemoryBackend(clock=clock), clock=clock)

    async def main() -> None:
        for i in range(7):
            await admin.add(f"cust-{i}", "report" if i % 2 else "sync", every="1h")
        await admin.add("other", "report", every="1h")
        page = await admin.list(prefix="cust-", limit=3)
        assert [s.id for s in page.items] == ["cust-0", "cust-1", "cust-2"] and page.cursor == "cust-2"
        rest = await admin.list(prefix="cust-", after=page.cursor or "", limit=10)
        assert [s.id for s in rest.items] == ["cust-3", "cust-4", "cust-5", "cust-6"] and rest.cursor is None
        tasks = await admin.list(task="report", limit=100)
        assert [s.id for s in tasks.items] == ["cust-1", "cust-3", "cust-5", "other"]

    clock.run(main())


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
    ({"every": "10 parsecs"}, "invalid interval '10 parsecs'"),
    ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "Mars/Olympus"),
    ({"every": "1h", "cron": "0 9 * * *"}, "exactly one of every, cron or at, not every and cron"),
    ({}, "exactly one of every, cron or at, not none"),
    ({"every": "1h", "args": {"when": datetime(2026, 1, 1)}}, "use JSON values only"),
    ({"every": "1h", "args": {"blob": "x" * 70_000}}, "more than 65536"),
    ({"every": "1h", "args": [1, 2]}, "pass a dict with string keys"),
    ({"at": datetime(2020, 1, 1, tzinfo=UTC)}, "is in the past: it would never run"),
    ({"every": "1h", "overlap": "sometimes"}, "invalid overlap 'sometimes'"),
    ({"every": "1h", "colour": "red"}, "unknown option 'colour'"),
])
def test_bad_input_gets_one_clear_error_and_nothing_is_written(
    clock: VirtualClock, kwargs: dict[str, Any], text: str
) -> None:
    backend = MemoryBackend(clock=clock)
    admin = Schedules(backend, clock=clock)

    async def main() -> None:
        with pytest.raises((ScheduleError, ConfigError, ValueError, TypeError)) as info:
            await admin.add("s", "report", **kwargs)
        assert text in str(info.value), str(info.value)
        assert await admin.get("s") is None

    clock.run(main())


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\x1fb", "tab\there"])
def test_ids_the_stores_cannot_key_are_refused(clock: VirtualClock, bad: str) -> None:
    admin = Schedules(MemoryBackend(clock=clock), clock=clock)
    with pytest.raises(ScheduleError, match="invalid schedule id"):
        clock.run(admin.add(bad, "report", every="1h"))


def test_an_unknown_task_is_accepted_with_a_warning_or_refused_when_strict(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    admin = Schedules(MemoryBackend(clock=clock), clock=clock)

    async def main() -> None:
        await admin.add("s", "nosuch", every="1h")
        with pytest.raises(ScheduleError, match="has registered task 'nosuch'"):
            await admin.add("t", "nosuch", every="1h", strict=True)

    with caplog.at_level(logging.WARNING, logger="anarchon"):
        clock.run(main())
    said = "no replica in namespace 'anarchon' has registered task 'nosuch'"
    assert any(said in m for m in caplog.messages)


def test_a_stored_schedule_cannot_take_a_code_jobs_name(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    s = Scheduler(MemoryBackend(store), clock=clock, instance_id="i0")
    s.every("nightly", "1h", lambda: None)

    async def main() -> None:
        async with s:
            await asyncio.sleep(1)  # the catalogue is published
            with pytest.raises(ConfigError, match="'nightly' is a code job"):
                await Schedules(MemoryBackend(store), clock=clock).add("nightly", "report", every="1h")

    clock.run(main())


def test_a_claim_only_backend_refuses_schedules_as_data() -> None:
    scheduler = Scheduler(MemoryClaimBackend())
    with pytest.raises(ConfigError, match="'schedules' capability"):
        scheduler.task("report")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'schedules' capability"):
        Schedules(MemoryClaimBackend())  # type: ignore[arg-type]


def test_a_paused_schedule_is_skipped_and_resumes_from_its_next_slot(clock: VirtualClock) -> None:
    r = Replicas(clock, n=2)

    async def main() -> None:
        await r.start()
        await r.admin.add("s", "report", every="10s")
        await asyncio.sleep(15)  # +10 ran
        await r.admin.pause("s")
        await asyncio.sleep(20)  # +20, +30 skipped
        await r.admin.resume("s")
        await asyncio.sleep(20)  # +40, +50
        await r.stop()

    clock.run(main())
    assert r.slots("s") == [T0 + 10_000, T0 + 40_000, T0 + 50_000]


def test_a_trigger_runs_a_schedule_that_is_not_due_soon(clock: VirtualClock) -> None:
    r = Replicas(clock, n=2)

    async def main() -> None:
        await r.start()
        await r.admin.add("daily", "report", cron="0 3 * * *")
        await asyncio.sleep(1)
        await r.schedulers[0].trigger("daily", force=True)
        await asyncio.sleep(5)
        await r.stop()

    clock.run(main())
    assert len([run for run in r.runs if run[0] == "daily"]) == 1


def test_a_one_off_schedule_runs_once_and_leaves_the_due_index(clock: VirtualClock) -> None:
    r = Replicas(clock, n=2)

    async def main() -> None:
        await r.start()
        await r.admin.add("once", "report", at=START + timedelta(seconds=5))
        await asyncio.sleep(20)
        got = await r.admin.get("once")
        assert got is not None and got.next_due is None
        state = await r.schedulers[0].backend.inspect("anarchon", "once")
        assert state is not None and state.status is JobStatus.DONE
        await r.stop()

    clock.run(main())
    assert r.slots("once") == [T0 + 5000]


def test_a_replica_plans_only_the_schedules_due_soon(clock: VirtualClock) -> None:
    r = Replicas(clock, n=1)

    async def main() -> None:
        for i in range(200):
            await r.admin.add(f"s{i}", "report", every="1h", offset=f"{(i + 1) * 10}s")
        await r.start()
        sweeper = r.schedulers[0]._engine.sweeper  # type: ignore[union-attr]
        assert sweeper is not None
        await asyncio.sleep(1)
        assert sweeper.planned <= 1, sweeper.planned  # due within the window: s0 at +10 s at most
        await asyncio.sleep(100)
        assert sweeper.planned <= 2, sweeper.planned
        await r.stop()

    clock.run(main())
    assert r.slots("s0") == [T0 + 10_000] and len(r.slots("s8")) == 1


def test_the_overview_shows_stored_schedules_and_those_no_live_replica_can_run(clock: VirtualClock) -> None:
    from anarchon.inspect import Inspector

    r = Replicas(clock, n=1)

    async def main() -> None:
        await r.start()
        await r.admin.add("cust-1", "report", every="1h", args={"c": 1})
        await r.admin.add("cust-2", "export", every="1h")  # no replica has "export"
        await asyncio.sleep(2)  # the catalogue (tasks included) is published
        async with Inspector(MemoryBackend(r.store), close=False) as store:
            overview = await store.overview()
            await store.pause("cust-2")  # a stored schedule is a known job, though it never ran
        await r.stop()
        assert overview.tasks == {"report": ("i0",)}
        views = {j.name: j for j in overview.jobs}
        assert views["cust-1"].origin == "schedule" and views["cust-1"].task_live
        hourly = 3_600_000
        assert views["cust-1"].schedule == "every 1h"
        assert views["cust-1"].next_slot == (overview.now // hourly + 1) * hourly
        assert [j.name for j in overview.orphans] == ["cust-2"]
        assert "report" not in views, "a task is not a job"

    clock.run(main())


def test_replicas_share_the_due_schedules_so_each_slot_is_claimed_once(clock: VirtualClock) -> None:
    r = Replicas(clock)
    claims: Counter[tuple[str, int]] = Counter()
    for s in r.schedulers:
        s.on("claim", lambda e: claims.update([(e.job, e.slot)]))

    async def main() -> None:
        await r.start()
        await r.admin.add_many(NewSchedule(f"cust-{n:03d}", "report", Every.parse("10s")) for n in range(60))
        await asyncio.sleep(65)
        await r.stop()

    clock.run(main())
    assert not r.doubles()
    settled = list(range(T0 + 20_000, T0 + 70_000, 10_000))  # (once the replicas know each other)
    for n in range(60):
        assert [s for s in r.slots(f"cust-{n:03d}") if s in settled] == settled, n
    late = {(job, slot): n for (job, slot), n in claims.items() if slot in settled}
    assert len(late) == 60 * len(settled) and set(late.values()) == {1}, Counter(late.values())
    # Each replica ran a share.
    shares = Counter(inst for _, slot, _, inst, _ in r.runs if slot in settled)
    assert len(shares) == 3 and min(shares.values()) >= 60 * len(settled) // 6, shares


def test_a_dead_replicas_share_runs_late_by_less_than_a_heartbeat_then_on_time(clock: VirtualClock) -> None:
    from anarchon.testing import crash

    r = Replicas(clock, faulty=True)
    began = r.starts()

    async def main() -> None:
        await r.start()
        await r.admin.add_many(NewSchedule(f"cust-{n:03d}", "report", Every.parse("10s")) for n in range(60))
        await asyncio.sleep(25)
        await crash(r.schedulers[0])
        await asyncio.sleep(40)
        for s in r.schedulers[1:]:
            await s.stop()

    clock.run(main())
    assert not r.doubles()
    for n in range(60):
        slots = r.slots(f"cust-{n:03d}")
        expected = [T0 + 30_000 + 10_000 * k for k in range(4)]
        assert [s for s in slots if s >= T0 + 30_000] == expected, (n, slots)
    lateness = [at - slot for _, slot, at in began if slot >= T0 + 30_000]
    # The dead replica's share: read by the others once no win of its was heard in two backup_ms (a
    # third of the 1 s heartbeat), and planned when overdue by backup_ms, at a backup read (one every
    # backup_ms): within a heartbeat.
    backup_ms = 333
    assert max(lateness) <= 3 * backup_ms + 10, max(lateness)
    assert max(lateness) >= backup_ms, "the dead replica's share was not its own (no lateness seen)"
    # Once a backup read found its share overdue, it is presumed gone and its partitions are shared out:
    # from the next slot on they are read in the due window, and start on time.
    after = [at - slot for _, slot, at in began if slot >= T0 + 40_000]
    assert len(after) == 60 * 3 and max(after) == 0, max(after)


def test_a_replica_back_from_a_freeze_gets_its_partitions_back(clock: VirtualClock) -> None:
    r = Replicas(clock, faulty=True)
    claims: Counter[tuple[str, int]] = Counter()
    for s in r.schedulers:
        s.on("claim", lambda e: claims.update([(e.job, e.slot)]))
    reads = r.due_reads()

    async def main() -> None:
        await r.start()
        await r.admin.add_many(NewSchedule(f"cust-{n:03d}", "report", Every.parse("10s")) for n in range(60))
        await asyncio.sleep(25)
        r.schedulers[0].backend.freeze(8)  # presumed gone by the others at the slot of +30 s
        await asyncio.sleep(60)
        await r.stop()

    clock.run(main())
    assert not r.doubles()
    for n in range(60):
        slots = r.slots(f"cust-{n:03d}")
        assert [s for s in slots if s >= T0 + 40_000] == list(range(T0 + 40_000, T0 + 90_000, 10_000)), n
    # Back from the freeze it loses the races for its partitions (the others claim them too), so no win
    # of its is heard; its tasks published again (every minute) give them back, read with the members.
    late = [n for (_, slot), n in claims.items() if slot >= T0 + 70_000]
    assert late and set(late) == {1}, Counter(late)
    window = [(me, parts) for me, at, until, parts in reads if at >= T0 + 70_000 and until > at]
    owned = {me: set(parts or ()) for me, parts in window}
    assert sorted(owned) == ["i0", "i1", "i2"] and sum(len(p) for p in owned.values()) == SCHEDULE_PARTITIONS


def test_a_replica_running_a_long_slot_is_not_presumed_gone(clock: VirtualClock) -> None:
    # The owner of `long`'s partition wins it at +10 s and runs it for 40 s, winning nothing else: the
    # others' backup reads find the slot overdue, but not since after its last win, so they leave it be.
    r = Replicas(clock)
    reads = r.due_reads()

    async def main() -> None:
        await r.start()
        await r.admin.add("long", "report", every="1h", offset="10s", args={"sleep": 40})
        await asyncio.sleep(45)
        await r.stop()

    clock.run(main())
    assert r.slots("long") == [T0 + 10_000] and not r.doubles()
    window: dict[str, set[int]] = {}
    for me, at, until, parts in reads:
        if at >= T0 + 12_000 and until > at:
            window.setdefault(me, set()).update(parts or range(SCHEDULE_PARTITIONS))
    assert sum(len(p) for p in window.values()) == SCHEDULE_PARTITIONS, {m: len(p) for m, p in window.items()}


def test_each_replica_reads_the_due_window_of_its_own_partitions_only(clock: VirtualClock) -> None:
    r = Replicas(clock)
    reads = r.due_reads()

    async def main() -> None:
        await r.start()
        await r.admin.add_many(NewSchedule(f"cust-{n:03d}", "report", Every.parse("10s")) for n in range(60))
        await asyncio.sleep(30)
        await r.stop()

    clock.run(main())
    window = {me: parts for me, at, until, parts in reads if at >= T0 + 10_000 and until > at}
    assert set(window) == {"i0", "i1", "i2"} and all(p is not None for p in window.values()), window
    owned = [set(p or ()) for p in window.values()]
    assert sum(len(o) for o in owned) == SCHEDULE_PARTITIONS and set().union(*owned) == set(
        range(SCHEDULE_PARTITIONS)), "the window reads split the partitions between the replicas"
    assert min(len(o) for o in owned) >= SCHEDULE_PARTITIONS // 6, [len(o) for o in owned]
    # The others' partitions are read only for what is overdue.
    for me, at, until, parts in reads:
        if at >= T0 + 10_000 and parts is not None and set(parts) & set(window[me] or ()) == set():
            assert until <= at - 333, (me, at, until)


def test_the_partitions_of_a_replica_whose_wins_are_heard_are_not_read_by_the_others(
        clock: VirtualClock) -> None:
    # 300 schedules due every second, spread over it: each replica wins some every few milliseconds,
    # so none is silent, and none reads the others' partitions, however late its runs end.
    r = Replicas(clock)
    reads = r.due_reads()

    async def main() -> None:
        await r.start()
        await r.admin.add_many(NewSchedule(f"cust-{n:03d}", "report", Every.parse("1s", offset=f"{n * 3}ms"))
                               for n in range(300))
        await asyncio.sleep(20)
        await r.stop()

    clock.run(main())
    assert not r.doubles()
    backups = [(me, at) for me, at, until, _ in reads if at >= T0 + 10_000 and until < at]
    assert not backups, backups[:5]
    assert len(r.slots("cust-007")) >= 18


def test_a_replica_that_joins_or_leaves_moves_only_its_own_partitions() -> None:
    three = {"report": ("i0", "i1", "i2")}
    four = {"report": ("i0", "i1", "i2", "i3")}
    for me in ("i0", "i1", "i2"):
        [before] = shares(three, me)
        [after] = shares(four, me)
        assert before.mine is not None and after.mine is not None
        assert set(after.mine) <= set(before.mine), (me, before.mine, after.mine)
        others = [p for _, parts in before.others for p in parts]
        assert sorted([*before.mine, *others]) == list(range(SCHEDULE_PARTITIONS)), "each partition once"
        assert {member for member, _ in before.others} == {"i0", "i1", "i2"} - {me}
    assert [s.mine for s in shares({"report": ("i0",)}, "i0")] == [None], "alone: every partition"
    # Tasks that different replicas have are read apart, each split among its own replicas.
    split = shares({"a": ("i0", "i1"), "b": ("i0", "i1"), "c": ("i0", "i2")}, "i0")
    assert sorted(s.tasks for s in split) == [("a", "b"), ("c",)]


def test_a_stored_schedule_is_claimed_at_its_slot_unless_it_sets_a_jitter(clock: VirtualClock) -> None:
    r = Replicas(clock)
    began: dict[str, list[int]] = {}
    for s in r.schedulers:
        s.on("started", lambda e: began.setdefault(e.job, []).append(clock.now_ms() - e.slot))

    async def main() -> None:
        await r.start()
        await r.admin.add_many(NewSchedule(f"cust-{n:03d}", "report", Every.parse("10s")) for n in range(30))
        await r.admin.add("spread", "report", every="10s", jitter="2s")
        await asyncio.sleep(65)
        await r.stop()

    clock.run(main())
    plain = [late for job, lates in began.items() if job != "spread" for late in lates]
    assert len(plain) >= 30 * 5 and set(plain) == {0}, sorted(set(plain))
    assert 0 < max(began["spread"]) <= 2000, began["spread"]


@pytest.mark.parametrize("change", ["move", "remove", "pause", "args"])
def test_a_write_to_a_schedule_with_a_claim_queued_is_in_force_at_that_slot(
        clock: VirtualClock, change: str) -> None:
    # The write lands once a replica has queued the claim of slot +20 s, and is pushed: the slot runs as
    # the write says (not at all, or with the new arguments), though a schedule moved, removed or
    # paused is not in the window the next sweep reads.
    r = Replicas(clock)

    def queued() -> bool:
        plans = [s._engine.planner.plan_of("s") for s in r.schedulers]  # type: ignore[union-attr]
        return any(p is not None and p.next_due is not None for p in plans)

    async def main() -> None:
        await r.start()
        s = await r.admin.add("s", "report", every="10s", args={"v": 1})
        await asyncio.sleep(15)
        for _ in range(100):  # up to 5 s
            if queued():
                break
            await asyncio.sleep(0.05)
        assert queued() and clock.now_ms() < T0 + 19_500
        if change == "move":
            await r.admin.update("s", version=s.version, every="1h")
        elif change == "remove":
            await r.admin.remove("s", version=s.version)
        elif change == "pause":
            await r.admin.pause("s")
        else:
            await r.admin.update("s", version=s.version, args={"v": 2})
        await asyncio.sleep(15)
        await r.stop()

    clock.run(main())
    ran = {slot: args["v"] for i, slot, _, _, args in r.runs if i == "s"}
    after = {T0 + 20_000: 2, T0 + 30_000: 2} if change == "args" else {}
    assert ran == {T0 + 10_000: 1, **after}, ran


def test_a_write_rereads_none_of_the_planned_schedules_it_did_not_touch(clock: VirtualClock) -> None:
    # No pushes: every sweep after a write finds the counter moved. The planned schedules come back in
    # the window read, compared by version there; none is read again by id.
    r = Replicas(clock, notify=False)
    reread: list[str] = []
    for s in r.schedulers:
        get = s.backend.get_schedules

        async def by_id(namespace: str, ids: Any, get: Any = get) -> Any:
            reread.extend(ids)
            return await get(namespace, ids)

        s.backend.get_schedules = by_id

    async def main() -> None:
        await r.start()
        await r.admin.add_many(NewSchedule(f"cust-{n:03d}", "report", Every.parse("5s", f"{n * 50}ms"))
                               for n in range(60))
        await asyncio.sleep(5)  # the replicas have read which of them has the task, and share the window
        reread.clear()
        for k in range(40):  # a write every half second, to schedules due tomorrow
            await r.admin.add(f"later-{k}", "report", every="1d")
            await asyncio.sleep(0.5)
        await r.stop()

    clock.run(main())
    assert len(r.runs) >= 60 * 3 and not r.doubles()
    assert reread == [], reread[:10]


def test_the_partitions_of_a_replica_presumed_gone_are_read_at_once(clock: VirtualClock) -> None:
    from anarchon.testing import crash

    # 1,000 hourly schedules, one due every 50 ms. Once the dead replica is presumed gone, its partitions
    # are no other replica's to read for what is overdue: they are read at once, not at the next sweep.
    r = Replicas(clock, faulty=True)
    began = r.starts()

    async def main() -> None:
        await r.start()
        await r.admin.add_many(NewSchedule(f"cust-{n:03d}", "report", Every.parse("1h", offset=f"{n * 50}ms"))
                               for n in range(1000))
        await asyncio.sleep(15)
        await crash(r.schedulers[0])
        await asyncio.sleep(20)
        for s in r.schedulers[1:]:
            await s.stop()

    clock.run(main())
    assert not r.doubles()
    started = sorted(slot for _, slot, _ in began if T0 + 1_000 <= slot < T0 + 35_000)
    assert started == list(range(T0 + 1_000, T0 + 35_000, 50)), "every slot started once"
    late = [at - slot for _, slot, at in began if slot >= T0 + 16_000]
    assert max(late) <= 300, sorted(late)[-5:]
