"""PostgresBackend against the real server: every row of the claim table, compared with MemoryBackend."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, cast

import asyncpg
import pytest

import anarchon_postgres
from anarchon import (
    BackendError,
    BackendUnavailable,
    CancelSignal,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobContext,
    JobControl,
    JobStatus,
    Lease,
    LeaseLost,
    MemoryBackend,
    Overlap,
    ReleaseOutcome,
    RunRecord,
    SchemaMismatch,
    backend_for_url,
)
from anarchon._context import TRIGGER_SUFFIX
from anarchon.backends import SCHEDULE_PARTITIONS, ScheduleWrite, schedule_partition
from anarchon_postgres import PostgresBackend
from anarchon_postgres._migrations import FILLFACTOR, MIGRATIONS, SCHEMA_VERSION
from anarchon_postgres._sql import CLAIM_COLUMNS, Statements, array_literal, numbers_literal

URL = os.environ.get("ANARCHON_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
pytestmark = pytest.mark.services



@pytest.fixture
async def pg(schema: str) -> AsyncIterator[PostgresBackend]:
    backend = PostgresBackend(URL, schema=schema)
    await backend.open()
    yield backend
    await backend.close()


@pytest.fixture
async def hearer(schema: str) -> AsyncIterator[PostgresBackend]:
    """A second backend on the same schema: another replica, listening."""
    backend = PostgresBackend(URL, schema=schema)
    await backend.open()
    yield backend
    await backend.close()


def now_ms() -> int:
    return int(time.time() * 1000)


# -- one scenario, run against the reference model and against PostgreSQL ----------------------


@dataclass(frozen=True)
class Claim:
    owner: str
    slot: int  # offset from the scenario's base slot, ms
    lease_ms: int = 60_000
    max_attempts: int = 3
    overlap: Overlap = Overlap.SKIP
    fingerprint: str = "every:10s"
    max_skew_ms: int = 2_000
    stale_after: int | None = None


@dataclass(frozen=True)
class Release:
    step: int  # index of the step whose won lease is released
    outcome: ReleaseOutcome


@dataclass(frozen=True)
class Renew:
    step: int
    lease_ms: int = 60_000


@dataclass(frozen=True)
class Sleep:
    ms: int


Step = Claim | Release | Renew | Sleep

# A lease of 0 ms has expired the moment it is granted (expiry is inclusive): no sleeping needed.
SCENARIOS: dict[str, list[Step]] = {
    "none->won": [Claim("a", 0)],
    "same-slot-live->taken": [Claim("a", 0), Claim("b", 0)],
    "same-slot-done->done": [Claim("a", 0), Release(0, ReleaseOutcome.DONE), Claim("b", 0)],
    "same-slot-failed->done": [Claim("a", 0), Release(0, ReleaseOutcome.FAILED), Claim("b", 0)],
    "released->takeover": [Claim("a", 0), Release(0, ReleaseOutcome.HANDOVER), Claim("b", 0)],
    "expired->takeover": [Claim("a", 0, lease_ms=0), Claim("b", 0)],
    "expired->exhausted": [
        Claim("a", 0, lease_ms=0, max_attempts=2), Claim("b", 0, lease_ms=0, max_attempts=2),
        Claim("c", 0, max_attempts=2),
    ],
    "released->exhausted": [
        Claim("a", 0, max_attempts=1), Release(0, ReleaseOutcome.HANDOVER), Claim("b", 0, max_attempts=1),
    ],
    "older-live-skip->skipped": [Claim("a", 0), Claim("b", 10_000)],
    "older-live-buffer_one->skipped": [
        Claim("a", 0, overlap=Overlap.BUFFER_ONE), Claim("b", 10_000, overlap=Overlap.BUFFER_ONE),
    ],
    "older-live-replace->won, old renew lost": [
        Claim("a", 0, overlap=Overlap.REPLACE), Claim("b", 10_000, overlap=Overlap.REPLACE), Renew(0),
        Release(0, ReleaseOutcome.DONE), Renew(1),
    ],
    "older-live-allow->won, both run": [
        Claim("a", 0, overlap=Overlap.ALLOW), Claim("b", 10_000, overlap=Overlap.ALLOW),
        Renew(0), Renew(1), Claim("c", 0, overlap=Overlap.ALLOW), Release(0, ReleaseOutcome.DONE),
        Claim("c", 0, overlap=Overlap.ALLOW), Renew(1),
    ],
    "allow: expired older slot taken over, token per job": [
        Claim("a", 0, overlap=Overlap.ALLOW, lease_ms=150), Claim("b", 10_000, overlap=Overlap.ALLOW),
        Sleep(250), Claim("c", 10_000, overlap=Overlap.ALLOW), Claim("d", 0, overlap=Overlap.ALLOW),
        Renew(0), Renew(4), Release(4, ReleaseOutcome.HANDOVER),
        Claim("e", 0, overlap=Overlap.ALLOW, max_attempts=2), Claim("f", 20_000, overlap=Overlap.ALLOW),
        Renew(1),
    ],
    "allow: older dead slot is not kept": [
        Claim("a", 0, overlap=Overlap.ALLOW, lease_ms=0), Claim("b", 10_000, overlap=Overlap.ALLOW),
        Claim("c", 0, overlap=Overlap.ALLOW),
    ],
    "older-done->won new slot": [Claim("a", 0), Release(0, ReleaseOutcome.DONE), Claim("b", 10_000)],
    "older-expired->won new slot": [Claim("a", 0, lease_ms=0), Claim("b", 10_000)],
    "older-released->won new slot": [
        Claim("a", 0), Release(0, ReleaseOutcome.HANDOVER), Claim("b", 10_000),
        Release(0, ReleaseOutcome.DONE),
    ],
    "newer-slot->stale": [Claim("a", 10_000), Claim("b", 0)],
    "future->early": [Claim("a", 60_000)],
    "future within max_skew->won": [Claim("a", 1_000, max_skew_ms=5_000)],
    "fingerprint change is reported": [
        Claim("a", 0, fingerprint="every:10s"), Release(0, ReleaseOutcome.DONE),
        Claim("b", 10_000, fingerprint="cron:*/5"), Claim("c", 10_000, fingerprint="every:10s"),
    ],
    "renew after release is lost": [Claim("a", 0), Release(0, ReleaseOutcome.DONE), Renew(0),
                                    Release(0, ReleaseOutcome.DONE)],
    "expired but not taken over is lost": [Claim("a", 0, lease_ms=0), Renew(0), Claim("b", 0)],
    "past stale_after->stale, nothing written": [
        Claim("a", 0, stale_after=1), Claim("b", 0, lease_ms=0), Claim("c", 0, stale_after=1),
        Claim("d", 10_000, stale_after=1), Claim("e", 0, stale_after=10**13),
    ],
    "stale release after takeover is ignored": [
        Claim("a", 0, lease_ms=0), Claim("b", 0), Release(0, ReleaseOutcome.DONE), Renew(1),
    ],
}


def _norm_claim(result: ClaimResult, base: int) -> tuple[Any, ...]:
    """Everything a claim reports except absolute times (the two stores' clocks differ by µs)."""
    lease = result.lease
    return (
        "claim", result.outcome, result.slot - base, result.holder, result.attempt,
        result.previous_status, result.fingerprint,
        None if result.record_slot is None else result.record_slot - base,
        None if lease is None else (lease.slot - base, lease.attempt, lease.token, lease.owner),
        result.expires_at is not None,
    )


async def _play(backend: Any, steps: list[Step], base: int) -> list[tuple[Any, ...]]:
    leases: dict[int, Lease] = {}
    out: list[tuple[Any, ...]] = []
    for i, step in enumerate(steps):
        if isinstance(step, Claim):
            req = ClaimRequest(
                "ns", "job", base + step.slot, step.owner, step.lease_ms, step.max_attempts, step.overlap,
                step.fingerprint, step.max_skew_ms, step.stale_after,
            )
            result = await backend.claim(req)
            if result.lease is not None:
                leases[i] = result.lease
            out.append(_norm_claim(result, base))
        elif isinstance(step, Sleep):
            await asyncio.sleep(step.ms / 1000)
        elif step.step not in leases:
            out.append(("no lease to use", step.step))
        elif isinstance(step, Renew):
            renewed = await backend.renew(leases[step.step], step.lease_ms)
            out.append(("renew", renewed is not None))
        else:
            out.append(("release", await backend.release(leases[step.step], step.outcome)))
    state = await backend.inspect("ns", "job")
    if state is not None:
        out.append(("state", state.slot - base, state.attempt, state.token, state.owner, state.status))
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_same_results_as_memory_backend(pg: PostgresBackend, name: str) -> None:
    base = (now_ms() // 10_000 - 3) * 10_000  # slots in the past, 10 s apart, so none is early
    steps = SCENARIOS[name]
    expected, got = await asyncio.gather(_play(MemoryBackend(), steps, base), _play(pg, steps, base))
    assert got == expected
    assert not any(row[0] == "no lease to use" for row in got), "the scenario is miswritten"


async def test_scenarios_cover_every_outcome(pg: PostgresBackend) -> None:
    base = (now_ms() // 10_000 - 3) * 10_000
    seen = set()
    for steps in SCENARIOS.values():
        await pg.pool.execute(f"TRUNCATE {pg.sql.qualified}")
        seen |= {row[1] for row in await _play(pg, steps, base) if row[0] == "claim"}
    assert seen == set(ClaimOutcome)


def _count_statements(pg: PostgresBackend) -> list[str]:
    """Record what each statement `pg` sends is for, from now on."""
    calls: list[str] = []
    original = pg._fetch

    async def counting(what: str, query: str, *args: Any, rows: int = 1) -> list[Any]:
        calls.append(what)
        return await original(what, query, *args, rows=rows)

    pg._fetch = counting  # type: ignore[method-assign]
    return calls


async def test_claim_many_matches_one_by_one_in_one_statement(pg: PostgresBackend) -> None:
    base = (now_ms() // 10_000 - 3) * 10_000
    requests = [ClaimRequest("ns", f"job-{i}", base, "a") for i in range(50)]
    requests += [ClaimRequest("ns", "job-1", base, "b"), ClaimRequest("ns", "future", base + 600_000, "a")]
    calls = _count_statements(pg)
    results = await pg.claim_many(requests)
    # The duplicate job-1 goes in a second statement, after the first one's claim.
    assert calls == ["claim", "claim"]
    assert [r.outcome for r in results[:50]] == [ClaimOutcome.WON] * 50
    assert results[50].outcome is ClaimOutcome.TAKEN
    assert results[50].holder == "a"
    assert results[51].outcome is ClaimOutcome.EARLY
    assert [r.job for r in results] == [r.job for r in requests]


async def test_a_claim_that_loses_a_race_learns_the_holder_in_one_statement(pg: PostgresBackend) -> None:
    base = (now_ms() // 10_000 - 3) * 10_000
    old = (await pg.claim(ClaimRequest("ns", "j", base - 10_000, "a"))).lease
    assert old is not None and await pg.release(old, ReleaseOutcome.DONE)
    calls = _count_statements(pg)
    async with pg.pool.acquire() as conn:
        async with conn.transaction():
            # Replica b wins slot `base` in a transaction that is still open.
            row = await conn.fetchrow(
                pg.sql.claim, "{ns}", "{j}", f"{{{base}}}", "{b}", "{30000}", "{3}", "{skip}", '{""}',
                "{1000}", "{NULL}", pg.sql.channel)
            assert row is not None and row["won"]
            # Replica c claims the same slot: its snapshot says won; it waits for b's row lock.
            racing = asyncio.create_task(pg.claim(ClaimRequest("ns", "j", base, "c")))
            waiting = "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))"
            while not await pg.pool.fetchval(waiting, conn.get_server_pid()):
                assert not racing.done()
                await asyncio.sleep(0.01)
        result = await racing
    assert (result.outcome, result.holder) == (ClaimOutcome.TAKEN, "b")
    assert calls == ["claim"], "judged on the locked row, not asked again"


async def test_a_large_batch_runs_without_jit_and_an_error_leaves_the_connection_clean(schema: str) -> None:
    pg = PostgresBackend(URL, schema=schema, min_size=1, max_size=1)  # one connection: every call reuses it
    await pg.open()
    try:
        n = anarchon_postgres._backend.JIT_FREE_ROWS
        base = (now_ms() // 10_000 - 3) * 10_000
        requests = [ClaimRequest("ns", f"job-{i}", base, "a") for i in range(n)]
        results = await pg.claim_many(requests)
        assert [r.outcome for r in results] == [ClaimOutcome.WON] * n
        assert await pg.renew_many([(r.lease, 30_000) for r in results if r.lease]) != [None] * n
        # A statement that fails inside the batch's transaction: the slot overflows bigint.
        with pytest.raises(BackendError, match="out of range"):
            await pg.claim_many([*requests[1:], replace(requests[0], slot=2**70)])
        released = await pg.release_many([(r.lease, ReleaseOutcome.DONE) for r in results if r.lease])
        assert released == [True] * n, "the connection left no transaction open behind the error"
        async with pg.pool.acquire() as conn:
            # The large batch's session settings were reset with the connection.
            assert await conn.fetchval("SELECT setting = reset_val FROM pg_settings WHERE name = 'jit'")
            restored = "SELECT setting = reset_val FROM pg_settings WHERE name = $1"
            assert await conn.fetchval(restored, "statement_timeout")
            assert not conn.is_in_transaction()
    finally:
        await pg.close()


@pytest.mark.parametrize("cache", ["force_custom_plan", "force_generic_plan"])
async def test_a_large_batch_reads_and_locks_its_rows_by_probes(schema: str, cache: str) -> None:
    # With nested loops off (a large batch's settings), a join of a claim, renewal or release batch to
    # the record table scanned and hashed the whole table, to read the rows and again to lock them:
    # each item now reads and locks its row by a probe of the primary key. (The update's own join
    # may still hash the table.) And no join of two of the batch's sets compares every item with
    # every other.
    pg = PostgresBackend(URL, schema=schema)
    await pg.open()
    base = (now_ms() // 10_000 - 3) * 10_000
    n = 2_000
    try:
        for start in range(0, 30_000, n):
            won = await pg.claim_many([ClaimRequest("ns", f"job-{i:05d}", base, "a")
                                       for i in range(start, start + n)])
            await pg.release_many([(r.lease, ReleaseOutcome.DONE) for r in won if r.lease])
        async with pg.pool.acquire() as conn:
            await conn.execute(f"ANALYZE {pg.sql.qualified}")
        plans: dict[str, Any] = {}
        fetch = pg._fetch  # pyright: ignore[reportPrivateUsage]

        async def explained(what: str, query: str, *args: Any, rows: int = 1) -> list[Any]:
            if rows >= n and what not in plans:  # its plan, as it runs now (rolled back), then the run
                settings = anarchon_postgres._backend._BATCH_SETTINGS  # pyright: ignore[reportPrivateUsage]
                async with pg.pool.acquire() as conn:
                    await conn.execute(f"SET plan_cache_mode = {cache}; {settings}")
                    rollback = conn.transaction()
                    await rollback.start()
                    try:
                        statement = await conn.prepare("EXPLAIN (ANALYZE, FORMAT JSON) " + query)
                        plans[what] = json.loads(await statement.fetchval(*args))
                    finally:
                        await rollback.rollback()
                    await conn.execute("RESET ALL")
            return await fetch(what, query, *args, rows=rows)

        pg._fetch = explained  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
        won = await pg.claim_many([ClaimRequest("ns", f"job-{i:05d}", base + 10_000, "b")
                                   for i in range(n)])
        leases = [r.lease for r in won if r.lease]
        assert len(leases) == n
        await pg.renew_many([(lease, 30_000) for lease in leases])
        await pg.release_many([(lease, ReleaseOutcome.DONE) for lease in leases])
        assert set(plans) == {"claim", "renew", "release"}, set(plans)
        for what, plan in plans.items():
            scans = [node for node, updating in _nodes_in_update(plan[0]["Plan"], False)
                     if node["Node Type"] == "Seq Scan" and node.get("Relation Name") == pg.sql.table
                     and not updating]
            assert not scans, f"the {what} batch read or locked its rows by a scan of the whole table"
            compared = sum(node.get("Rows Removed by Join Filter", 0) for node in _plan_nodes(plan))
            assert compared <= n, f"the {what} batch compared {compared} pairs of rows for {n} items"
    finally:
        await pg.close()


def _nodes_in_update(plan: dict[str, Any], updating: bool) -> Iterator[tuple[dict[str, Any], bool]]:
    """Every node of a plan, with whether it is part of an update (under a ModifyTable node)."""
    updating = updating or plan["Node Type"] == "ModifyTable"
    yield plan, updating
    for child in plan.get("Plans", ()):
        yield from _nodes_in_update(child, updating)


async def test_a_claim_batch_holds_no_row_lock_after_its_statement(schema: str) -> None:
    # A transaction around the statement would keep the won rows locked until the client sent COMMIT:
    # another replica's claim of the same rows would wait for this client's event loop.
    pg = PostgresBackend(URL, schema=schema, min_size=1, max_size=1)
    await pg.open()
    statements: list[str] = []
    try:
        n = anarchon_postgres._backend.JIT_FREE_ROWS
        base = (now_ms() // 10_000 - 3) * 10_000
        async with pg.pool.acquire() as conn:
            conn.add_query_logger(lambda q: statements.append(q.query))
        results = await pg.claim_many([ClaimRequest("ns", f"job-{i}", base, "a") for i in range(n)])
        assert [r.outcome for r in results] == [ClaimOutcome.WON] * n
        await pg.claim_many([ClaimRequest("ns", f"job-{i}", base + 10_000, "a") for i in range(n)])
        sent = [q.strip() for q in statements]
        assert not [q for q in sent if q.startswith(("BEGIN", "COMMIT"))], "no transaction"
        assert sent.count(anarchon_postgres._backend._BATCH_SETTINGS) == 2, sent
    finally:
        await pg.close()


async def test_a_large_batch_on_a_pool_passed_in_leaves_its_settings_to_the_pools_reset(schema: str) -> None:
    pool = await asyncpg.create_pool(URL, min_size=1, max_size=1)
    try:
        pg = PostgresBackend(pool, schema=schema)
        await pg.open()
        n = anarchon_postgres._backend.JIT_FREE_ROWS
        base = (now_ms() // 10_000 - 3) * 10_000
        results = await pg.claim_many([ClaimRequest("ns", f"job-{i}", base, "a") for i in range(n)])
        assert [r.outcome for r in results] == [ClaimOutcome.WON] * n
        await pg.close()
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT setting = reset_val FROM pg_settings WHERE name = 'jit'")
            assert not conn.is_in_transaction()
    finally:
        await pool.close()


async def test_the_claim_statement_answers_the_columns_claim_results_are_read_by(pg: PostgresBackend) -> None:
    # `_result` unpacks each row by position.
    async with pg.pool.acquire() as conn:
        statement = await conn.prepare(pg.sql.claim)
        assert tuple(a.name for a in statement.get_attributes()) == CLAIM_COLUMNS


async def test_array_literals_carry_any_text_and_number(pg: PostgresBackend) -> None:
    names = ["", "NULL", "a,b", "{x}", 'say "hi"', "back\\slash\\", " pad ", "ünï\tcode", "x'; --"]
    numbers = [0, -1, 2**63 - 1, None]
    got = await pg.pool.fetchrow("SELECT $1::text::text[] AS t, $2::text::bigint[] AS n",
                                 array_literal(names), numbers_literal(numbers))
    assert got is not None and (got["t"], got["n"]) == (names, numbers)
    assert await pg.pool.fetchval("SELECT $1::text::text[]", array_literal([])) == []
    # Columns as `claim_many` passes them: tuples, enum members, numbers without NULL, an iterator.
    assert await pg.pool.fetchval("SELECT $1::text::text[]", array_literal(tuple(Overlap))) == [
        o.value for o in Overlap]
    assert await pg.pool.fetchval("SELECT $1::text::bigint[]", numbers_literal((0, -1, 2**63 - 1))) == [
        0, -1, 2**63 - 1]
    assert await pg.pool.fetchval("SELECT $1::text::bigint[]", numbers_literal(iter([7, None]))) == [7, None]
    with pytest.raises(asyncpg.PostgresError):  # never two elements
        await pg.pool.fetchval("SELECT $1::text::text[]", array_literal(["a\0b"]))


async def test_the_backends_statements_skip_the_pools_reset_and_other_uses_do_not(schema: str) -> None:
    pg = PostgresBackend(URL, schema=schema, min_size=1, max_size=1)  # one connection: every call reuses it
    await pg.open()
    watcher = await asyncpg.connect(URL)
    last_query = "SELECT query FROM pg_stat_activity WHERE pid = $1"
    try:
        async with pg.pool.acquire() as conn:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            await conn.execute("SET application_name = 'mine'")
        assert "RESET ALL" in await watcher.fetchval(last_query, pid)  # a use of the pool: reset
        assert await pg.inspect("ns", "nobody") is None
        if pg._releasing:
            await asyncio.wait(pg._releasing)  # the connection is back in the pool
        assert "RESET ALL" not in await watcher.fetchval(last_query, pid)  # the backend's own: not
        async with pg.pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid
            assert await conn.fetchval("SHOW application_name") != "mine"
    finally:
        await watcher.close()
        await pg.close()


async def test_hostile_names_are_bound_parameters(pg: PostgresBackend) -> None:
    base = (now_ms() // 10_000 - 3) * 10_000
    evil = "x'; DROP TABLE anarchon_jobs; --"
    ns = "ns\"; DROP SCHEMA public CASCADE; --"
    got: list[tuple[str, int]] = []
    await pg.subscribe(ns, lambda job, slot: got.append((job, slot)))
    result = await pg.claim(ClaimRequest(ns, evil, base, "o'wner"))
    assert result.won
    assert result.lease is not None
    assert (await pg.inspect(ns, evil)) is not None
    assert [s.job for s in await pg.jobs(ns)] == [evil]
    assert await pg.release(result.lease, ReleaseOutcome.HANDOVER)
    for _ in range(100):
        if got:
            break
        await asyncio.sleep(0.01)
    assert got == [(evil, base)]
    assert await pg.pool.fetchval("SELECT count(*) FROM " + pg.sql.qualified) == 1


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", 'x"; DROP TABLE t; --', "a b", "x" * 51, "sch.ema"])
def test_schema_and_table_must_be_identifiers(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid schema"):
        PostgresBackend(URL, schema=bad)
    with pytest.raises(ValueError, match="invalid table"):
        PostgresBackend(URL, table=bad)


async def test_jobs_sorted_like_memory(pg: PostgresBackend) -> None:
    base = (now_ms() // 10_000 - 3) * 10_000
    names = ["b", "B", "a", "Z", "é", "_x", "a1"]
    memory = MemoryBackend()
    for name in names:
        for backend in (pg, memory):
            await backend.claim(ClaimRequest("ns", name, base, "a"))
    assert [s.job for s in await pg.jobs("ns")] == [s.job for s in await memory.jobs("ns")]
    state = await pg.inspect("ns", "a")
    assert state is not None
    assert state.status is JobStatus.RUNNING
    assert 0 < state.expires_at - state.now <= 30_000
    assert await pg.inspect("ns", "nope") is None


# -- migrations --------------------------------------------------------------------------------

_ADDED_BY = {2: ("jobs_controls",), 3: ("jobs_history", "jobs_catalogue"), 4: ("jobs_history_count",),
             5: ("jobs_schedules", "jobs_sched_version")}
"""The tables each schema version adds to table `jobs`."""
_ALTERED_BY = {6: 5}
"""The version whose tables each later schema version changes."""


async def _leave_at(backend: PostgresBackend, schema: str, version: int) -> None:
    """Make table `jobs` as the release with schema `version` left it: later versions' tables go, and
    the tables a later version changed are made again (empty) by their own version's migration."""
    for later, tables in _ADDED_BY.items():
        if later > version:
            for table in tables:
                await backend.pool.execute(f'DROP TABLE "{schema}"."{table}"')
    for later, changed in _ALTERED_BY.items():
        if later > version >= changed:
            for table in _ADDED_BY[changed]:
                await backend.pool.execute(f'DROP TABLE "{schema}"."{table}"')
            for statement in MIGRATIONS[changed - 1](backend.sql):
                await backend.pool.execute(statement)
    await backend.pool.execute(f'DELETE FROM "{schema}"."jobs_schema" WHERE version > $1', version)


@contextlib.asynccontextmanager
async def _jobs_table(schema: str) -> AsyncIterator[PostgresBackend]:
    """A backend on table `jobs` of `schema`, open while in use."""
    backend = PostgresBackend(URL, schema=schema, table="jobs")
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


async def test_a_version_1_table_is_migrated_to_store_controls(schema: str) -> None:
    async with _jobs_table(schema) as first:
        await _leave_at(first, schema, 1)
    async with _jobs_table(schema) as upgraded:
        assert (await upgraded.set_control("ns", "j", paused=True)).paused
        assert await upgraded.controls("ns") == {"j": JobControl(paused=True)}


async def test_a_version_2_table_keeps_its_records_and_gains_the_history(schema: str) -> None:
    async with _jobs_table(schema) as first:  # with a record and a control
        lease = (await first.claim(ClaimRequest("ns", "j", 1_000, "a"))).lease
        assert lease is not None and await first.release(lease, ReleaseOutcome.DONE)
        await first.set_control("ns", "j", paused=True)
        await _leave_at(first, schema, 2)
    async with _jobs_table(schema) as upgraded:
        state = await upgraded.inspect("ns", "j")
        assert state is not None and (state.slot, state.status) == (1_000, JobStatus.DONE)
        assert await upgraded.controls("ns") == {"j": JobControl(paused=True)}
        run = RunRecord("j", 1_000, 1, lease.token, "a", "done", 1_000, 5)
        await upgraded.record_runs("ns", [run], 10)
        assert await upgraded.history("ns", "j", 10) == [run]
        versions = await upgraded.pool.fetch(f'SELECT version FROM "{schema}"."jobs_schema" ORDER BY 1')
        assert [v["version"] for v in versions] == list(range(1, SCHEMA_VERSION + 1))


async def test_a_version_3_table_keeps_its_history_and_counts_it(schema: str) -> None:
    async with _jobs_table(schema) as first:  # with 4 runs of one job
        await first.record_runs("ns", [run_of("j", s) for s in (1, 2, 3, 4)], 10)
        await _leave_at(first, schema, 3)
    async with _jobs_table(schema) as upgraded:
        assert await _counted(upgraded) == {"j": 4}
        await upgraded.record_runs("ns", [run_of("j", 5)], 3)
        assert [r.slot for r in await upgraded.history("ns", "j", 10)] == [5, 4, 3]
        assert await _counted(upgraded) == {"j": 3}


async def test_a_version_4_table_keeps_everything_and_gains_the_schedules(schema: str) -> None:
    async with _jobs_table(schema) as first:  # with a record, a control and a run
        lease = (await first.claim(ClaimRequest("ns", "j", 1_000, "a"))).lease
        assert lease is not None and await first.release(lease, ReleaseOutcome.DONE)
        await first.set_control("ns", "j", paused=True)
        await first.record_runs("ns", [run_of("j", 1_000)], 10)
        await _leave_at(first, schema, 4)
        tables = {r["tablename"] for r in await first.pool.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)}
        assert tables == {"jobs", "jobs_schema", "jobs_controls", "jobs_history", "jobs_catalogue",
                          "jobs_history_count"}, "the table as schema version 4 left it"
    async with _jobs_table(schema) as upgraded:
        state = await upgraded.inspect("ns", "j")
        assert state is not None and (state.slot, state.token) == (1_000, lease.token)
        assert await upgraded.controls("ns") == {"j": JobControl(paused=True)}
        assert [r.slot for r in await upgraded.history("ns", "j", 10)] == [1_000]
        write = ScheduleWrite("report-7", "report", '{"every": 60000, "offset": 0}', "{}", "{}", False, 5_000)
        added = await upgraded.put_schedule("ns", write, expect="absent")
        assert added.written and added.record is not None and added.record.version == 1
        assert await upgraded.due_schedules("ns", until=5_000, limit=10) == [added.record]
        assert await upgraded.schedules_version("ns") == added.record.version
        indexes = {r["indexname"] for r in await upgraded.pool.fetch(
            "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'jobs_schedules'",
            schema)}
        assert indexes == {"jobs_schedules_pkey", "jobs_sched_due", "jobs_sched_part_due", "jobs_sched_task"}
        versions = await upgraded.pool.fetch(f'SELECT version FROM "{schema}"."jobs_schema" ORDER BY 1')
        assert [v["version"] for v in versions] == list(range(1, SCHEMA_VERSION + 1))


async def test_a_version_5_table_keeps_its_schedules_and_reads_them_by_partition(schema: str) -> None:
    ids = [f"s{i}" for i in range(300)] + ["é", "Z", "a\u00e9", "日本", "\U0001f600", "a b", 'q"\'']
    async with _jobs_table(schema) as first:  # with schedules written as schema version 5 wrote them
        await _leave_at(first, schema, 5)
        columns = {r["column_name"] for r in await first.pool.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 "
            "AND table_name = 'jobs_schedules'", schema)}
        assert "partition" not in columns, "the table as schema version 5 left it"
        await first.pool.executemany(
            f'INSERT INTO "{schema}".jobs_schedules (namespace, id, task, spec, args, options, paused, '
            "next_due, version, created_at, updated_at) VALUES ('ns', $1, $2, '{}', '{}', '{}', false, $3, "
            "$4, 0, 0)",
            [(i, ("t1", "t2")[n % 2], None if n % 9 == 0 else 1_000 + n % 50, n + 1)
             for n, i in enumerate(ids)])
        await first.pool.execute(
            f"INSERT INTO \"{schema}\".jobs_sched_version (namespace, version) VALUES ('ns', {len(ids)})")
    async with _jobs_table(schema) as upgraded:
        stored = {r["id"]: r["partition"] for r in await upgraded.pool.fetch(
            f'SELECT id, partition FROM "{schema}".jobs_schedules')}
        assert stored == {i: schedule_partition(i) for i in ids}, "each row is filled with its partition"
        every = await upgraded.due_schedules("ns", until=1_040, limit=1_000)
        assert len(every) > 200
        for tasks in (None, ["t1"], ["t2", "t1"]):
            for parts in ([schedule_partition("é")], list(range(0, SCHEDULE_PARTITIONS, 3)), [63, 64]):
                due = await upgraded.due_schedules("ns", until=1_040, tasks=tasks, partitions=parts,
                                                   limit=1_000)
                assert due == [r for r in every if schedule_partition(r.id) in parts
                               and (tasks is None or r.task in tasks)], (tasks, parts)
        write = ScheduleWrite("日本", "t1", '{"every": 60000, "offset": 0}', "{}", "{}", False, 1_001)
        replaced = await upgraded.put_schedule("ns", write, expect="any")
        assert replaced.record is not None and replaced.record.version == len(ids) + 1
        assert replaced.record in await upgraded.due_schedules(
            "ns", until=1_001, tasks=["t1"], partitions=[schedule_partition("日本")], limit=1_000)
        indexes = {r["indexname"] for r in await upgraded.pool.fetch(
            "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'jobs_schedules'",
            schema)}
        assert indexes == {"jobs_schedules_pkey", "jobs_sched_due", "jobs_sched_part_due", "jobs_sched_task"}
        versions = await upgraded.pool.fetch(f'SELECT version FROM "{schema}"."jobs_schema" ORDER BY 1')
        assert [v["version"] for v in versions] == list(range(1, SCHEMA_VERSION + 1))


def run_of(job: str, slot: int, attempt: int = 1, outcome: str = "done") -> RunRecord:
    """An ended run of `job` at `slot`."""
    return RunRecord(job, slot, attempt, 1, "a", outcome, slot, 3)


async def _counted(pg: PostgresBackend) -> dict[str, int]:
    """Each job's count of stored runs, checked against the rows it has."""
    rows = await pg.pool.fetch(f"SELECT job, runs FROM {pg.sql.history_count_table} WHERE runs <> 0")
    stored = await pg.pool.fetch(f"SELECT job, count(*) AS runs FROM {pg.sql.history_table} GROUP BY job")
    counted = {r["job"]: r["runs"] for r in rows}
    assert counted == {r["job"]: r["runs"] for r in stored}, "the count is the stored rows'"
    return counted


async def test_recording_runs_reads_only_the_runs_that_go(pg: PostgresBackend) -> None:
    """500 jobs at their bound of 100 runs each, and a batch of one new run per job: the statement
    reads about one stored key per job (the run it drops), not the 100 it keeps, and never scans
    the history table. Also under the generic plan that a prepared statement falls back to, which
    guesses each array at 10 items: no join there may rescan the batch for each of its rows."""
    h, k = pg.sql.history_table, pg.sql.history_count_table
    await pg.pool.execute(
        f"INSERT INTO {h} (namespace, job, slot, attempt, token, instance, outcome, started_at, "
        "duration_ms, error) SELECT 'ns', 'job-' || j, s * 1000, 1, 1, 'a', 'done', s * 1000, 3, '' "
        "FROM generate_series(1, 500) AS j, generate_series(1, 100) AS s")
    await pg.pool.execute(f"INSERT INTO {k} SELECT namespace, job, count(*), 0 FROM {h} GROUP BY 1, 2")
    await pg.pool.execute(f"ANALYZE {h}; ANALYZE {k}")
    batch = 500
    runs = [run_of(f"job-{j}", 101_000) for j in range(1, batch + 1)]
    args = PostgresBackend._record_runs_args("ns", runs, 100)
    values = ", ".join(f"'{a}'" for a in args[:-1]) + f", {args[-1]}"  # EXECUTE takes no parameters
    for mode in ("force_custom_plan", "force_generic_plan"):
        async with pg.pool.acquire() as conn:
            undone = conn.transaction()  # leaves the table as it was for the next mode
            await undone.start()
            await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
            await conn.execute("PREPARE record_runs AS " + pg.sql.record_runs)
            plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE record_runs({values})")
            await undone.rollback()
            await conn.execute("DEALLOCATE record_runs")
        nodes = list(_plan_nodes(json.loads(plan)))
        history = [n for n in nodes if n.get("Relation Name") == "anarchon_jobs_history"]
        assert not [n for n in history if n["Node Type"] == "Seq Scan"], f"{mode}: the table was scanned"
        read = sum(n["Actual Rows"] * n["Actual Loops"]
                   for n in history if n["Node Type"].startswith("Index"))
        assert read < 10 * batch, f"{mode}: {read} stored keys read for {batch} runs"
        rescanned = max(n.get("Rows Removed by Join Filter", 0) for n in nodes)
        assert rescanned < 5 * batch, f"{mode}: a join rescanned the batch ({rescanned} rows)"
    await pg.record_runs("ns", runs, 100)
    kept = await pg.history("ns", "job-1", 200)
    assert [r.slot for r in kept] == [s * 1000 for s in range(101, 1, -1)]  # slot 1,000 made way
    assert (await _counted(pg))["job-1"] == 100


def _plan_nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every node of an `EXPLAIN (FORMAT JSON)` plan."""
    stack = [p["Plan"] for p in plan]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.get("Plans", ()))


async def test_a_count_that_went_wrong_is_counted_again(pg: PostgresBackend) -> None:
    """Rows written or deleted by something that does not keep the count (an older release during
    an upgrade, an operator's DELETE) are counted afresh within a few flushes of the job."""
    recorded = list(range(1, 6))
    await pg.record_runs("ns", [run_of("j", s) for s in recorded], 3)
    assert await _counted(pg) == {"j": 3}
    for wrong in (0, 50):
        await pg.pool.execute(f"UPDATE {pg.sql.history_count_table} SET runs = $1", wrong)
        for flush in range(60):  # a check is due with probability 1/3 at each flush
            recorded.append(10 * wrong + 100 + flush)
            await pg.record_runs("ns", [run_of("j", recorded[-1])], 3)
            stored = await pg.pool.fetchval(f"SELECT count(*) FROM {pg.sql.history_table}")
            if stored == 3 and await pg.pool.fetchval(
                    f"SELECT runs FROM {pg.sql.history_count_table}") == 3:
                break
        assert await _counted(pg) == {"j": 3}, f"a count set to {wrong} was not corrected"
        assert [r.slot for r in await pg.history("ns", "j", 10)] == recorded[:-4:-1]


async def test_concurrent_recordings_of_the_same_jobs_keep_the_count(schema: str) -> None:
    """Replicas flushing runs of the same jobs at once wait on each other's rows, never deadlock, and
    leave each job's count equal to its rows; the newest runs are always kept."""
    replicas = [PostgresBackend(URL, schema=schema) for _ in range(3)]
    await asyncio.gather(*(b.open() for b in replicas))
    try:
        jobs = [f"job-{j}" for j in range(200)]

        async def replica(i: int, b: PostgresBackend) -> None:
            order = jobs[::-1] if i % 2 else jobs
            for flush in range(12):  # each replica ran every third slot of every job
                slot = (flush * 3 + i) * 1000
                await b.record_runs("ns", [run_of(job, slot) for job in order], 8)

        await asyncio.gather(*(replica(i, b) for i, b in enumerate(replicas)))
        await replicas[0].record_runs("ns", [run_of(job, 36_000) for job in jobs], 8)
        for job in (jobs[0], jobs[-1]):
            newest = [r.slot for r in await replicas[1].history("ns", job, 8)]
            assert newest == [s * 1000 for s in range(36, 28, -1)], newest
        assert await _counted(replicas[2]) == dict.fromkeys(jobs, 8)
    finally:
        await asyncio.gather(*(b.close() for b in replicas))


async def test_recording_runs_keeps_exactly_the_newest_when_a_late_run_is_older(pg: PostgresBackend) -> None:
    """A run recorded after newer ones ranks by (slot, attempt), not by arrival; a key recorded again
    replaces its run and counts once."""
    def run(slot: int, attempt: int = 1, outcome: str = "done") -> RunRecord:
        return run_of("j", slot, attempt, outcome)

    await pg.record_runs("ns", [run(s) for s in (10, 20, 30)], 3)
    await pg.record_runs("ns", [run(5)], 3)  # older than every kept run: not kept
    assert [r.slot for r in await pg.history("ns", "j", 10)] == [30, 20, 10]
    await pg.record_runs("ns", [run(20, 2), run(30, outcome="failed")], 3)  # one new, one again
    assert [(r.slot, r.attempt, r.outcome) for r in await pg.history("ns", "j", 10)] == [
        (30, 1, "failed"), (20, 2, "done"), (20, 1, "done")]
    await pg.record_runs("ns", [run(40), run(15), run(50)], 2)  # a smaller bound trims the rest
    assert [r.slot for r in await pg.history("ns", "j", 10)] == [50, 40]


async def test_migrations_concurrent_and_idempotent(schema: str) -> None:
    backends = [PostgresBackend(URL, schema=schema, table="jobs") for _ in range(8)]
    try:
        await asyncio.gather(*(b.open() for b in backends))
        rows = await backends[0].pool.fetch(f'SELECT version FROM "{schema}"."jobs_schema"')
        assert sorted(r["version"] for r in rows) == list(range(1, anarchon_postgres.SCHEMA_VERSION + 1))
        again = PostgresBackend(URL, schema=schema, table="jobs")
        await again.open()
        await again.close()
        base = (now_ms() // 10_000 - 3) * 10_000
        results = await asyncio.gather(*(b.claim(ClaimRequest("ns", "j", base, f"o{i}"))
                                         for i, b in enumerate(backends)))
        assert sum(r.won for r in results) == 1
    finally:
        await asyncio.gather(*(b.close() for b in backends))


async def test_a_table_already_current_is_opened_without_the_migration_lock(schema: str) -> None:
    first = PostgresBackend(URL, schema=schema, table="jobs")
    await first.open()
    await first.close()
    holder = await asyncpg.connect(URL)
    try:
        # Another replica migrating holds the lock: a replica that finds the table current need not wait.
        await holder.execute("SELECT pg_advisory_lock($1)", Statements(schema, "jobs").lock_key)
        again = PostgresBackend(URL, schema=schema, table="jobs")
        try:
            await asyncio.wait_for(again.open(), 20)
        finally:
            await again.close()
        # A table with something left to do (here: its fillfactor) still waits for the lock.
        await holder.execute(f'ALTER TABLE "{schema}".jobs RESET (fillfactor)')
        behind = PostgresBackend(URL, schema=schema, table="jobs")
        opening = asyncio.ensure_future(behind.open())
        await asyncio.sleep(0.5)
        assert not opening.done()
        await holder.execute("SELECT pg_advisory_unlock_all()")
        await asyncio.wait_for(opening, 20)
        await behind.close()
        reloptions = f"SELECT reloptions FROM pg_class WHERE oid = '\"{schema}\".jobs'::regclass"
        assert await holder.fetchval(reloptions) == [f"fillfactor={FILLFACTOR}"]
    finally:
        await holder.close()


async def test_the_record_table_leaves_room_for_hot_updates(schema: str) -> None:
    reloptions = f"SELECT reloptions FROM pg_class WHERE oid = '\"{schema}\".jobs'::regclass"
    backend = PostgresBackend(URL, schema=schema, table="jobs")
    await backend.open()
    try:
        assert await backend.pool.fetchval(reloptions) == [f"fillfactor={FILLFACTOR}"]
        # An operator's own setting is kept.
        await backend.pool.execute(f'ALTER TABLE "{schema}".jobs SET (fillfactor = 80)')
    finally:
        await backend.close()
    again = PostgresBackend(URL, schema=schema, table="jobs")
    await again.open()
    try:
        assert await again.pool.fetchval(reloptions) == ["fillfactor=80"]
    finally:
        await again.close()


async def test_foreign_table_and_newer_schema_are_refused(schema: str) -> None:
    conn = await asyncpg.connect(URL)
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"; CREATE TABLE "{schema}".mine (id int)')
        with pytest.raises(SchemaMismatch, match="not created by anarchon"):
            await PostgresBackend(URL, schema=schema, table="mine").open()
        backend = PostgresBackend(URL, schema=schema, table="jobs")
        await backend.open()
        await backend.close()
        await conn.execute(f'INSERT INTO "{schema}".jobs_schema (version) VALUES (99)')
        with pytest.raises(SchemaMismatch, match="upgrade anarchon-postgres"):
            await PostgresBackend(URL, schema=schema, table="jobs").open()
    finally:
        await conn.close()


# -- connections, URLs and secrets -------------------------------------------------------------


async def test_password_never_in_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "hunter2-s3cret"
    backend = PostgresBackend(f"postgresql://postgres:{secret}@127.0.0.1:1/test")
    assert secret not in repr(backend)
    assert secret not in backend.url
    with pytest.raises(BackendUnavailable) as info:
        await backend.open()
    chain: list[BaseException] = []
    exc: BaseException | None = info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    assert all(secret not in str(e) for e in chain)
    with pytest.raises(ValueError) as bad:
        await PostgresBackend(f"postgresql://postgres:{secret}@127.0.0.1:5432/test?sslmode=bogus").open()
    assert secret not in str(bad.value)
    assert bad.value.__cause__ is None
    assert secret not in caplog.text


async def test_from_url_and_plugin_discovery(schema: str) -> None:
    backend = backend_for_url(f"{URL}?schema={schema}&table=t1&statement_cache_size=0")
    assert isinstance(backend, PostgresBackend)
    assert (backend.sql.schema, backend.sql.table) == (schema, "t1")
    await backend.open()
    try:
        base = (now_ms() // 10_000 - 3) * 10_000
        assert (await backend.claim(ClaimRequest("ns", "j", base, "a"))).won
        # statement_cache_size=0 (PgBouncer transaction mode) still works end to end.
        assert (await backend.claim(ClaimRequest("ns", "j", base, "b"))).outcome is ClaimOutcome.TAKEN
    finally:
        await backend.close()
    with pytest.raises(ValueError, match="statement_cache_size"):
        PostgresBackend.from_url(f"{URL}?statement_cache_size=lots")
    with pytest.raises(TypeError, match=r"asyncpg\.Pool"):
        PostgresBackend(cast(Any, 42))


async def test_existing_pool_is_used_and_left_open(schema: str) -> None:
    pool = await asyncpg.create_pool(URL, min_size=1, max_size=2)
    try:
        backend = PostgresBackend(pool, schema=schema)
        await backend.open()
        got: list[tuple[str, int]] = []
        await backend.subscribe("ns", lambda job, slot: got.append((job, slot)))
        base = (now_ms() // 10_000 - 3) * 10_000
        result = await backend.claim(ClaimRequest("ns", "j", base, "a"))
        assert result.lease is not None
        await backend.release(result.lease, ReleaseOutcome.HANDOVER)
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.01)
        assert got == [("j", base)]
        await backend.close()
        assert await pool.fetchval("SELECT 1") == 1  # still open: it is the user's
    finally:
        await pool.close()


# -- handover push ------------------------------------------------------------------------------


async def _wait(predicate: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_release_is_pushed_on_the_loop_and_listener_reconnects(schema: str) -> None:
    holder = PostgresBackend(URL, schema=schema)
    backup = PostgresBackend(URL, schema=schema)
    await holder.open()
    await backup.open()
    try:
        loop = asyncio.get_running_loop()
        got: list[tuple[str, int, bool]] = []

        def on_release(job: str, slot: int) -> None:
            running = asyncio.get_running_loop()  # raises unless called on a loop
            got.append((job, slot, running is loop))

        await backup.subscribe("ns", on_release)
        await backup.subscribe("other-ns", lambda job, slot: got.append(("WRONG", slot, False)))
        listener = backup.listener
        assert listener is not None
        assert listener.connected.is_set()
        base = (now_ms() // 10_000 - 3) * 10_000
        first = await holder.claim(ClaimRequest("ns", "j", base, "a"))
        assert first.lease is not None
        sent = time.monotonic()
        await holder.release(first.lease, ReleaseOutcome.HANDOVER)
        await _wait(lambda: bool(got))
        pushed_in = time.monotonic() - sent
        assert got == [("j", base, True)]
        logging.getLogger(__name__).info("handover pushed in %.1f ms", pushed_in * 1000)

        # Kill the LISTEN connection server-side: it comes back and pushes again.
        pid = listener.server_pid
        assert pid is not None
        assert await holder.pool.fetchval("SELECT pg_terminate_backend($1)", pid)
        await _wait(lambda: listener.reconnects >= 1 and listener.connected.is_set())
        second = await holder.claim(ClaimRequest("ns", "j", base + 10_000, "a"))
        assert second.lease is not None
        await holder.release(second.lease, ReleaseOutcome.HANDOVER)
        await _wait(lambda: len(got) == 2)
        assert got[1] == ("j", base + 10_000, True)
    finally:
        await holder.close()
        await backup.close()


async def _announced(backend: PostgresBackend, namespace: str) -> list[tuple[str, list[tuple[str, int]]]]:
    """Subscribe to the wins in `namespace`; the list fills as they are pushed."""
    got: list[tuple[str, list[tuple[str, int]]]] = []
    await backend.subscribe_wins(namespace, lambda owner, wins: got.append((owner, list(wins))))
    return got


async def test_a_large_batch_of_wins_is_announced_in_chunks_and_completely(
    pg: PostgresBackend, hearer: PostgresBackend
) -> None:
    """300 wins with 200-character names, quotes, backslashes and emoji (about 120 KB of JSON) need
    many notifications of under 8000 bytes: every win arrives once, and a reissued lease, which writes
    nothing, is not announced again."""
    got = await _announced(hearer, "ns")
    base = (now_ms() // 10_000 - 3) * 10_000
    names = [f"{i:03d}" + ('"\\é🙂-' * 40)[:197] for i in range(300)]
    assert all(len(n) == 200 for n in names)
    results = await pg.claim_many([ClaimRequest("ns", n, base, "a", 60_000) for n in names])
    assert all(r.outcome is ClaimOutcome.WON for r in results)
    wanted = sorted((n, base) for n in names)
    await _wait(lambda: sum(len(wins) for _, wins in got) >= len(names))
    assert sorted(w for _, wins in got for w in wins) == wanted
    assert {owner for owner, _ in got} == {"a"}
    assert len(got) > 1, "one notification cannot hold them all"

    again = await pg.claim_many([ClaimRequest("ns", n, base, "a", 60_000) for n in names])
    assert all(r.reissued for r in again)
    marker = await pg.claim(ClaimRequest("ns", "marker", base, "a", 60_000))
    assert marker.outcome is ClaimOutcome.WON
    await _wait(lambda: got[-1][1] == [("marker", base)])
    assert sum(len(wins) for _, wins in got) == len(names) + 1, "a reissued lease was announced"


async def test_releases_and_wins_share_one_listener_and_a_malformed_announcement_is_ignored(
    pg: PostgresBackend, caplog: pytest.LogCaptureFixture
) -> None:
    released: list[tuple[str, int]] = []
    won: list[tuple[str, list[tuple[str, int]]]] = []
    await pg.subscribe("ns", lambda job, slot: released.append((job, slot)))
    listener = pg.listener
    await pg.subscribe_wins("ns", lambda owner, wins: won.append((owner, list(wins))))
    assert pg.listener is listener is not None
    async with pg.pool.acquire() as conn:
        for payload in ('{"owner": "a", "namespace": "ns", "wins": [["j", "x"]]}', '{"owner": "a"}',
                        '{"owner": 1, "namespace": "ns", "wins": []}',
                        '{"owner": "a", "namespace": "other", "wins": [["j", 1]]}',
                        '{"owner": "a", "namespace": "ns", "wins": [["j", 1], ["k", 2]]}',
                        '["ns", "j", 3]'):
            await conn.execute("SELECT pg_notify($1, $2)", pg.channel, payload)
    await _wait(lambda: bool(released))
    assert won == [("a", [("j", 1), ("k", 2)])]
    assert released == [("j", 3)]
    assert sum("malformed notification of won claims" in r.getMessage() for r in caplog.records) == 3


async def test_a_claim_with_wins_too_long_to_announce_still_wins(
    pg: PostgresBackend, hearer: PostgresBackend
) -> None:
    """A chunk whose payload would reach 8000 bytes (here an owner of 8000 characters) is not sent,
    so pg_notify cannot fail the claim; the batch's other owners are announced."""
    got = await _announced(hearer, "ns")
    base = (now_ms() // 10_000 - 3) * 10_000
    huge = "o" * 8000
    requests = [ClaimRequest("ns", f"big-{i}", base, huge, 60_000) for i in range(5)]
    requests += [ClaimRequest("ns", f"small-{i}", base, "b", 60_000) for i in range(5)]
    results = await pg.claim_many(requests)
    assert all(r.outcome is ClaimOutcome.WON for r in results), results
    [one] = await pg.claim_many([ClaimRequest("ns", "alone", base, huge, 60_000)])
    assert one.outcome is ClaimOutcome.WON
    marker = await pg.claim(ClaimRequest("ns", "marker", base, "b", 60_000))
    assert marker.outcome is ClaimOutcome.WON
    await _wait(lambda: any(("marker", base) in wins for _, wins in got))
    assert got == [("b", [(f"small-{i}", base) for i in range(5)]), ("b", [("marker", base)])]


# -- fenced transactions --------------------------------------------------------------------------


@dataclass
class Ctx:
    namespace: str
    name: str
    slot: int
    token: int


async def test_fence_frozen_runner_loses_and_replacement_writes(pg: PostgresBackend) -> None:
    await pg.pool.execute(f'CREATE TABLE "{pg.sql.schema}".ledger (slot bigint, writer text, token bigint)')
    base = (now_ms() // 10_000 - 3) * 10_000
    first = await pg.claim(ClaimRequest("ns", "pay", base, "frozen", lease_ms=200))
    assert first.lease is not None
    frozen = Ctx("ns", "pay", base, first.lease.token)

    async def fenced_write(ctx: Ctx, writer: str) -> None:
        async with pg.pool.acquire() as conn, conn.transaction():
            await pg.fence(conn, ctx)
            await conn.execute(f'INSERT INTO "{pg.sql.schema}".ledger VALUES ($1, $2, $3)',
                               ctx.slot, writer, ctx.token)

    await asyncio.sleep(0.3)  # the first runner is frozen past its lease...
    second = await pg.claim(ClaimRequest("ns", "pay", base, "replacement", lease_ms=30_000))
    assert second.won
    assert second.lease is not None
    assert second.lease.attempt == 2
    with pytest.raises(LeaseLost, match="no longer owns"):
        await fenced_write(frozen, "frozen")
    await fenced_write(Ctx("ns", "pay", base, second.lease.token), "replacement")
    rows = await pg.pool.fetch(f'SELECT writer, token FROM "{pg.sql.schema}".ledger')
    assert [(r["writer"], r["token"]) for r in rows] == [("replacement", second.lease.token)]


async def test_fence_blocks_takeover_until_commit(pg: PostgresBackend) -> None:
    base = (now_ms() // 10_000 - 3) * 10_000
    first = await pg.claim(ClaimRequest("ns", "pay", base, "a", lease_ms=300))
    assert first.lease is not None
    ctx = Ctx("ns", "pay", base, first.lease.token)
    takeover: asyncio.Task[ClaimResult] | None = None
    async with pg.pool.acquire() as conn, conn.transaction():
        await pg.fence(conn, ctx)
        await asyncio.sleep(0.4)  # the lease expires while we hold the row
        takeover = asyncio.create_task(pg.claim(ClaimRequest("ns", "pay", base, "b")))
        await asyncio.sleep(0.2)
        assert not takeover.done()  # it waits for our commit
    result = await takeover
    assert result.won
    assert result.lease is not None
    assert result.lease.attempt == 2


async def test_fence_needs_a_transaction(pg: PostgresBackend) -> None:
    async with pg.pool.acquire() as conn:
        with pytest.raises(RuntimeError, match="inside a transaction"):
            await pg.fence(conn, Ctx("ns", "pay", 0, 1))
        async with conn.transaction():
            with pytest.raises(LeaseLost):
                await pg.fence(conn, Ctx("ns", "never-claimed", 0, 1))


async def test_fence_accepts_anarchon_job_context(pg: PostgresBackend) -> None:
    from anarchon import CancelSignal, JobContext

    base = (now_ms() // 10_000 - 3) * 10_000
    won = await pg.claim(ClaimRequest("ns", "ctxjob", base, "a"))
    assert won.lease is not None
    ctx = JobContext(name="ctxjob", slot=base, attempt=1, token=won.lease.token, instance_id="a",
                     namespace="ns", signal=CancelSignal(), logger=logging.getLogger("t"))
    async with pg.pool.acquire() as conn, conn.transaction():
        await pg.fence(conn, ctx)
    stale = replace(won.lease, token=won.lease.token + 5)
    assert await pg.renew(stale, 1000) is None



def test_public_names_are_exported_and_documented() -> None:
    for name in anarchon_postgres.__all__:
        obj = getattr(anarchon_postgres, name)
        assert isinstance(obj, int) or (obj.__doc__ or "").strip(), name
    assert {"PostgresBackend", "FenceContext"} <= set(anarchon_postgres.__all__)
    assert PostgresBackend.__doc__
    assert anarchon_postgres.__doc__


async def test_batches_in_different_orders_do_not_deadlock(schema: str) -> None:
    """Three replicas claim the same 200 jobs at once, each batch in its own order: rows are
    locked in one order, so no batch waits on another in a cycle (a deadlock aborts a batch)."""
    import random

    backends = [PostgresBackend(URL, schema=schema) for _ in range(3)]
    for backend in backends:
        await backend.open()
    try:
        for round_ in range(5):
            base = (now_ms() // 10_000 - 3) * 10_000 + round_
            batches = []
            for k in range(3):
                requests = [ClaimRequest("ns", f"job{round_}-{i}", base, f"r{k}") for i in range(200)]
                random.Random(round_ * 3 + k).shuffle(requests)
                batches.append(requests)
            results = await asyncio.gather(*(b.claim_many(r) for b, r in zip(backends, batches, strict=True)))
            winners: dict[str, str] = {}
            for batch in results:
                for result in batch:
                    if result.won:
                        assert result.job not in winners, f"two winners for {result.job}"
                        winners[result.job] = result.holder or ""
            assert len(winners) == 200
    finally:
        for backend in backends:
            await backend.close()


async def test_renew_many_two_slots_of_one_job_and_names_in_reverse_in_one_statement(
    pg: PostgresBackend,
) -> None:
    """One statement renews a job under two slots (overlap=allow), jobs given in reverse name order,
    one lease twice, next to a lost lease; results keep the input order."""
    base = (now_ms() // 10_000 - 3) * 10_000
    claims = [
        ClaimRequest("ns", "job", base, "a", 5_000, overlap=Overlap.ALLOW),
        ClaimRequest("ns", "job", base + 10_000, "b", 5_000, overlap=Overlap.ALLOW),
        ClaimRequest("ns", "z-job", base, "a", 5_000), ClaimRequest("ns", "m-job", base, "a", 5_000),
        ClaimRequest("ns", "a-job", base, "a", 5_000),
    ]
    leases = []
    for request in claims:
        result = await pg.claim(request)
        assert result.lease is not None, result
        leases.append(result.lease)
    old, new, z, m, a = leases
    batch = [
        (z, 60_000), (new, 70_000), (replace(m, token=m.token + 1), 60_000), (m, 60_000), (old, 80_000),
        (a, 60_000), (old, 90_000),
    ]
    calls = _count_statements(pg)
    results = await pg.renew_many(batch)
    assert calls == ["renew"], "a batch of renewals is one statement, duplicate jobs included"
    assert results[2] is None, "a forged token does not renew"
    renewed = [r for r in results if r is not None]
    assert [(r.job, r.slot, r.token, r.owner) for r in renewed] == [
        (x.job, x.slot, x.token, x.owner) for i, (x, _) in enumerate(batch) if i != 2
    ]
    # One server clock for the whole statement: each expiry is that instant plus its own lease_ms.
    assert len({r.expires_at - ms for r, (_, ms) in zip(results, batch, strict=True) if r is not None}) == 1
    row = await pg.pool.fetchrow(
        f"SELECT expires_at, (others -> $1::text ->> 'expires_at')::bigint AS old_expires_at "
        f"FROM {pg.sql.qualified} WHERE namespace = 'ns' AND job = 'job'", str(old.slot),
    )
    assert row is not None
    assert results[1] is not None and row["expires_at"] == results[1].expires_at
    assert results[6] is not None and row["old_expires_at"] == results[6].expires_at, (
        "a lease renewed twice in a batch keeps the later renewal, as if renewed one after another"
    )
    for lease, got in zip([z, m, a], [results[0], results[3], results[5]], strict=True):
        state = await pg.inspect("ns", lease.job)
        assert state is not None and got is not None and state.expires_at == got.expires_at
    # Both runs of the job still hold and still end normally.
    assert (await pg.claim(ClaimRequest("ns", "job", base, "c", overlap=Overlap.ALLOW))).outcome is (
        ClaimOutcome.TAKEN
    )
    assert await pg.release_many([(old, ReleaseOutcome.DONE), (new, ReleaseOutcome.DONE)]) == [True, True]
    assert await pg.renew_many([(old, 1_000), (new, 1_000)]) == [None, None]


@pytest.mark.parametrize("collation", ["default", "en-US-x-icu"])
@pytest.mark.parametrize("kind", ["renew_many", "release_many"])
async def test_lease_batches_and_claims_do_not_deadlock(schema: str, kind: str, collation: str) -> None:
    """A batch of claims, then a batch of renewals (or releases) given in reverse name order, on the
    same jobs, both stuck behind a row locked in the middle: both lock rows in code-point order,
    whatever the column's collation, so when the row is freed both finish and neither is aborted
    as a deadlock. (The holder's leases have expired, so the claims are takeovers: a claim that
    loses already in its snapshot locks no row.)"""
    holder, claimer = backends = [PostgresBackend(URL, schema=schema) for _ in range(2)]
    for backend in backends:
        await backend.open()
    blocker = await asyncpg.connect(URL)
    try:
        if collation != "default":
            if not await blocker.fetchval("SELECT count(*) FROM pg_collation WHERE collname = $1", collation):
                pytest.skip(f"the server has no collation {collation!r} (built without ICU?)")
            # As in a database created with that locale, where 'job-000' sorts before 'Job-001'.
            await blocker.execute(
                f'ALTER TABLE {holder.sql.qualified} ALTER COLUMN job TYPE text COLLATE "{collation}"'
            )
        base = (now_ms() // 10_000 - 3) * 10_000
        # Mixed case: code-point order puts every 'Job-' before every 'job-', a locale interleaves them.
        names = [f"{'Job' if i % 2 else 'job'}-{i:03d}" for i in range(200)]
        won = await holder.claim_many([ClaimRequest("ns", n, base, "holder", lease_ms=1) for n in names])
        leases = [r.lease for r in won if r.lease is not None]
        assert len(leases) == 200

        async def waiting_behind_blocker(count: int) -> None:
            seen = 0
            for _ in range(100):
                seen = await blocker.fetchval(
                    "WITH w AS (SELECT pid, pg_blocking_pids(pid) AS b FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock') "
                    "SELECT count(*) FROM w WHERE pg_backend_pid() = ANY(w.b) OR EXISTS "
                    "(SELECT 1 FROM w v WHERE v.pid = ANY(w.b) AND pg_backend_pid() = ANY(v.b))"
                )
                if seen == count:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"{seen} statement(s) wait behind the locked row, expected {count}")

        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(
            f"SELECT 1 FROM {holder.sql.qualified} WHERE namespace = 'ns' AND job = 'Job-101' FOR UPDATE"
        )
        # The claims go first and hold the rows before 'Job-101' in code-point order.
        claims = asyncio.ensure_future(claimer.claim_many([ClaimRequest("ns", n, base, "b") for n in names]))
        await waiting_behind_blocker(1)
        batch: asyncio.Future[Any]
        if kind == "renew_many":
            batch = asyncio.ensure_future(holder.renew_many([(x, 60_000) for x in reversed(leases)]))
        else:
            batch = asyncio.ensure_future(
                holder.release_many([(x, ReleaseOutcome.DONE) for x in reversed(leases)])
            )
        await waiting_behind_blocker(2)
        await tx.rollback()
        claimed, done = await asyncio.wait_for(asyncio.gather(claims, batch), 30)
        assert all(r.outcome is ClaimOutcome.WON and r.attempt == 2 for r in claimed), claimed
        assert not any(done), "the claims came first and took every run over"
    finally:
        await blocker.close()
        for backend in backends:
            await backend.close()


async def test_fence_of_a_triggered_run_checks_the_trigger_record(pg: PostgresBackend) -> None:
    control = await pg.set_control("ns", "pay", trigger=True)
    won = await pg.claim(ClaimRequest("ns", "pay" + TRIGGER_SUFFIX, control.trigger, "a"))
    assert won.lease is not None
    ctx = JobContext(name="pay", slot=control.trigger, attempt=1, token=won.lease.token, instance_id="a",
                     namespace="ns", signal=CancelSignal(), logger=logging.getLogger("t"), triggered=True)
    async with pg.pool.acquire() as conn, conn.transaction():
        await pg.fence(conn, ctx)  # the job's own record does not exist: only the trigger's does
    assert await pg.release(won.lease, ReleaseOutcome.DONE)
    async with pg.pool.acquire() as conn, conn.transaction():
        with pytest.raises(LeaseLost):
            await pg.fence(conn, ctx)
