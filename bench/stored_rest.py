"""Stored schedules at rest: a replica's memory, CPU and time to start with N schedules in the store, none
due, beside the same N registered as code jobs.

    python bench/stored_rest.py redis://127.0.0.1:6379/14 postgresql://postgres@127.0.0.1:5432/test \\
        --count 100000 --replicas 3 --warmup 10 --seconds 45
    # at a million, stored schedules only (a million code jobs do not fit in a replica's memory):
    python bench/stored_rest.py redis://127.0.0.1:6379/14 postgresql://postgres@127.0.0.1:5432/test \\
        --count 1000000 --kinds stored

For each URL and each kind ("stored": N schedules written through `Schedules.add_many`, in a writer
process of its own, each replica with the task; "code": N jobs registered in code on each replica), it
starts `--replicas` replica processes with the default lease and heartbeat, waits `--warmup` seconds,
then measures each replica's CPU (user + sys, every thread) over `--seconds` and its RSS (now and peak).
Each replica also reports when it was ready to claim: the seconds from its process's spawn to the
return of `Scheduler.start()`, which sweeps the due window once before it returns (`start_s`: that
call alone). The schedules are yearly (every 365 days, offsets spread over the year), so none is due
during the run. Afterwards the run's namespace is deleted from the store (everything kept under it,
as `stored_herd.py` deletes it), unless `--keep`. Printed: a table, and with `--json` the rows. Numbers
move with the machine's load: compare kinds within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stored_herd import _analyze, _clean, _replicas

YEAR_S = 365 * 86_400
DAY_S = 86_400


def _offset(i: int, count: int) -> int:
    """Schedule `i`'s offset on its yearly grid: spread over the year but for the two days around now,
    so that none is due during a run."""
    start = int(time.time()) % YEAR_S + DAY_S
    return (start + i * ((YEAR_S - 2 * DAY_S) // max(count, 1))) % YEAR_S


def _replica(url: str, namespace: str, kind: str, count: int, seconds: float, warmup: float,
             spawned: float) -> None:
    """One replica: run, then print when it was ready, its CPU over `seconds` after `warmup`, and its
    RSS. `spawned`: the wall time at which the parent started this process."""
    from anarchon import JobContext, Scheduler

    scheduler: Scheduler[Any] = Scheduler.from_url(url, namespace=namespace)

    async def handler(ctx: JobContext) -> None:
        """Never due during the run."""

    if kind == "stored":
        scheduler.task("report")(handler)
    else:
        for i in range(count):
            scheduler.every(f"job-{i}", f"{YEAR_S}s", handler, offset=f"{_offset(i, count)}s")

    async def main() -> None:
        starting = time.time()
        async with scheduler:
            ready = time.time()
            await asyncio.sleep(warmup)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            before = usage.ru_utime + usage.ru_stime
            await asyncio.sleep(seconds)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime - before
            print(json.dumps({"cpu_s": cpu, "rss_mb": _rss_mb(), "peak_mb": usage.ru_maxrss / 1024,
                              "ready_s": ready - spawned, "start_s": ready - starting}), flush=True)

    asyncio.run(main())


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


async def _populate(url: str, namespace: str, count: int) -> float:
    """Write `count` yearly schedules with `Schedules.add_many`; return the seconds it took."""
    from anarchon import Every, NewSchedule, Schedules

    started = time.monotonic()
    async with Schedules.from_url(url, namespace=namespace) as schedules:
        step = 10_000  # (NewSchedule values made a step at a time: the writer's memory stays small)
        for first in range(0, count, step):
            items = [NewSchedule(f"cust-{i:07d}", "report",
                                 Every.parse(f"{YEAR_S}s", f"{_offset(i, count)}s"), args={"customer": i})
                     for i in range(first, min(first + step, count))]
            answers = await schedules.add_many(items)
            if not all(a.added for a in answers):
                raise SystemExit(f"{sum(not a.added for a in answers)} of the schedules were not added")
    return time.monotonic() - started


def _run(url: str, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    namespace = f"rest-{kind}-{uuid.uuid4().hex[:8]}"
    populate_s = None
    try:
        if kind == "stored":
            # In a process of its own: a child forked from this one would start with its peak RSS.
            done = subprocess.run([sys.executable, __file__, "--populate", url, namespace, str(args.count)],
                                  capture_output=True, text=True, check=True)
            populate_s = float(done.stdout.strip().splitlines()[-1])
        results = _replicas([[__file__, "--replica", url, namespace, kind, str(args.count), str(args.seconds),
                              str(args.warmup), repr(time.time())] for _ in range(args.replicas)],
                            timeout=args.warmup + args.seconds + 600)
    finally:
        if kind == "stored" and not args.keep:
            asyncio.run(_clean(url, namespace))
    per45 = [r["cpu_s"] * 45 / args.seconds for r in results]
    return {"url": url, "namespace": namespace, "kind": kind, "count": args.count, "replicas": args.replicas,
            "populate_s": populate_s, "cpu_s_per_45s": per45, "cpu_pct": [c / 45 * 100 for c in per45],
            "rss_mb": [r["rss_mb"] for r in results], "peak_mb": [r["peak_mb"] for r in results],
            "ready_s": [r["ready_s"] for r in results], "start_s": [r["start_s"] for r in results]}


def main(argv: list[str]) -> int:
    """Entry point (a replica when `--replica` comes first)."""
    if argv and argv[0] == "--populate":
        import logging

        logging.getLogger("anarchon").setLevel(logging.ERROR)  # (an unknown task's warning, per add)
        print(asyncio.run(_populate(argv[1], argv[2], int(argv[3]))))
        asyncio.run(_analyze(argv[1]))
        return 0
    if argv and argv[0] == "--replica":
        url, namespace, kind, count, seconds, warmup, spawned = argv[1:8]
        _replica(url, namespace, kind, int(count), float(seconds), float(warmup), float(spawned))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("urls", nargs="+")
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--kinds", default="stored,code")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="leave the stored schedules in the store")
    args = ap.parse_args(argv)
    rows = [_run(url, kind, args) for url in args.urls for kind in args.kinds.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'store':<45} {'kind':<7} {'count':>8} {'written s':>9} {'RSS MB (min-max)':>18} {'peak MB':>14} "
          f"{'CPU % of a core':>16} {'ready s':>11}")
    for r in rows:
        def span(values: list[float], fmt: str = "{:.0f}") -> str:
            return f"{fmt.format(min(values))}-{fmt.format(max(values))}"
        written = "-" if r["populate_s"] is None else f"{r['populate_s']:.0f}"
        print(f"{r['url'][:45]:<45} {r['kind']:<7} {r['count']:>8} {written:>9} {span(r['rss_mb']):>18} "
              f"{span(r['peak_mb']):>14} {span(r['cpu_pct'], '{:.2f}'):>16} "
              f"{span(r['ready_s'], '{:.1f}'):>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
