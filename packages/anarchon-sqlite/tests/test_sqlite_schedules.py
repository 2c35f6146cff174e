"""Stored schedules in a SQLite file: the tables added to a file of an older release, and the due
index that the sweep's read goes through. (Every rule of the protocol: the conformance kit's tier.)"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from anarchon import ClaimRequest, ReleaseOutcome
from anarchon.backends import JobControl, RunRecord, ScheduleWrite
from anarchon_sqlite import SqliteBackend
from anarchon_sqlite._backend import prefix_end

SCHEDULE_TABLES = {"anarchon_jobs_schedules", "anarchon_jobs_sched_version", "anarchon_jobs_sched_due",
                   "anarchon_jobs_sched_task_due", "anarchon_jobs_sched_task"}


def _objects(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master")}


def _write(schedule_id: str, next_due: int | None = 1_000, task: str = "report") -> ScheduleWrite:
    return ScheduleWrite(schedule_id, task, '{"every": 60000, "offset": 0}', "{}", "{}", False, next_due)


async def test_a_file_of_the_previous_release_gains_the_schedules_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    slot = time.time_ns() // 1_000_000 - 10_000
    old = SqliteBackend(path)
    await old.open()
    lease = (await old.claim(ClaimRequest("ns", "job", slot, "a"))).lease
    assert lease is not None and await old.release(lease, ReleaseOutcome.DONE)
    await old.set_control("ns", "job", paused=True)
    run = RunRecord("job", slot, 1, lease.token, "a", "done", slot, 5)
    await old.record_runs("ns", [run], 10)
    await old.close()
    # The file as the release before schedules left it: no schedules tables, no indexes of them.
    with sqlite3.connect(path) as conn:
        conn.execute('DROP TABLE "anarchon_jobs_schedules"')
        conn.execute('DROP TABLE "anarchon_jobs_sched_version"')
    assert not SCHEDULE_TABLES & _objects(path)

    upgraded = SqliteBackend(path)
    await upgraded.open()
    try:
        assert _objects(path) >= SCHEDULE_TABLES, "the first open by this release adds the schedules tables"
        state = await upgraded.inspect("ns", "job")
        assert state is not None and (state.slot, state.token) == (slot, lease.token), "records are kept"
        assert await upgraded.controls("ns") == {"job": JobControl(paused=True)}, "controls are kept"
        assert await upgraded.history("ns", "job", 10) == [run], "runs are kept"
        added = await upgraded.put_schedule("ns", _write("report-7"), expect="absent")
        assert added.written and added.record is not None
        assert await upgraded.schedules_version("ns") == added.record.version == 1
        assert [r.id for r in await upgraded.due_schedules("ns", until=1_000, limit=10)] == ["report-7"]
    finally:
        await upgraded.close()
    again = SqliteBackend(path)  # a second open finds everything in place and changes nothing
    await again.open()
    assert [r.id for r in await again.list_schedules("ns", limit=10)] == ["report-7"]
    await again.close()


async def test_the_due_read_and_the_task_list_go_through_their_indexes(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = SqliteBackend(path)
    await backend.open()
    try:
        for i in range(2_000):
            await backend.put_schedule(f"ns{i % 2}", _write(f"s{i}", None if i % 5 == 0 else 1_000 + i,
                                                            f"t{i % 7}"), expect="any")
    finally:
        await backend.close()
    with sqlite3.connect(path) as conn:
        conn.execute("ANALYZE")
        # The statements the backend sends.
        due = backend._sql_schedules_due  # pyright: ignore[reportPrivateUsage]
        listed = backend._sql_schedules_list  # pyright: ignore[reportPrivateUsage]
        cursor = "AND (next_due, id) > (?, ?)"
        plans = {
            "due": conn.execute("EXPLAIN QUERY PLAN " + due.format(task="", after=""),
                                ("ns1", 1_500, 100)).fetchall(),
            "due after": conn.execute("EXPLAIN QUERY PLAN " + due.format(task="", after=cursor),
                                      ("ns1", 1_500, 1_200, "s201", 100)).fetchall(),
            "due of a task": conn.execute(
                "EXPLAIN QUERY PLAN " + due.format(task="AND task = ?", after=cursor),
                ("ns1", "t3", 1_500, 1_200, "s201", 100)).fetchall(),
            "task": conn.execute("EXPLAIN QUERY PLAN " + listed + " AND task = ? ORDER BY id LIMIT ?",
                                 ("ns1", "", "t3", 100)).fetchall(),
        }
    for what, index in (("due", "anarchon_jobs_sched_due"), ("due after", "anarchon_jobs_sched_due"),
                        ("due of a task", "anarchon_jobs_sched_task_due"),
                        ("task", "anarchon_jobs_sched_task")):
        text = " / ".join(str(row[-1]) for row in plans[what])
        assert f"INDEX {index} (namespace=?" in text, f"the {what} read must search {index}: {text}"
        assert "TEMP B-TREE" not in text, f"the {what} read must come out of the index in order: {text}"


def test_a_prefix_is_a_range_in_code_point_order() -> None:
    ids = ["a", "a\U0010ffff", "a\U0010ffffz", "ab", "a\ud7ff", "a\ue000", "b", "", "\U0010ffff"]
    for prefix in ("a", "a\U0010ffff", "a\ud7ff", "\U0010ffff", "ab"):
        end = prefix_end(prefix)
        inside = [i for i in ids if i >= prefix and (end is None or i < end)]
        assert inside == [i for i in ids if i.startswith(prefix)], (prefix, end)
    assert prefix_end("") is None
    assert prefix_end("\U0010ffff") is None
    assert prefix_end("a\ud7ff") == "a\ue000"


async def test_an_expect_that_is_no_version_is_refused_before_the_store(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "jobs.db")
    await backend.open()
    try:
        for bad in ("abesnt", True, 1.0, None):
            with pytest.raises(TypeError, match=f"expect must be 'absent', 'any' or a version .*{bad!r}"):
                await backend.put_schedule("ns", _write("a"), expect=bad)  # type: ignore[arg-type]
        assert await backend.schedules_version("ns") == 0
    finally:
        await backend.close()
