"""Stored schedules on PostgreSQL: the sweep's read of the due index goes through its index and reads
only the rows due, whatever the plan cache decides. (Every rule of the protocol: the kit's tier.)"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import asyncpg  # pyright: ignore[reportMissingTypeStubs]
import pytest

from anarchon.backends import SCHEDULE_PARTITIONS, ScheduleWrite, schedule_partition
from anarchon_postgres import PostgresBackend
from anarchon_postgres._sql import partition_of

URL = os.environ.get("ANARCHON_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
pytestmark = pytest.mark.services

ROWS = 6_000
"""Schedules in the table: three namespaces of 2,000, one in seven with no next due."""


@pytest.fixture
async def filled(schema: str) -> AsyncIterator[tuple[PostgresBackend, Any]]:
    backend = PostgresBackend(URL, schema=schema)
    await backend.open()
    conn = cast(Any, await asyncpg.connect(URL))  # pyright: ignore[reportUnknownMemberType]
    try:
        await conn.execute(f"""
            INSERT INTO {backend.sql.schedules_table}
                (namespace, id, task, spec, args, options, paused, next_due, version, created_at, updated_at,
                 partition)
            SELECT 'ns' || (g % 3), 's' || g, 't' || (g % 10), '{{}}', '{{}}', '{{}}', false,
                   CASE WHEN g % 7 = 0 THEN NULL ELSE 1000 + g END, 1, 0, 0, {partition_of("'s' || g")}
            FROM generate_series(1, {ROWS}) AS g""")
        await conn.execute(f"ANALYZE {backend.sql.schedules_table}")
        yield backend, conn
    finally:
        await conn.close()
        await backend.close()


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


PARTS = list(range(0, SCHEDULE_PARTITIONS, 3))
"""The partitions a replica of three asks for: 22 of the 64."""


@pytest.mark.parametrize("cache", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize(("tasks", "partitions"), [(None, None), (None, PARTS), (["t1", "t4"], PARTS),
                                                   (["t1", "t4"], None)],
                         ids=["every-task", "every-task-some-partitions", "two-tasks-some-partitions",
                              "two-tasks"])
@pytest.mark.parametrize(("until", "after"),
                         [(1_300, None), (1_300, (1_100, "s100")), (7_100, (1_200, "s200"))],
                         ids=["a-few-due", "a-few-after-a-cursor", "most-due"])
async def test_the_due_read_searches_the_due_index_for_the_due_rows_only(
        filled: tuple[PostgresBackend, Any], cache: str, tasks: list[str] | None,
        partitions: list[int] | None, until: int, after: tuple[int, str] | None) -> None:
    backend, conn = filled
    # With tasks, the index is read partition by partition: every partition when none is asked.
    asked = list(range(SCHEDULE_PARTITIONS)) if tasks is not None and partitions is None else partitions
    sql = backend.sql.due_schedules(after=after is not None, tasks=tasks is not None,
                                    partitions=asked is not None)
    args: list[Any] = ["ns1", until, 1_000, *(after or ()), *([] if tasks is None else ["{t1,t4}"]),
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
    [scan] = [n for n in nodes if n.get("Index Name") in indexes]
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
    loops = scan.get("Actual Loops", 1)
    # The rows the index scan found: those it returned and those its filter threw away (a mean per loop,
    # rounded to the nearest: up to half a row per loop more or less).
    read = (scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0)) * loops
    assert plan["Actual Rows"] == min(len(due), 1_000), "the plan finds the rows due"
    assert read <= len(every) + loops, (
        f"the index scans read {read} rows, for {len(every)} due in the namespace (of the tasks asked): "
        "they read only the rows due")
    removed = [(n["Node Type"], n.get("Rows Removed by Filter")) for n in nodes]
    assert sum(count or 0 for _, count in removed) <= len(every) - len(due), (
        f"no row of the partitions asked is read and then thrown away: {removed}")
    assert len(due) < ROWS // 3, "(the namespace holds more schedules than are due)"


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
