"""The engine's own cost per slot, without a store: three schedulers on one `MemoryStore`, one process.

    python bench/engine.py [--jobs 2000] [--seconds 8] [--repeats 3]

Every job runs every 1 s and returns at once. Reports the process's CPU microseconds per (job, slot)
over the measured seconds (the first 2 s left out), summed over the three schedulers: the claim, the
run, the release and the timer work a replica does for each slot, with the store's cost close to nil.
Compare two revisions by running this file from each checkout on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from anarchon import MemoryBackend, Scheduler
from anarchon.backends import MemoryStore


async def one_run(jobs: int, seconds: float) -> tuple[float, int]:
    store = MemoryStore()
    runs = 0

    async def handler() -> None:
        nonlocal runs
        runs += 1

    schedulers = []
    for i in range(3):
        s = Scheduler(MemoryBackend(store), namespace="engine-bench", instance_id=f"r{i}",
                      lease="5s", heartbeat="1s", stop_timeout="2s")
        for j in range(jobs):
            s.every(f"j{j}", "1s", handler, catch_up=0)
        schedulers.append(s)
    for s in schedulers:
        await s.start()
    await asyncio.sleep(2)
    cpu0, runs0 = time.process_time(), runs
    await asyncio.sleep(seconds)
    cpu1, runs1 = time.process_time(), runs
    for s in schedulers:
        await s.stop()
    return (cpu1 - cpu0) / max(1, runs1 - runs0) * 1e6, runs1 - runs0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    per_slot = []
    for _ in range(args.repeats):
        us, runs = asyncio.run(one_run(args.jobs, args.seconds))
        expected = args.jobs * args.seconds
        print(f"  {us:7.1f} us CPU per slot, {runs} runs ({runs / expected:.0%} of {expected:.0f} slots)",
              flush=True)
        per_slot.append(us)
    print(f"median {statistics.median(per_slot):.1f} us CPU per slot ({args.jobs} jobs, 3 schedulers)")


if __name__ == "__main__":
    main()
