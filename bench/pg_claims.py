"""Three replicas claiming the same N jobs' slot at once on PostgreSQL, statement by statement.

    python bench/pg_claims.py [--jobs 10000] [--rounds 5] [--batch 0] [--url postgresql://...]

Each round, three PostgresBackend clients (as three replicas would) claim slot k of every job at
the same moment with `claim_many` (in batches of `--batch` requests, 0: all at once), then the
winners release their runs. Prints per round the wall time until every claim is answered, the
client's CPU time (the three clients share one process), the CPU time of the server's backend
processes (read from /proc, so only for a server on this machine), the statements sent and the winners
(exactly one per job, or the run is wrong). Runs in a database of its own (`bench_pg_claims`) on
the server of `--url` (default the local one on 5432), created afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from typing import Any

from run import proc_cpu

from anarchon import ClaimRequest, ReleaseOutcome
from anarchon_postgres import PostgresBackend

PG = "postgresql://postgres@127.0.0.1:5432"
DB = "bench_pg_claims"


class Counting(PostgresBackend):
    """Counts the statements sent."""

    statements = 0

    async def _fetch(self, what: str, query: str, *args: Any, rows: int = 1) -> list[Any]:
        Counting.statements += 1
        return await super()._fetch(what, query, *args, rows=rows)


def server_cpu(pids: list[int]) -> float | None:
    """The CPU seconds the server processes `pids` have used, or None when /proc cannot tell."""
    cpus = [proc_cpu(pid) for pid in pids]
    return None if None in cpus else sum(c for c in cpus if c is not None)


async def backend_pids(backend: PostgresBackend, database: str = DB) -> list[int]:
    """The server processes of every client connection to `database` (no autovacuum)."""
    rows = await backend.pool.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'", database)
    return [r["pid"] for r in rows]


def ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.0f} ms"


async def replica(backend: PostgresBackend, owner: str, jobs: int, slot: int, batch: int) -> list[Any]:
    reqs = [ClaimRequest("bench", f"j{i:05d}", slot, owner, 5000, 3) for i in range(jobs)]
    size = batch or jobs
    out: list[Any] = []
    chunks = [reqs[i:i + size] for i in range(0, jobs, size)]
    for part in await asyncio.gather(*[backend.claim_many(c) for c in chunks]):
        out.extend(part)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--url", default=PG, help="the server, without a database")
    args = ap.parse_args()
    for sql in (f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", f"CREATE DATABASE {DB}"):
        subprocess.run(["psql", f"{args.url}/postgres", "-q", "-c", sql], check=True)
    asyncio.run(rounds(args))


async def rounds(args: argparse.Namespace) -> None:
    backends = [Counting(f"{args.url}/{DB}") for _ in range(3)]
    for b in backends:
        await b.open()
    # Every round's slot is in the past (a round can take under a second): none is claimed early.
    slot0 = (int(time.time() * 1000) // 1000 - args.rounds) * 1000
    try:
        for k in range(args.rounds):
            Counting.statements = 0
            slot = slot0 + k * 1000
            # The connections open before the round: a connection opened during it is not counted,
            # so read the rounds after the first.
            pids = await backend_pids(backends[0])
            s0 = server_cpu(pids)
            t0, c0 = time.perf_counter(), time.process_time()
            results = await asyncio.gather(*[replica(b, f"r{n}", args.jobs, slot, args.batch)
                                             for n, b in enumerate(backends)])
            took, cpu = time.perf_counter() - t0, time.process_time() - c0
            s1 = server_cpu(pids)
            statements = Counting.statements
            won = [r for rs in results for r in rs if r.won]
            assert len(won) == args.jobs, f"{len(won)} winners for {args.jobs} jobs"
            assert len({r.job for r in won}) == args.jobs, "two winners for one job"
            t1 = time.perf_counter()
            for n, rs in enumerate(results):
                leases = [(r.lease, ReleaseOutcome.DONE) for r in rs if r.lease is not None]
                if leases:
                    await backends[n].release_many(leases)
            s2 = server_cpu(pids)
            claims_cpu = None if s0 is None or s1 is None else s1 - s0
            releases_cpu = None if s1 is None or s2 is None else s2 - s1
            print(f"round {k}: claims answered in {took * 1000:7.0f} ms ({cpu * 1000:4.0f} ms of client CPU, "
                  f"{ms(claims_cpu)} of server CPU) with {statements} statements; "
                  f"releases {1000 * (time.perf_counter() - t1):6.0f} ms ({ms(releases_cpu)} of server CPU)",
                  flush=True)
    finally:
        for b in backends:
            await b.close()


if __name__ == "__main__":
    main()
