"""Three replicas claiming the same N jobs' slot at once on RabbitMQ, driver only (no scheduler).

    python bench/rabbit_claims.py [--jobs 200] [--rounds 20] [--every 1.0] [--horizon 5m]
                                  [--transient] [--url amqp://guest:guest@127.0.0.1:5672/]

Each round (one every `--every` seconds, like a job every second), three RabbitMQBackend clients
(as three replicas would) claim slot k of every job at the same moment with `claim_many`. Prints per
round the wall time until each client's batch is answered (slowest of the three), the client CPU
time (the three clients share one process), the broker's CPU time (beam.smp, from /proc) and the
winners (exactly one per job, or the run is wrong); then p50/p99 over the rounds. Each request
carries `stale_after` (the next round's slot less 1 ms) as the scheduler's do, so the winners
declare the next round's gate queues ahead. `--transient`: `persistent=False`. Queues use a
prefix of their own (`benchrc<pid>`), which their horizon deletes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from anarchon import ClaimOutcome, ClaimRequest
from anarchon_rabbitmq import RabbitMQBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import store_cpu

STORE = ("beam.smp",)


async def client(backend: RabbitMQBackend, owner: str, jobs: int, slot: int,
                 following: int) -> tuple[float, int]:
    # stale_after: the next slot less 1 ms, as the scheduler sets it.
    reqs = [ClaimRequest("bench", f"j{i:05d}", slot, owner, 5000, 3, stale_after=following - 1)
            for i in range(jobs)]
    t0 = time.perf_counter()
    results = await backend.claim_many(reqs)
    won = sum(1 for r in results if r.outcome is ClaimOutcome.WON)
    return time.perf_counter() - t0, won


async def main(args: argparse.Namespace) -> None:
    prefix = f"benchrc{os.getpid()}"
    kwargs: dict[str, Any] = {"prefix": prefix, "horizon": args.horizon,
                              "persistent": not args.transient}
    backends = [RabbitMQBackend(args.url, **kwargs) for _ in range(3)]
    for b in backends:
        await b.open()
    walls: list[float] = []
    print("round  wall_ms  client_cpu_ms  broker_cpu_ms  winners")
    cpu_total = broker_total = 0.0
    try:
        start = time.time()
        for k in range(args.rounds):
            due = start + k * args.every
            await asyncio.sleep(max(0.0, due - time.time()))
            slot = int(due * 1000)
            c0, b0 = time.process_time(), store_cpu(STORE)
            following = int((due + args.every) * 1000)
            out = await asyncio.gather(*(client(b, f"r{i}", args.jobs, slot, following)
                                         for i, b in enumerate(backends)))
            wall = max(w for w, _ in out)
            cpu, broker = time.process_time() - c0, store_cpu(STORE) - b0
            won = sum(n for _, n in out)
            walls.append(wall)
            cpu_total += cpu
            broker_total += broker
            print(f"{k:5d}  {wall * 1000:7.1f}  {cpu * 1000:13.1f}  {broker * 1000:13.0f}  {won:7d}"
                  + ("" if won == args.jobs else "  WRONG"))
    finally:
        for b in backends:
            await b.close()
    walls.sort()
    p99 = walls[min(len(walls) - 1, int(len(walls) * 0.99))]
    print(f"p50 {statistics.median(walls) * 1000:.1f} ms  p99 {p99 * 1000:.1f} ms  "
          f"client CPU {cpu_total / len(walls) * 1000:.1f} ms/round  "
          f"broker CPU {broker_total / len(walls) * 1000:.0f} ms/round")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--every", type=float, default=1.0)
    p.add_argument("--horizon", default="5m")
    p.add_argument("--transient", action="store_true", help="persistent=False")
    p.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/")
    asyncio.run(main(p.parse_args()))
