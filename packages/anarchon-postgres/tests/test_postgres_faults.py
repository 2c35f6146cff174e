"""Faults against the real server: racing connections, killed connections, a server restart."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass

import asyncpg
import pytest

from anarchon import ClaimOutcome, ClaimRequest, JobContext, Scheduler
from anarchon_postgres import PostgresBackend

URL = os.environ.get("ANARCHON_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
pytestmark = pytest.mark.services



async def _connect_retrying() -> asyncpg.Connection:
    for _ in range(100):
        try:
            return await asyncpg.connect(URL)
        except (OSError, asyncpg.PostgresError):
            await asyncio.sleep(0.1)
    return await asyncpg.connect(URL)


def past_slot() -> int:
    return (int(time.time() * 1000) // 10_000 - 3) * 10_000


async def test_race_of_32_connections(schema: str) -> None:
    backends = [PostgresBackend(URL, schema=schema, min_size=1, max_size=1) for _ in range(32)]
    await asyncio.gather(*(b.open() for b in backends))
    try:
        base = past_slot()
        for round_ in range(3):
            slot = base + round_ * 10_000
            jobs = [f"r{round_}-job-{i}" for i in range(8)]
            start = asyncio.Event()

            async def contend(i: int, b: PostgresBackend, slot: int = slot, start: asyncio.Event = start,
                              jobs: list[str] = jobs) -> list[tuple[str, ClaimOutcome, str | None, int]]:
                await start.wait()
                reqs = [ClaimRequest("ns", job, slot, f"o{i}") for job in jobs]
                # Half the contenders batch their claims, half send them one by one.
                results = await (b.claim_many(reqs) if i % 2 else
                                 asyncio.gather(*(b.claim(r) for r in reqs)))
                return [(r.job, r.outcome, r.holder, r.attempt) for r in results]

            tasks = [asyncio.create_task(contend(i, b)) for i, b in enumerate(backends)]
            await asyncio.sleep(0.05)
            start.set()
            answers = [a for t in await asyncio.gather(*tasks) for a in t]
            for job in jobs:
                mine = [a for a in answers if a[0] == job]
                winners = [a for a in mine if a[1] is ClaimOutcome.WON]
                assert len(winners) == 1, (round_, job, winners)
                winner = winners[0][2]
                losers = [a for a in mine if a[1] is not ClaimOutcome.WON]
                # Every loser knows why, and who holds the slot (none fell back to an unknown holder).
                assert {a[1] for a in losers} == {ClaimOutcome.TAKEN}, (round_, job)
                assert {a[2] for a in losers} == {winner}, (round_, job)

        # A 0 ms lease has expired at once: 32 connections race its takeover.
        assert (await backends[0].claim(ClaimRequest("ns", "tk", base, "first", lease_ms=0))).won
        results = await asyncio.gather(*(b.claim(ClaimRequest("ns", "tk", base, f"t{i}"))
                                         for i, b in enumerate(backends)))
        won = [r for r in results if r.won]
        assert len(won) == 1
        assert won[0].lease is not None
        assert won[0].lease.attempt == 2
        assert {r.outcome for r in results if not r.won} == {ClaimOutcome.TAKEN}
        state = await backends[0].inspect("ns", "tk")
        assert state is not None
        assert state.token == won[0].lease.token
    finally:
        await asyncio.gather(*(b.close() for b in backends))


@dataclass
class Recorder:
    starts: list[tuple[str, int, int, str, float]]

    def handler(self, instance: str, seconds: float = 0.0):  # type: ignore[no-untyped-def]
        async def run(ctx: JobContext) -> None:
            self.starts.append((ctx.name, ctx.slot, ctx.attempt, instance, time.time()))
            if seconds:
                await ctx.sleep(seconds)

        return run


async def _terminate_ours(admin: asyncpg.Connection, backends: list[PostgresBackend]) -> int:
    """pg_terminate_backend every connection of `backends` (pool and LISTEN), found by their SQL."""
    patterns = [f"%{backends[0].sql.schema}%", f"%{backends[0].channel}%"]
    return int(await admin.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE pid <> pg_backend_pid() AND (query LIKE $1 OR query LIKE $2)", *patterns,
    ))


def _schedulers(schema: str, rec: Recorder) -> tuple[list[Scheduler[PostgresBackend]], list[PostgresBackend]]:
    backends = [PostgresBackend(URL, schema=schema) for _ in range(2)]
    schedulers = []
    for i, backend in enumerate(backends):
        s: Scheduler[PostgresBackend] = Scheduler(backend, lease="2s", heartbeat="0.4s", namespace="faults",
                                                  instance_id=f"r{i}")
        s.every("tick", "1s", rec.handler(f"r{i}"), catch_up=0)
        s.every("long", "2s", rec.handler(f"r{i}", 1.2), catch_up=0)
        schedulers.append(s)
    return schedulers, backends


def _check(rec: Recorder, since: float, until: float) -> None:
    # Before the schedulers stop, no slot ran twice, not even as attempt 2 (a dropped connection
    # must not cost a re-run); the stop itself may hand a long run over as attempt 2.
    counts = Counter((job, slot) for job, slot, _a, _i, t in rec.starts if t < until)
    assert not [k for k, n in counts.items() if n > 1], f"ran twice: {rec.starts}"
    attempts = Counter((job, slot, a) for job, slot, a, _i, _t in rec.starts)
    assert not [k for k, n in attempts.items() if n > 1], f"two winners: {rec.starts}"
    ticks = {slot for job, slot, *_ in rec.starts if job == "tick"}
    expected = set(range(int(since) * 1000 + 1000, int(until) * 1000 - 1000, 1000))
    assert expected <= ticks, f"missed tick slots: {sorted(expected - ticks)}"


async def test_terminated_connections_recover_without_double_runs(schema: str) -> None:
    rec = Recorder([])
    schedulers, backends = _schedulers(schema, rec)
    admin = await asyncpg.connect(URL)
    try:
        for s in schedulers:
            await s.start()
        listeners = [b.listener for b in backends if b.listener is not None]
        since = time.time()
        killed = 0
        for _ in range(3):
            await asyncio.sleep(1.7)
            killed += await _terminate_ours(admin, backends)
        await asyncio.sleep(2.5)
        until = time.time()
    finally:
        for s in schedulers:
            await s.stop()
        await admin.close()
    assert killed >= 3
    _check(rec, since, until)
    assert any(job == "long" for job, *_ in rec.starts)
    assert len(listeners) == 2
    assert all(lst.reconnects >= 1 for lst in listeners)


PG_CTL = shutil.which("pg_ctlcluster")


def _pg(action: str) -> None:
    version = os.environ.get("ANARCHON_PG_VERSION") or sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run([PG_CTL or "pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action],
                   check=True, capture_output=True, timeout=60)


@pytest.mark.serial
@pytest.mark.skipif(PG_CTL is None or not os.path.isdir("/etc/postgresql"),
                    reason="needs pg_ctlcluster to restart the local server")
@pytest.mark.skipif("127.0.0.1" not in URL and "localhost" not in URL,
                    reason="restarts only a server on this machine")
async def test_server_restart_scheduler_recovers(schema: str) -> None:
    rec = Recorder([])
    schedulers, backends = _schedulers(schema, rec)
    try:
        for s in schedulers:
            await s.start()
        listeners = [b.listener for b in backends if b.listener is not None]
        since = time.time()
        await asyncio.sleep(1.5)
        await asyncio.to_thread(_pg, "restart")
        await asyncio.sleep(4.0)
    finally:
        until = time.time()
        for s in schedulers:
            await s.stop()
        # Other tests share this server: make sure it is up whatever happened above.
        try:
            await (await _connect_retrying()).close()
        except Exception:
            await asyncio.to_thread(_pg, "start")
    # The restart costs no re-run; only the stop (r0 stops first) may hand a long run to r1 as attempt 2.
    counts = Counter((job, slot) for job, slot, _a, _i, t in rec.starts if t < until)
    assert not [k for k, n in counts.items() if n > 1], f"ran twice: {rec.starts}"
    attempts = Counter((job, slot, a) for job, slot, a, _i, _t in rec.starts)
    assert not [k for k, n in attempts.items() if n > 1], f"two winners: {rec.starts}"
    after = [s for s in rec.starts if s[0] == "tick" and s[4] > since + 4.0]
    assert after, f"no tick ran after the restart: {rec.starts}"
    assert len(listeners) == 2
    assert all(lst.reconnects >= 1 for lst in listeners)

