"""What `wait_replicas=1` costs a claim: claim latency with and without it, on a real topology.

    python bench/wait_replicas.py [--topology cluster|sentinel] [--batches 500] [--jobs 1]

Starts a throwaway Redis Cluster (3 masters, 1 replica each) or a Sentinel-managed master with one
replica on loopback ports (`anarchon_testkit.topology`, which needs `redis-server`, `redis-cli` and
`redis-sentinel`), waits until every replica is in sync, then times `--batches` sequential
`claim_many` calls of `--jobs` jobs each per setting (every claim a win: each batch claims the next
slot, with `overlap="replace"`), and prints the median and the 99th percentile in milliseconds. The
settings alternate batch by batch, so a busy moment of the machine falls on both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid

import redis.asyncio

from anarchon.backends import ClaimRequest, Overlap
from anarchon_redis import RedisBackend
from anarchon_testkit.topology import RedisCluster, RedisSentinel, Topology


async def _in_sync(ports: list[int]) -> None:
    for port in ports:
        client = redis.asyncio.Redis(host="127.0.0.1", port=port)
        try:
            while True:
                if (await client.info("replication")).get("slave0", {}).get("state") == "online":
                    break
                await asyncio.sleep(0.1)
        finally:
            await client.aclose()


async def measure(url: str, masters: list[int], batches: int, jobs: int) -> dict[int, list[float]]:
    """Latencies in ms of `batches` claim batches per setting of wait_replicas (0 and 1)."""
    await asyncio.wait_for(_in_sync(masters), 60)
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    backends = {n: RedisBackend(f"{url}?prefix={prefix}-{n}&wait_replicas={n}") for n in (0, 1)}
    for backend in backends.values():
        await backend.open()
    times: dict[int, list[float]] = {0: [], 1: []}
    try:
        for i in range(batches + 20):  # the first 20 warm the connections up
            for n, backend in backends.items():
                requests = [ClaimRequest("ns", f"job-{j}", 1000 + i, "me", 60_000, 3, overlap=Overlap.REPLACE)
                            for j in range(jobs)]
                start = time.perf_counter()
                results = await backend.claim_many(requests)
                took = (time.perf_counter() - start) * 1000
                assert all(r.lease is not None for r in results), results
                if i >= 20:
                    times[n].append(took)
    finally:
        for backend in backends.values():
            await backend.close()
    return times


def main() -> None:
    """Start the topology, measure, print one line per setting."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", choices=["cluster", "sentinel"], default="cluster")
    parser.add_argument("--batches", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=1, help="jobs per claim batch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        topology: Topology
        if args.topology == "cluster":
            rc = topology = RedisCluster(tmp)
            topology.start()
            url, masters = rc.url, rc.master_ports
        else:
            rs = topology = RedisSentinel(tmp)
            topology.start()
            url, masters = rs.url, lambda: [rs.master_port()]
        try:
            times = asyncio.run(measure(url, masters(), args.batches, args.jobs))
        finally:
            topology.stop()
    for n, ms in times.items():
        p99 = statistics.quantiles(ms, n=100)[98]
        print(f"redis {args.topology}, {args.jobs} job(s) per batch, wait_replicas={n}: "
              f"median {statistics.median(ms):.2f} ms, p99 {p99:.2f} ms ({len(ms)} batches)")


if __name__ == "__main__":
    main()
