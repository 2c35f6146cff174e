"""What a stored herd's fire costs PostgreSQL, statement by statement.

    python bench/pg_fire.py [--count 20000] [--chunk 2000] [--url postgresql://...]

Writes `--count` one-off stored schedules due at one second (`Schedules.add_many`), then does, chunk
by chunk as a replica draining that herd does, each step of a fire on its own: the claim
(`claim_many`), the release (`release_many`), the history record (`record_runs`) and the move of the
due index (`advance_schedules`). Prints, per step, the server's CPU per fire (the backend
processes of the benchmark's database, read from /proc, so only for a server on this machine) and
the wall time, and the sum: what bounds a herd's drain on this store, step by step. `--chunk 1` is
a fire at a time, as at a low rate (M2). Runs in a database of its own (`bench_pg_fire`) on the
server of `--url`, created afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from datetime import UTC, datetime, timedelta

from pg_claims import backend_pids, server_cpu

PG = "postgresql://postgres@127.0.0.1:5432"
DB = "bench_pg_fire"
STEPS = ("claim", "release", "history", "advance")


async def herd(url: str, count: int, chunk: int) -> dict[str, tuple[float, float]]:
    """Each step's (server CPU s, wall s) over the whole herd."""
    from anarchon import At, ClaimRequest, NewSchedule, ReleaseOutcome, Schedules, to_ms
    from anarchon.backends import RunRecord
    from anarchon_postgres import PostgresBackend

    namespace = "herd"
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3 + count / 5000)
    versions: dict[str, int] = {}
    async with Schedules.from_url(url, namespace=namespace) as schedules:
        for first in range(0, count, 10_000):
            for added in await schedules.add_many(NewSchedule(f"s-{i:07d}", "herd", At(to_ms(due)))
                                                  for i in range(first, min(count, first + 10_000))):
                assert added.schedule is not None
                versions[added.schedule.id] = added.schedule.version
    backend = PostgresBackend(url)
    await backend.open()
    try:
        await backend.pool.execute("ANALYZE")
        pids = await backend_pids(backend, DB)
        slot = to_ms(due)
        await asyncio.sleep(max(0.0, slot / 1000 - time.time()))  # (a slot is not claimed before it)
        names = sorted(versions)
        chunks = [names[lo:lo + chunk] for lo in range(0, count, chunk)]
        spent: dict[str, tuple[float, float]] = {}
        # Each step for the whole herd, chunk by chunk, before the next step: its CPU is read once.
        s0, t0 = server_cpu(pids), time.perf_counter()
        leases = []
        for part in chunks:
            results = await backend.claim_many([ClaimRequest(namespace, n, slot, "r0") for n in part])
            leases.append([r.lease for r in results if r.lease is not None])
            assert len(leases[-1]) == len(part), f"{len(leases[-1])} of {len(part)} won"
        s0, t0 = _step(spent, "claim", pids, s0, t0)
        for held in leases:
            await backend.release_many([(x, ReleaseOutcome.DONE) for x in held])
        s0, t0 = _step(spent, "release", pids, s0, t0)
        now = int(time.time() * 1000)
        for held in leases:
            await backend.record_runs(namespace, [RunRecord(x.job, x.slot, x.attempt, x.token, "r0", "done",
                                                            now, 1) for x in held], 100)
        s0, t0 = _step(spent, "history", pids, s0, t0)
        for held in leases:
            await backend.advance_schedules(namespace, [(x.job, versions[x.job], None) for x in held])
        _step(spent, "advance", pids, s0, t0)
        return spent
    finally:
        await backend.close()


def _step(spent: dict[str, tuple[float, float]], step: str, pids: list[int], s0: float | None, t0: float
          ) -> tuple[float | None, float]:
    """Note `step`'s server CPU and wall time since (s0, t0); return the new start."""
    s1, t1 = server_cpu(pids), time.perf_counter()
    spent[step] = ((s1 or 0.0) - (s0 or 0.0), t1 - t0)
    return server_cpu(pids), time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--chunk", type=int, default=2000)
    ap.add_argument("--url", default=PG, help="the server, without a database")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting of the benchmark's database (ALTER DATABASE ... SET), e.g. jit=off or "
                    "plan_cache_mode=force_generic_plan; repeatable")
    args = ap.parse_args()
    settings = [f"ALTER DATABASE {DB} SET {name} = {value}"
                for name, _, value in (pair.partition("=") for pair in args.set)]
    for sql in (f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)", f"CREATE DATABASE {DB}", *settings):
        subprocess.run(["psql", f"{args.url}/postgres", "-q", "-c", sql], check=True)
    spent = asyncio.run(herd(f"{args.url}/{DB}", args.count, args.chunk))
    total = sum(cpu for cpu, _ in spent.values())
    print(f"{'step':<8} {'server µs/fire':>14} {'wall µs/fire':>12} {'share':>6}")
    for step in STEPS:
        cpu, wall = spent[step]
        print(f"{step:<8} {cpu / args.count * 1e6:>14.0f} {wall / args.count * 1e6:>12.0f} "
              f"{cpu / total * 100 if total else 0:>5.0f}%")
    print(f"{'all':<8} {total / args.count * 1e6:>14.0f} "
          f"{sum(w for _, w in spent.values()) / args.count * 1e6:>12.0f}")


if __name__ == "__main__":
    main()
