"""Three replicas claiming the same N jobs' slot at once on NATS, driver only (no scheduler).

    python bench/nats_claims.py [--kv] [--jobs 200] [--rounds 20] [--every 1.0]
                                [--url nats://127.0.0.1:4222]

Each round (one every `--every` seconds, like a job every second), three clients of `NatsBackend`
(or `NatsKVBackend` with `--kv`, whose winners then release, as a run that ends at once does) claim
slot k of every job at the same moment with `claim_many`. Prints per round the wall time until each
client's batch (and the releases) is answered, slowest of the three, the client CPU time (the three
clients share one process), the server's CPU time (nats-server, from /proc), the requests sent per
slot and the winners (exactly one per job, or the run is wrong); then p50/p99 and the means. The
stream or buckets are named after the process (`BENCHNC<pid>`, `benchnc<pid>`) and deleted at the end.
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

from nats.aio.client import Client

from anarchon import ClaimOutcome, ClaimRequest, ReleaseOutcome
from anarchon_nats import NatsBackend, NatsKVBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import store_cpu

STORE = ("nats-server",)


class Counted:
    """Counts the messages a client publishes (each request is one)."""

    def __init__(self) -> None:
        self.sent = 0

    def wrap(self, client: Client) -> None:
        """Count every publish of `client` from now on."""
        send = client._send_publish

        async def counted(*args: Any, **kwargs: Any) -> None:
            self.sent += 1
            await send(*args, **kwargs)

        client._send_publish = counted  # type: ignore[method-assign]


async def one(backend: NatsBackend | NatsKVBackend, owner: str, jobs: int, slot: int,
              following: int) -> tuple[float, int]:
    reqs = [ClaimRequest("bench", f"j{i:05d}", slot, owner, 30_000, 3, stale_after=following - 1)
            for i in range(jobs)]
    t0 = time.perf_counter()
    results = await backend.claim_many(reqs)
    won = [r.lease for r in results if r.outcome is ClaimOutcome.WON and r.lease is not None]
    if isinstance(backend, NatsKVBackend) and won:
        await backend.release_many([(lease, ReleaseOutcome.DONE) for lease in won])
    return time.perf_counter() - t0, len(won)


async def main(args: argparse.Namespace) -> None:
    tag = os.getpid()
    backends: list[NatsBackend | NatsKVBackend] = (
        [NatsKVBackend(args.url, bucket=f"benchnc{tag}", lease="30s") for _ in range(3)] if args.kv
        else [NatsBackend(args.url, stream=f"BENCHNC{tag}", prefix=f"benchnc{tag}") for _ in range(3)])
    counter = Counted()
    for b in backends:
        await b.open()
        counter.wrap(b.client)
    walls: list[float] = []
    cpus: list[float] = []
    print("round  wall_ms  client_cpu_ms  server_cpu_ms  requests/slot  winners")
    server_total = 0.0
    sent_total = 0
    try:
        start = time.time()
        for k in range(args.rounds):
            due = start + k * args.every
            await asyncio.sleep(max(0.0, due - time.time()))
            slot = int(due * 1000)
            c0, s0, n0 = time.process_time(), store_cpu(STORE), counter.sent
            following = int((due + args.every) * 1000)
            out = await asyncio.gather(*(one(b, f"r{i}", args.jobs, slot, following)
                                         for i, b in enumerate(backends)))
            wall = max(w for w, _ in out)
            cpu, server, sent = time.process_time() - c0, store_cpu(STORE) - s0, counter.sent - n0
            won = sum(n for _, n in out)
            walls.append(wall)
            cpus.append(cpu)
            server_total += server
            sent_total += sent
            print(f"{k:5d}  {wall * 1000:7.1f}  {cpu * 1000:13.1f}  {server * 1000:13.0f}  "
                  f"{sent / args.jobs:13.2f}  {won:7d}" + ("" if won == args.jobs else "  WRONG"))
    finally:
        js = backends[0].client.jetstream()
        names = [f"KV_benchnc{tag}", f"KV_benchnc{tag}_state"] if args.kv else [f"BENCHNC{tag}"]
        for name in names:
            await js.delete_stream(name)
        for b in backends:
            await b.close()
    walls.sort()
    p99 = walls[min(len(walls) - 1, int(len(walls) * 0.99))]
    print(f"p50 {statistics.median(walls) * 1000:.1f} ms  p99 {p99 * 1000:.1f} ms  "
          f"client CPU {statistics.median(cpus) * 1000:.1f} ms/round (median), "
          f"{statistics.median(cpus) / args.jobs * 1e6:.0f} us/slot  "
          f"server CPU {server_total / len(walls) * 1000:.0f} ms/round  "
          f"requests {sent_total / len(walls) / args.jobs:.2f}/slot")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kv", action="store_true", help="NatsKVBackend (claims, then the winners release)")
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--every", type=float, default=1.0)
    p.add_argument("--url", default="nats://127.0.0.1:4222")
    asyncio.run(main(p.parse_args()))
