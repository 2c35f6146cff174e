"""Stored schedules on PostgreSQL: the sweep's read of the due index goes through its index and reads
only the rows due, whatever the plan cache decides. (Every rule of the protocol: the kit's tier.)"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import pytest

from anarchon import BackendError
from anarchon.backends import SCHEDULE_PARTITIONS, ScheduleWrite, ScheduleWriteResult, schedule_partition
from anarchon_postgres import PostgresBackend
from anarchon_postgres._sql import partition_of

URL = os.environ.get("ANARCHON_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
pytestmark = pytest.mark.services

ROWS = 6_000
"""Schedules in the table: three namespaces of 2,000, one in seven with no next due."""


async def _fill(backend: PostgresBackend, conn: Any, rows: int, *, namespace: str, task: str,
                next_due: str) -> None:
    """Insert schedules `s1` to `s<rows>` straight into the table, their namespace, task and next due
    the SQL expressions given (of `g`, the row's number), and analyse the table."""
    await conn.execute(f"""
        INSERT INTO {backend.sql.schedules_table}
            (namespace, id, task, spec, args, options, paused, next_due, version, created_at, updated_at,
             partition)
        SELECT {namespace}, 's' || g, {task}, '{{}}', '{{}}', '{{}}', false, {next_due}, 1, 0, 0,
               {partition_of("'s' || g")}
        FROM generate_series(1, {rows}) AS g""")
    await conn.execute(f"ANALYZE {backend.sql.schedules_table}")


@pytest.fixture
async def filled(schema: str) -> AsyncIterator[tuple[PostgresBackend, Any]]:
    backend = PostgresBackend(URL, schema=schema)
    await backend.open()
    conn = cast(Any, await asyncpg.connect(URL))  # pyright: ignore[reportUnknownMemberType]
    try:
        await _fill(backend, conn, ROWS, namespace="'ns' || (g % 3)", task="'t' || (g % 10)",
                    next_due="CASE WHEN g % 7 = 0 THEN NULL ELSE 1000 + g END")
        yield backend, conn
    finally:
        await conn.close()
        await backend.close()


def _record(backend: PostgresBackend) -> list[tuple[str, tuple[Any, ...]]]:
    """From now on, every statement `backend` sends, with its parameters, as it sends them."""
    sent: list[tuple[str, tuple[Any, ...]]] = []
    fetch = backend._fetch  # pyright: ignore[reportPrivateUsage]

    async def recorded(what: str, query: str, *args: Any, rows: int = 1) -> list[Any]:
        sent.append((query, args))
        return await fetch(what, query, *args, rows=rows)

    backend._fetch = recorded  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
    return sent


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


PARTS = list(range(0, SCHEDULE_PARTITIONS, 3))
"""The partitions a replica of three asks for: 22 of the 64."""


@pytest.mark.parametrize("cache", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize(("tasks", "partitions", "merged"),
                         [(None, None, False), (None, PARTS, False), (["t1", "t4"], PARTS, True),
                          (["t1", "t4"], None, True), (["t1", "t4"], PARTS, False),
                          (["t1", "t4"], None, False)],
                         ids=["every-task", "every-task-some-partitions", "two-tasks-some-partitions",
                              "two-tasks", "two-tasks-some-partitions-arrays", "two-tasks-arrays"])
@pytest.mark.parametrize(("until", "after"),
                         [(1_300, None), (1_300, (1_100, "s100")), (7_100, (1_200, "s200"))],
                         ids=["a-few-due", "a-few-after-a-cursor", "most-due"])
async def test_the_due_read_searches_the_due_index_for_the_due_rows_only(
        filled: tuple[PostgresBackend, Any], cache: str, tasks: list[str] | None,
        partitions: list[int] | None, merged: bool, until: int, after: tuple[int, str] | None) -> None:
    backend, conn = filled
    # With tasks, the index is read partition by partition: every partition when none is asked; as
    # ranges merged in one statement (the first form), or over arrays beyond MERGED_RANGES (the second).
    asked = list(range(SCHEDULE_PARTITIONS)) if tasks is not None and partitions is None else partitions
    args: list[Any] = ["ns1", until, 1_000, *(after or ())]
    if tasks is not None and asked is not None and merged:
        sql = backend.sql.due_ranges(len(tasks) * len(asked), after=after is not None)
        args += [x for task in tasks for p in asked for x in (task, p)]
    else:
        sql = backend.sql.due_schedules(after=after is not None, tasks=tasks is not None,
                                        partitions=asked is not None)
        args += [*([] if tasks is None else ["{t1,t4}"]),
                 *([] if asked is None else ["{" + ",".join(map(str, asked)) + "}"])]
    # Either due index serves every task (the planner picks by cost); only the one by task serves some.
    table = backend.sql.table
    indexes = ({f"{table}_sched_due", f"{table}_sched_part_due"} if tasks is None
               else {f"{table}_sched_part_due"})
    await conn.execute(f"SET plan_cache_mode = {cache}")  # the prepared statement's plan, either way
    statement = await conn.prepare("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
    plan: dict[str, Any] = {}
    for _ in range(6):  # past the five custom plans after which PostgreSQL may settle on a generic one
        plan = json.loads(await statement.fetchval(*args))[0]["Plan"]
    nodes = list(_nodes(plan))
    kinds = [n["Node Type"] for n in nodes]
    assert "Seq Scan" not in kinds, f"the due read must never scan the table: {kinds}"
    scans = [n for n in nodes if n.get("Index Name") in indexes]
    assert len(scans) == (len(tasks or ()) * len(asked or ()) if merged else 1), kinds
    for scan in scans:
        cond = scan.get("Index Cond", "")
        assert "namespace =" in cond and "next_due <=" in cond, (
            f"namespace and until bound the index range: {cond}")
        if tasks is not None:
            assert "task =" in cond and "partition =" in cond, (
                f"each (task, partition) bounds its own range: {cond}")
    due = await backend.due_schedules("ns1", until=until, tasks=tasks, partitions=partitions, after=after,
                                      limit=10_000)
    assert all(partitions is None or schedule_partition(r.id) in partitions for r in due)
    # Asked for some partitions but no task, the read filters the index on (namespace, next_due, id):
    # it reads the due rows of every partition, and keeps those asked.
    every = due if tasks is not None or partitions is None else await backend.due_schedules(
        "ns1", until=until, after=after, limit=10_000)
    loops = sum(scan.get("Actual Loops", 1) for scan in scans)
    # The rows the index scans found: those they returned and those their filter threw away (a mean per
    # loop, rounded to the nearest: up to half a row per loop more or less).
    read = sum((scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0)) * scan.get("Actual Loops", 1)
               for scan in scans)
    assert plan["Actual Rows"] == min(len(due), 1_000), "the plan finds the rows due"
    assert read <= len(every) + loops, (
        f"the index scans read {read} rows, for {len(every)} due in the namespace (of the tasks asked): "
        "they read only the rows due")
    removed = [(n["Node Type"], n.get("Rows Removed by Filter")) for n in nodes]
    assert sum(count or 0 for _, count in removed) <= len(every) - len(due), (
        f"no row of the partitions asked is read and then thrown away: {removed}")
    assert len(due) < ROWS // 3, "(the namespace holds more schedules than are due)"


async def test_a_page_of_a_herd_reads_one_page_of_the_index_not_one_per_partition(schema: str) -> None:
    # 20,000 schedules due at one moment, in every partition: each page of 1,000 of 22 partitions
    # reads its 1,000 rows and at most one more per partition, not 1,000 from each partition.
    backend = PostgresBackend(URL, schema=schema)
    await backend.open()
    conn = cast(Any, await asyncpg.connect(URL))  # pyright: ignore[reportUnknownMemberType]
    try:
        await _fill(backend, conn, 20_000, namespace="'herd'", task="'herd'", next_due="5000")
        sent = _record(backend)
        pages: list[int] = []
        after: tuple[int, str] | None = None
        while True:
            page = await backend.due_schedules("herd", until=6000, tasks=["herd"], partitions=PARTS,
                                               after=after, limit=1_000)
            pages.append(len(page))
            if len(page) < 1_000:
                break
            assert page[-1].next_due is not None
            after = (page[-1].next_due, page[-1].id)
        due = sum(1 for g in range(1, 20_001) if schedule_partition(f"s{g}") in PARTS)
        assert sum(pages) == due and pages[0] == 1_000
        # The plan of a page from the middle, as the driver sent it.
        sql, args = sent[len(sent) // 2]
        statement = await conn.prepare("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
        plan = json.loads(await statement.fetchval(*args))[0]["Plan"]
        scans = [n for n in _nodes(plan) if n["Node Type"] in ("Index Scan", "Index Only Scan")]
        read = sum(n["Actual Rows"] * n.get("Actual Loops", 1) for n in scans)
        assert plan["Actual Rows"] == 1_000
        assert read <= 1_000 + len(PARTS), f"a page read {read} rows of the index for 1,000 returned"
    finally:
        await conn.close()
        await backend.close()


async def test_a_large_advance_probes_each_row_once_under_a_generic_plan(schema: str) -> None:
    # A prepared statement's generic plan guesses a few hundred moves: a batch of 4,000 must still
    # cost one probe of the primary key per move, not a scan of every locked row for each move.
    backend = PostgresBackend(URL, schema=schema)
    await backend.open()
    conn = cast(Any, await asyncpg.connect(URL))  # pyright: ignore[reportUnknownMemberType]
    try:
        await _fill(backend, conn, 100_000, namespace="'ns'", task="'t'", next_due="1000 + g")
        sent = _record(backend)
        moves = [(f"s{g}", 1, 100_000 + g) for g in range(1, 4_001)]
        await backend.advance_schedules("ns", [*moves, ("s4001", 2, 100_000)])  # (a stale version)
        due = await conn.fetch(f"SELECT id, next_due FROM {backend.sql.schedules_table} "
                               "WHERE namespace = 'ns' AND id IN ('s1', 's4000', 's4001')")
        assert {r["id"]: r["next_due"] for r in due} == {"s1": 100_001, "s4000": 104_000, "s4001": 5_001}
        [(sql, args)] = sent
        # The same statement moving them on again, under a generic plan (rolled back).
        further = "{" + ",".join(str(200_000 + g) for g in range(1, 4_002)) + "}"
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        rollback = conn.transaction()
        await rollback.start()
        try:
            statement = await conn.prepare("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            plan = json.loads(await statement.fetchval(*args[:3], further))[0]["Plan"]
        finally:
            await rollback.rollback()
        [locked] = [n["Actual Rows"] for n in _nodes(plan) if n["Node Type"] == "LockRows"]
        removed = sum(n.get("Rows Removed by Join Filter", 0) for n in _nodes(plan))
        assert locked >= len(moves), plan
        assert removed <= len(moves), f"the advance compared {removed} pairs of rows for {len(moves)} moves"
    finally:
        await conn.close()
        await backend.close()


async def test_an_expect_that_is_no_version_is_refused_before_the_store(schema: str) -> None:
    backend = PostgresBackend(URL, schema=schema)
    await backend.open()
    try:
        write = ScheduleWrite("a", "report", '{"every": 60000, "offset": 0}', "{}", "{}", False, 1)
        for bad in ("abesnt", True, 1.0, None):
            with pytest.raises(TypeError, match=f"expect must be 'absent', 'any' or a version .*{bad!r}"):
                await backend.put_schedule("ns", write, expect=bad)  # type: ignore[arg-type]
        assert await backend.schedules_version("ns") == 0
    finally:
        await backend.close()


def _write(schedule_id: str, task: str = "report") -> ScheduleWrite:
    return ScheduleWrite(schedule_id, task, '{"every": 60000, "offset": 0}', "{}", "{}", False, 1)


@pytest.fixture
async def backend(schema: str) -> AsyncIterator[PostgresBackend]:
    opened = PostgresBackend(URL, schema=schema)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_the_writes_made_meanwhile_go_together_each_judged_alone(backend: PostgresBackend) -> None:
    # Every write locks the namespace's counter through its commit: one at a time, 200 concurrent
    # writes of one process would take 200 commits in a row. Those made while one is on its way go
    # together in the next statement.
    for n in range(100):
        await backend.put_schedule("ns", _write(f"old-{n}"), expect="absent")
    sent = _record(backend)
    results = await asyncio.gather(
        *(backend.put_schedule("ns", _write(f"new-{n}"), expect="absent") for n in range(100)),
        *(backend.put_schedule("ns", _write(f"old-{n}", "updated"), expect=n + 1) for n in range(50)),
        *(backend.remove_schedule("ns", f"old-{n}") for n in range(50, 100)))
    assert all(r.written for r in results), [r for r in results if not r.written][:3]
    assert len(sent) <= 10, f"200 concurrent writes went in {len(sent)} statements"
    versions = sorted(r.record.version for r in results[:150] if r.record is not None)
    assert len(set(versions)) == 150 and versions[0] > 100, versions
    stored = await backend.list_schedules("ns", limit=1_000)
    assert len(stored) == 150 and sum(r.task == "updated" for r in stored) == 50


async def test_a_write_the_server_refuses_is_answered_alone_among_others(backend: PostgresBackend) -> None:
    # PostgreSQL text cannot hold NUL: that write fails, and the others sent with it are made.
    await backend.put_schedule("ns", _write("first"), expect="absent")  # (the counter row)
    results = await asyncio.gather(
        *(backend.put_schedule("ns", _write(f"s-{n}" if n != 5 else "bad\0id"), expect="absent")
          for n in range(10)), return_exceptions=True)
    assert isinstance(results[5], BackendError), results[5]
    made = [isinstance(r, ScheduleWriteResult) and r.written for i, r in enumerate(results) if i != 5]
    assert all(made), results
    assert len(await backend.list_schedules("ns", limit=100)) == 10


async def test_a_write_whose_caller_stops_waiting_before_it_is_sent_is_not_made(
        backend: PostgresBackend) -> None:
    await backend.put_schedule("ns", _write("first"), expect="absent")
    on_its_way = asyncio.ensure_future(backend.put_schedule("ns", _write("a"), expect="absent"))
    await asyncio.sleep(0)  # (the write waits for its sender)
    await asyncio.sleep(0)  # (taken by it: on its way, and nothing waits)
    assert backend._writing and not backend._waiting  # pyright: ignore[reportPrivateUsage]
    taken_back = asyncio.ensure_future(backend.put_schedule("ns", _write("b"), expect="absent"))
    await asyncio.sleep(0)
    taken_back.cancel()
    assert (await on_its_way).written
    with pytest.raises(asyncio.CancelledError):
        await taken_back
    if backend._writing:  # pyright: ignore[reportPrivateUsage]
        await asyncio.wait(backend._writing.values())  # pyright: ignore[reportPrivateUsage]
    assert [r.id for r in await backend.list_schedules("ns", limit=10)] == ["a", "first"]


async def test_a_batch_of_writes_probes_each_row_once_under_a_generic_plan(backend: PostgresBackend) -> None:
    conn = cast(Any, await asyncpg.connect(URL))  # pyright: ignore[reportUnknownMemberType]
    try:
        await _fill(backend, conn, 100_000, namespace="'ns'", task="'t'", next_due="1000 + g")
        await backend.put_schedule("ns", _write("first"), expect="absent")
        sent = _record(backend)
        await asyncio.gather(*(backend.put_schedule("ns", _write(f"s{g}", "u"), expect=1)
                               for g in range(1, 301)))
        sql, args = max(sent, key=lambda s: len(s[1][1]))
        batch = args[1].count(",") + 1
        assert batch >= 100, f"the writes went in batches of {batch} at most"
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        rollback = conn.transaction()
        await rollback.start()
        try:
            statement = await conn.prepare("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            plan = json.loads(await statement.fetchval(*args))[0]["Plan"]
        finally:
            await rollback.rollback()
        scanned = [n for n in _nodes(plan) if n["Node Type"] == "Seq Scan"
                   and n.get("Relation Name") == backend.sql.table + "_schedules"]
        removed = sum(n.get("Rows Removed by Join Filter", 0) + n.get("Rows Removed by Filter", 0)
                      for n in _nodes(plan))
        assert not scanned and removed <= 10 * batch, f"scanned {scanned}, {removed} rows removed: {plan}"
    finally:
        await conn.close()
