"""PostgresBackend in production shapes: through PgBouncer in transaction mode (push checked at start,
falling back to polling or to a direct `listen_url`), and through a standby's promotion."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest

from anarchon import BackendError
from anarchon.backends import ClaimOutcome, ClaimRequest
from anarchon_postgres import PostgresBackend
from anarchon_testkit.cluster import check_every_slot_once
from anarchon_testkit.topology import PgBouncer, PgStandby, Topologies, run_through_failover


def _table() -> str:
    return f"anarchon_topo_{uuid.uuid4().hex[:8]}"


async def _start_log(backend: PostgresBackend, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="anarchon.postgres"):
        await backend.open()
        await backend.subscribe("ns", lambda job, slot: None)
    return [r.getMessage() for r in caplog.records if "releases are" in r.getMessage()]


async def test_behind_pgbouncer_push_is_checked_and_polling_said(
    topology: Topologies, caplog: pytest.LogCaptureFixture
) -> None:
    bouncer = topology.get(PgBouncer)
    table = _table()
    backend = PostgresBackend(bouncer.url, table=table, statement_cache_size=0)
    try:
        [line] = await _start_log(backend, caplog)
        assert line.startswith("releases are not pushed") and "set listen_url" in line, line
        assert backend.listener is None
        [won] = await backend.claim_many([ClaimRequest("ns", "job", 1000, "me", 5000, 1)])
        assert won.outcome is ClaimOutcome.WON
    finally:
        await backend.close()

    direct = PostgresBackend(bouncer.url, table=table, statement_cache_size=0, listen_url=bouncer.direct_url)
    try:
        [line] = await _start_log(direct, caplog)
        assert line.startswith("releases are pushed by LISTEN/NOTIFY on postgresql://postgres@"), line
        assert direct.listener is not None and direct.listener.connected.is_set()
        async with direct.pool.acquire() as conn:
            await conn.execute(f"DROP TABLE {table}")
    finally:
        await direct.close()


async def _claim_rounds(backend: PostgresBackend, rounds: int) -> list[BaseException]:
    """Claims of eight jobs at once, round after round (so the pooler hands out several server
    connections); the errors, stopping at the first round that has any."""
    for r in range(rounds):
        results = await asyncio.gather(
            *(backend.claim_many([ClaimRequest("ns", f"job{i}", 1000 * (r + 1), "me", 5000, 1)])
              for i in range(8)), return_exceptions=True)
        errors = [x for x in results if isinstance(x, BaseException)]
        if errors:
            return errors
    return []


async def _drop(bouncer: PgBouncer, table: str) -> None:
    direct = PostgresBackend(bouncer.direct_url, table=table)
    await direct.open()
    try:
        async with direct.pool.acquire() as conn:
            await conn.execute(f"DROP TABLE IF EXISTS {table}")
    finally:
        await direct.close()


async def test_pgbouncer_without_its_options_fails_with_one_error_naming_the_fix(
    topology: Topologies,
) -> None:
    bouncer = topology.get(PgBouncer)
    table = _table()
    backend = PostgresBackend(bouncer.url, table=table, min_size=4, max_size=4)
    errors: list[BaseException] = []
    try:
        try:
            await backend.open()
            errors = await _claim_rounds(backend, 30)
        except BackendError as exc:
            errors = [exc]
        finally:
            await backend.close()
    finally:
        await _drop(bouncer, table)
    assert errors, "no prepared statement was lost behind a transaction-mode pooler: nothing was shown"
    for error in errors:
        assert isinstance(error, BackendError), repr(error)
        assert "statement_cache_size=0" in str(error) and "listen_url=" in str(error), str(error)


async def test_the_pgbouncer_url_that_cluster_up_prints_works_as_printed(topology: Topologies) -> None:
    bouncer = topology.get(PgBouncer)
    table = _table()
    backend = PostgresBackend.from_url(f"{bouncer.anarchon_url}&table={table}")
    try:
        await backend.open()
        await backend.subscribe("ns", lambda job, slot: None)
        assert backend.listener is not None and backend.listener.connected.is_set()
        assert await _claim_rounds(backend, 30) == []
    finally:
        await backend.close()
        await _drop(bouncer, table)


def test_listen_url_is_a_url_option() -> None:
    backend = PostgresBackend.from_url(
        "postgresql://u@127.0.0.1:6432/test?statement_cache_size=0&listen_url=postgresql://u@127.0.0.1:5432/test")
    assert backend._listen_dsn == "postgresql://u@127.0.0.1:5432/test"
    assert "listen_url" not in str(backend._target)


@pytest.mark.topology_kit
def test_three_replicas_through_pgbouncer_run_every_slot_once(topology: Topologies, tmp_path: Path) -> None:
    bouncer = topology.get(PgBouncer)
    check_every_slot_once(f"{bouncer.url}?statement_cache_size=0&table={_table()}", tmp_path, seconds=8)


async def _claim(url: str, owner: str, slot: int) -> ClaimOutcome:
    backend = PostgresBackend(url, min_size=1, max_size=1)
    await backend.open()
    try:
        [result] = await backend.claim_many([ClaimRequest("ns", "job", slot, owner, 60_000, 1)])
        return result.outcome
    finally:
        await backend.close()


@pytest.mark.topology_kit
@pytest.mark.parametrize("synchronous", [False, True], ids=["async-replication", "synchronous_commit"])
async def test_a_won_claim_survives_promotion_only_with_a_synchronous_standby(
    synchronous: bool, topology: Topologies
) -> None:
    pg = topology.new(PgStandby)
    pg.set_synchronous(synchronous)
    if not synchronous:
        # Asynchronous replication lets the primary acknowledge commits the standby does not have
        # yet; lagging is made certain by stopping the standby's WAL receiver.
        pg.detach_standby()
    assert await _claim(pg.primary_url, "a", 60_000) is ClaimOutcome.WON
    pg.kill_primary()
    pg.promote()
    # On the promoted standby, the same slot again: lost (won a second time) or remembered (taken).
    again = await _claim(pg.standby_url, "b", 60_000)
    assert again is (ClaimOutcome.TAKEN if synchronous else ClaimOutcome.WON)
    pg.stop()


@pytest.mark.topology_kit
def test_a_promotion_under_three_replicas_on_a_multi_host_url(topology: Topologies, tmp_path: Path) -> None:
    pg = topology.new(PgStandby)
    pg.set_synchronous(True)

    def fail(_: object) -> None:
        pg.kill_primary()
        pg.promote()

    measured = run_through_failover(pg.url, tmp_path, fail, recovered=lambda: pg.writable(pg.ports[1]))
    print(f"\nPostgreSQL promotion of the standby: {measured}")
    pg.stop()
