"""Stored schedules in a SQLite file: the tables added to a file of an older release, and the due
index that the sweep's read goes through. (Every rule of the protocol: the conformance kit's tier.)"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anarchon import ClaimRequest, ReleaseOutcome
from anarchon.backends import JobControl, RunRecord, ScheduleWrite, schedule_partition
from anarchon_sqlite import LibsqlBackend, SqliteBackend
from anarchon_sqlite._backend import prefix_end

SCHEDULE_TABLES = {"anarchon_jobs_schedules", "anarchon_jobs_sched_version", "anarchon_jobs_sched_due",
                   "anarchon_jobs_sched_task_due", "anarchon_jobs_sched_task", "anarchon_jobs_sched_part_due",
                   "anarchon_jobs_sched_unparted"}


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
        arms = backend._sql_due_arms  # pyright: ignore[reportPrivateUsage]
        tasks_due = backend._sql_schedules_due_tasks  # pyright: ignore[reportPrivateUsage]
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
            # A range per (task, partition), and per task the rows of an older release (no partition).
            "due of partitions": conn.execute(
                "EXPLAIN QUERY PLAN " + arms([3, 40, None], True),
                ("ns1", "t3", 3, 1_500, 1_200, "s201", "ns1", "t3", 40, 1_500, 1_200, "s201",
                 "ns1", "t3", 1_500, 1_200, "s201", 100)).fetchall(),
            "tasks due": conn.execute(
                "EXPLAIN QUERY PLAN " + tasks_due, ("ns1",)).fetchall(),
            "no partition": conn.execute(
                'EXPLAIN QUERY PLAN SELECT namespace, id FROM "anarchon_jobs_schedules" '
                'WHERE "partition" IS NULL LIMIT ?', (100,)).fetchall(),
        }
        assert arms([3, None], False).count("UNION ALL") == 1
    for what, indexes in (("due", ["sched_due"]), ("due after", ["sched_due"]),
                          ("due of a task", ["sched_task_due"]), ("task", ["sched_task"]),
                          ("due of partitions", ["sched_part_due"]),
                          ("tasks due", ["sched_part_due", "sched_task_due"]),  # (either has them in order)
                          ("no partition", ["sched_unparted"])):
        text = " / ".join(str(row[-1]) for row in plans[what])
        searches = [str(row[-1]) for row in plans[what] if "USING" in str(row[-1])]
        seek = "" if what == "no partition" else " (namespace=?"  # (an index of the NULL rows only: all read)
        used = [any(f"INDEX anarchon_jobs_{i}{seek}" in s for i in indexes) for s in searches]
        assert searches and all(used), (
            f"the {what} read must search {' or '.join(indexes)} only: {text}")
        assert "TEMP B-TREE" not in text, f"the {what} read must come out of the index in order: {text}"
    assert sum("partition=?" in str(row[-1]) for row in plans["due of partitions"]) == 3, (
        "a range of the index per partition asked, and one for the rows without")


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


# The schedules table and its indexes as the release before partitions created them.
_PREVIOUS_SCHEDULES = (
    """CREATE TABLE "anarchon_jobs_schedules" (
        namespace TEXT NOT NULL, id TEXT NOT NULL, task TEXT NOT NULL, spec TEXT NOT NULL,
        args TEXT NOT NULL, options TEXT NOT NULL, paused INTEGER NOT NULL, next_due INTEGER,
        version INTEGER NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
        PRIMARY KEY (namespace, id)) WITHOUT ROWID""",
    'CREATE INDEX "anarchon_jobs_sched_due" ON "anarchon_jobs_schedules" (namespace, next_due, id) '
    "WHERE next_due IS NOT NULL",
    'CREATE INDEX "anarchon_jobs_sched_task_due" ON "anarchon_jobs_schedules" '
    "(namespace, task, next_due, id) WHERE next_due IS NOT NULL",
    'CREATE INDEX "anarchon_jobs_sched_task" ON "anarchon_jobs_schedules" (namespace, task, id)',
    """CREATE TABLE "anarchon_jobs_sched_version" (namespace TEXT NOT NULL PRIMARY KEY,
        version INTEGER NOT NULL) WITHOUT ROWID""",
)
# How the release before partitions writes a schedule: it does not name the partition.
_PREVIOUS_INSERT = ('INSERT INTO "anarchon_jobs_schedules" (namespace, id, task, spec, args, options, '
                    "paused, next_due, version, created_at, updated_at) "
                    "VALUES (?, ?, ?, '{}', '{}', '{}', 0, ?, 1, 0, 0)")


@contextlib.contextmanager
def _connection(driver: type[SqliteBackend], path: Path) -> Iterator[Any]:
    """Another connection to the file, in autocommit, through the driver's own library (two SQLite
    libraries in one process do not see each other's POSIX locks)."""
    if driver is LibsqlBackend:
        import libsql

        conn = libsql.connect(str(path), isolation_level=None)
    else:
        conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def _partitions_of(driver: type[SqliteBackend], path: Path) -> dict[str, int | None]:
    with _connection(driver, path) as conn:
        rows = conn.execute('SELECT id, "partition" FROM "anarchon_jobs_schedules"').fetchall()
        return {str(i): p for i, p in rows}


async def _due_ids(backend: SqliteBackend, partitions: list[int], tasks: list[str] | None = None,
                   limit: int = 1_000, until: int = 10_000) -> list[str]:
    """Every page of the due index of `partitions`, read `limit` at a time."""
    ids: list[str] = []
    after: tuple[int, str] | None = None
    while True:
        page = await backend.due_schedules("ns", until=until, tasks=tasks, partitions=partitions, after=after,
                                           limit=limit)
        ids += [r.id for r in page]
        if len(page) < limit:
            return ids
        assert page[-1].next_due is not None
        after = (page[-1].next_due, page[-1].id)


@pytest.mark.parametrize("driver", [SqliteBackend, LibsqlBackend])
async def test_a_schedules_table_of_the_previous_release_gains_its_partitions(
        tmp_path: Path, driver: type[SqliteBackend]) -> None:
    path = tmp_path / "jobs.db"
    rows = [("ns", f"s{i}", f"t{i % 3}", None if i % 10 == 0 else 1_000 + i % 700) for i in range(2_500)]
    with _connection(driver, path) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in _PREVIOUS_SCHEDULES:
            conn.execute(statement)
        conn.executemany(_PREVIOUS_INSERT, rows)
        conn.execute("COMMIT")
    due = sorted((d, i, t) for _ns, i, t, d in rows if d is not None)

    def expected(parts: list[int], tasks: list[str] | None = None, until: int = 10_000) -> list[str]:
        return [i for d, i, t in due if schedule_partition(i) in parts and d <= until
                and (tasks is None or t in tasks)]

    backend = driver(path)
    await backend.open()
    try:
        assert _partitions_of(driver, path) == {i: schedule_partition(i) for _ns, i, _t, _d in rows}, (
            "the first open by this release writes the partition of every row it finds (in chunks)")
        for parts, tasks in (([0], None), (list(range(0, 64, 3)), ["t1"]), ([5, 9, 63], ["t2", "t0"])):
            for limit in (7, 1_000):
                assert await _due_ids(backend, parts, tasks, limit) == expected(parts, tasks)
        # A replica of the previous release still writes, leaving the partition NULL: the due read by
        # partitions finds those rows too, and keeps those of its partitions, past pages of others.
        late = [("ns", f"late{i}", "t1", 900) for i in range(300)]
        with _connection(driver, path) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_PREVIOUS_INSERT, late)
            conn.execute("COMMIT")
        unparted = {i for i, p in _partitions_of(driver, path).items() if p is None}
        assert unparted == {i for _ns, i, _t, _d in late}
        due = sorted(due + [(d, i, t) for _ns, i, t, d in late])
        for parts, tasks, small in (([7], None, 3), ([7], ["t1"], 3), ([1, 2, 3], ["t1", "t2"], 3),
                                    (list(range(64)), None, 40)):
            for limit in (small, 1_000):
                got = await _due_ids(backend, parts, tasks, limit, until=1_100)
                assert got == expected(parts, tasks, 1_100), (parts, tasks, limit)
        assert [r.id for r in await backend.due_schedules("ns", until=900, limit=500)] == [
            i for d, i, _t in due if d <= 900], "without partitions, the due read is as it was"
        # This release's write of such a schedule gives it its partition.
        await backend.put_schedule("ns", _write("late0", 900, "t1"), expect="any")
        assert _partitions_of(driver, path)["late0"] == schedule_partition("late0")
    finally:
        await backend.close()
    again = driver(path)  # the next open gives the others theirs
    await again.open()
    try:
        assert _partitions_of(driver, path) == {i: schedule_partition(i) for _ns, i, _t, _d in rows + late}
        assert await _due_ids(again, [7], None, 3, until=1_100) == expected([7], None, 1_100)
    finally:
        await again.close()
