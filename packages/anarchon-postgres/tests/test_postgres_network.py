"""Through a fault proxy: every call has a deadline, and asyncpg's reconnection noise stays quiet."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import ssl
import time

import pytest
from asyncpg import connect_utils

from anarchon import BackendUnavailable, ClaimOutcome, ClaimRequest
from anarchon_postgres import PostgresBackend, _backend
from anarchon_testkit.faultproxy import FaultProxy

URL = os.environ.get("ANARCHON_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
pytestmark = pytest.mark.services



async def test_a_call_held_in_a_partition_fails_at_its_deadline(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_backend, "OP_TIMEOUT_S", 0.5)
    async with FaultProxy("127.0.0.1", 5432) as proxy:
        backend = PostgresBackend(proxy.url(URL), schema=schema)
        await backend.open()
        try:
            slot = (int(time.time() * 1000) // 1000 - 1) * 1000
            await proxy.partition()
            began = time.monotonic()
            with pytest.raises(BackendUnavailable, match=r"no answer within 0\.5 s"):
                await asyncio.wait_for(backend.claim(ClaimRequest("ns", "job", slot, "a")), 5)
            assert time.monotonic() - began < 2
            await proxy.heal()
            await proxy.reset()  # the held statement's connection is gone: a new one serves the next call
            result = await backend.claim(ClaimRequest("ns", "job", slot + 1000, "a"))
            assert result.outcome in (ClaimOutcome.WON, ClaimOutcome.EARLY), result
        finally:
            await asyncio.wait_for(backend.close(), 15)


async def test_a_missed_deadline_replaces_the_pools_other_connections(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_backend, "OP_TIMEOUT_S", 0.5)
    backend = PostgresBackend(URL, schema=schema, min_size=2, max_size=2)
    await backend.open()
    pid = "SELECT pg_backend_pid()"
    try:
        async with backend.pool.acquire() as other:
            before = await other.fetchval(pid)
            with pytest.raises(BackendUnavailable, match=r"no answer within 0\.5 s"):
                await backend._fetch("sleep", "SELECT pg_sleep(1)")  # on the pool's second connection
        async with backend.pool.acquire() as first, backend.pool.acquire() as second:
            assert before not in {await first.fetchval(pid), await second.fetchval(pid)}
    finally:
        await asyncio.wait_for(backend.close(), 15)


def test_asyncpg_pool_reconnection_warnings_go_to_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    pool_log = logging.getLogger("asyncpg.pool")
    try:
        raise ConnectionRefusedError("connection refused")
    except ConnectionRefusedError:
        pool_log.warning("Failed to restore the pool connection floor; retrying", exc_info=True)
    pool_log.warning("Pool.close() is taking over 60 seconds to complete.")
    assert "pool connection floor" not in caplog.text
    assert "taking over 60 seconds" in caplog.text  # asyncpg's other warnings are left alone
    caplog.set_level(logging.DEBUG, logger="anarchon.postgres")
    pool_log.warning("Failed to restore the pool connection floor; retrying")
    assert "pool connection floor" in caplog.text


async def test_asyncpgs_abandoned_tls_probe_goes_to_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    """A connection attempt cancelled while asyncpg asks the server about TLS leaves asyncpg's
    probe future failed with no one waiting; asyncio's report of it is not the user's business."""
    caplog.set_level(logging.INFO)
    loop = asyncio.get_running_loop()

    def abandon(exc: ConnectionError | None) -> None:
        probe = connect_utils.TLSUpgradeProto(loop, "127.0.0.1", 5432, ssl.create_default_context(), True)
        if exc is None:
            probe.connection_lost(None)  # the socket of the cancelled attempt closes
        else:
            probe.on_data.set_exception(exc)

    abandon(None)
    gc.collect()
    assert "unexpected connection_lost" not in caplog.text
    abandon(ConnectionError("refused by a test"))  # any other unretrieved failure is still reported
    gc.collect()
    assert "Future exception was never retrieved" in caplog.text and "refused by a test" in caplog.text
