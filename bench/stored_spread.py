"""Stored schedules spread over the hour: N hourly schedules, their slots spread evenly, shared by replicas.

    python bench/stored_spread.py redis://127.0.0.1:6379/14 postgresql://postgres@127.0.0.1:5432/test \\
        --count 1000000 --replicas 3 --seconds 120

For each URL: a process of its own writes N schedules due every hour (`add_many`), schedule i at
offset i * 3600 / N seconds into the hour, so about N / 3600 slots fall due each second; then
`--replicas` replica processes (default lease and heartbeat, the task registered) run for `--warmup`
plus `--seconds` seconds. Each replica appends a line per start to a file of its own; the slots due
within the measured `--seconds` are checked: starts, duplicate (schedule, slot, attempt)s, slots that
never started, and the start latency (start time minus slot) at p50, p99 and max. Also printed: each
replica's CPU over the measured seconds and its peak RSS. The namespace is removed afterwards.
`--history on,off` runs each URL with the default history and with `history=0`; the store's CPU per
fire over the measured seconds is printed (measured as `stored_herd.py` does: the whole server's).

`--kill-at S` kills the first replica with SIGKILL S seconds into the measured window. Its partitions
are those of the schedules it started before; the slots of those due after the kill are its orphans,
and their start latency (p50, max) and misses are printed beside the rest: how late a dead replica's
share starts once the others take it over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stored_herd import StoreCpu, _analyze, _clean, _replicas, _starts, history_settings

HOUR_S = 3600


def _replica(url: str, namespace: str, start: float, end: float, out: str,
             settings: dict[str, Any] | None = None, kill_at: float | None = None) -> None:
    """One replica: run until `end`, then print its CPU from `start` to `end` and its peak RSS; or, with
    `kill_at` (wall time), kill itself with SIGKILL then (its starts are written line by line)."""
    from anarchon import JobContext, Scheduler

    scheduler: Scheduler[Any] = Scheduler.from_url(url, namespace=namespace, **(settings or {}))
    fh = open(out, "a", buffering=1 if kill_at else 1 << 16)  # noqa: SIM115 - closed at the end of main()

    async def die() -> None:
        assert kill_at is not None
        await asyncio.sleep(max(0.0, kill_at - time.time()))
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    @scheduler.task("hourly")
    async def hourly(ctx: JobContext, n: int) -> None:
        fh.write(f"{ctx.name} {ctx.slot} {ctx.attempt} {time.time():.4f}\n")

    async def main() -> None:
        async with scheduler:
            killer = asyncio.create_task(die()) if kill_at else None
            await asyncio.sleep(max(0.0, start - time.time()))
            usage = resource.getrusage(resource.RUSAGE_SELF)
            before = usage.ru_utime + usage.ru_stime
            await asyncio.sleep(max(0.0, end - time.time()))
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime - before
            if killer is not None:
                killer.cancel()
        fh.close()
        print(json.dumps({"cpu_s": cpu, "peak_mb": usage.ru_maxrss / 1024}), flush=True)

    asyncio.run(main())


def _offset_ms(i: int, count: int) -> int:
    return i * HOUR_S * 1000 // count


async def _populate(url: str, namespace: str, count: int) -> float:
    """Write `count` hourly schedules spread over the hour; return the seconds it took."""
    from anarchon import Every, NewSchedule, Schedules

    started = time.monotonic()
    async with Schedules.from_url(url, namespace=namespace) as schedules:
        step = 10_000
        for first in range(0, count, step):
            await schedules.add_many(
                NewSchedule(f"s-{i:07d}", "hourly", Every.parse(f"{HOUR_S}s", f"{_offset_ms(i, count)}ms"),
                            args={"n": i})
                for i in range(first, min(count, first + step)))
    return time.monotonic() - started


def _due_between(count: int, lo_ms: int, hi_ms: int) -> set[tuple[str, int]]:
    """The (schedule, slot)s due in [lo_ms, hi_ms)."""
    due: set[tuple[str, int]] = set()
    hour_ms = HOUR_S * 1000
    for i in range(count):
        off = _offset_ms(i, count)
        slot = (lo_ms - off + hour_ms - 1) // hour_ms * hour_ms + off
        while slot < hi_ms:
            due.add((f"s-{i:07d}", slot))
            slot += hour_ms
    return due


def orphans(work: Path, due: set[tuple[str, int]], starts: list[tuple[str, int, int, float]],
            kill_t: float) -> dict[str, Any]:
    """The slots due after `kill_t` in the partitions of the replica killed then (those most of whose
    starts in the 10 s before were its own, in `work`/starts-0.txt): how many, how many never started,
    their latency, and until when after the kill they started more than a second late."""
    from anarchon.backends import schedule_partition

    by: dict[int, list[int]] = {}  # partition -> [its starts by the killed replica, all its starts]
    for path in work.glob("starts-*.txt"):
        for line in path.read_text().splitlines():
            name, _, _, t = line.split()
            if kill_t - 10 <= float(t) < kill_t:
                counts = by.setdefault(schedule_partition(name), [0, 0])
                counts[0] += path.name == "starts-0.txt"
                counts[1] += 1
    mine = {p for p, (own, every) in by.items() if 2 * own > every}
    kill_ms = int(kill_t * 1000)
    orphaned = {(n, s) for n, s in due if s >= kill_ms and schedule_partition(n) in mine}
    first: dict[tuple[str, int], float] = {}
    for n, s, _, t in starts:
        if (n, s) in orphaned:
            first[(n, s)] = min(first.get((n, s), t), t)
    late = sorted(t * 1000 - s for (n, s), t in first.items())
    slow = [s for (n, s), t in first.items() if t * 1000 - s > 1000]
    return {"killed_partitions": len(mine), "orphans": len(orphaned),
            "orphans_missed": len(orphaned) - len(first),
            "orphans_p50_ms": late[len(late) // 2] if late else None,
            "orphans_max_ms": late[-1] if late else None, "orphans_late_1s": len(slow),
            "orphans_late_until_s": (max(slow) - kill_ms) / 1000 if slow else None}


def _run(url: str, args: argparse.Namespace, history: str = "on") -> dict[str, Any]:
    namespace = f"spread-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="anarchon-spread-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, __file__, "--populate", url, namespace, str(args.count)],
                          capture_output=True, text=True, check=True, env=env)
    populate_s = float(done.stdout.strip().splitlines()[-1])
    start = time.time() + args.warmup
    end = start + args.seconds
    settings = json.dumps(history_settings(history))
    server = StoreCpu(url, start)
    kill_t = None if args.kill_at is None else start + args.kill_at
    results = _replicas([[__file__, "--replica", url, namespace, str(start), str(end),
                          str(work / f"starts-{k}.txt"), settings,
                          *([str(kill_t)] if k == 0 and kill_t is not None else [])]
                         for k in range(args.replicas)],
                        timeout=args.warmup + args.seconds + 600, env=env)
    store_s = server.stop()
    starts = _starts(work)
    asyncio.run(_clean(url, namespace))
    # The slots due in the measured window, but its last 5 s (a start may come just after its end).
    lo_ms, hi_ms = int(start * 1000), int((end - 5) * 1000)
    due = _due_between(args.count, lo_ms, hi_ms)
    measured = [(n, s, a, t) for n, s, a, t in starts if (n, s) in due]
    keys = [(n, s, a) for n, s, a, _ in measured]
    latencies = sorted(t * 1000 - s for _, s, _, t in measured)

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else float("nan")

    fires = sum(1 for *_, t in starts if start <= t < end)
    killed = {} if kill_t is None else orphans(work, due, starts, kill_t)
    return {**killed, "url": url, "count": args.count, "replicas": args.replicas, "history": history,
            "populate_s": populate_s,
            "store_us_per_fire": store_s / fires * 1e6 if store_s is not None and fires else None,
            "due": len(due), "starts": len(measured), "duplicates": len(keys) - len(set(keys)),
            "missed": len(due - {(n, s) for n, s, _ in keys}),
            "fires_per_s": len(due) / (hi_ms - lo_ms) * 1000,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": latencies[-1] if latencies else None,
            "cpu_pct": [r["cpu_s"] / args.seconds * 100 for r in results if "cpu_s" in r],
            "peak_mb": [r["peak_mb"] for r in results if "peak_mb" in r],
            "crashed": sum(1 for r in results if r.get("crashed"))}


def main(argv: list[str]) -> int:
    """Entry point (a replica or the writer when `--replica` or `--populate` comes first)."""
    if argv and argv[0] == "--populate":
        import logging

        logging.getLogger("anarchon").setLevel(logging.ERROR)  # (an unknown task's warning, per add)
        print(asyncio.run(_populate(argv[1], argv[2], int(argv[3]))))
        asyncio.run(_analyze(argv[1]))
        return 0
    if argv and argv[0] == "--replica":
        _replica(argv[1], argv[2], float(argv[3]), float(argv[4]), argv[5],
                 json.loads(argv[6]) if len(argv) > 6 else None, float(argv[7]) if len(argv) > 7 else None)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("urls", nargs="+")
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--history", default="on", help="on, off (history=0) or on,off: a run of each")
    ap.add_argument("--kill-at", type=float, default=None,
                    help="kill the first replica (SIGKILL) this many seconds into the measured window")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    modes = args.history.split(",")
    for mode in modes:
        history_settings(mode)
    rows = [_run(url, args, mode) for url in args.urls for mode in modes]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'store':<36} {'history':>7} {'count':>8} {'due':>6} {'dup':>4} {'missed':>6} {'fires/s':>8} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'CPU % (min-max)':>16} {'store µs/fire':>13} "
          f"{'peak MB':>9}")
    for r in rows:
        cpu = f"{min(r['cpu_pct']):.1f}-{max(r['cpu_pct']):.1f}"
        peak = f"{min(r['peak_mb']):.0f}-{max(r['peak_mb']):.0f}"
        store = "-" if r["store_us_per_fire"] is None else f"{r['store_us_per_fire']:.0f}"
        print(f"{r['url'][:36]:<36} {r['history']:>7} {r['count']:>8} {r['due']:>6} {r['duplicates']:>4} "
              f"{r['missed']:>6} {r['fires_per_s']:>8.0f} {r['p50_ms']:>7.0f} {r['p99_ms']:>7.0f} "
              f"{r['max_ms'] or 0:>7.0f} {cpu:>16} {store:>13} {peak:>9}")
        if "orphans" in r:
            print(f"    killed replica's share ({r['killed_partitions']} partitions): "
                  f"{r['orphans']} slots due after the kill, {r['orphans_missed']} never started, "
                  f"latency p50 {r['orphans_p50_ms']} max {r['orphans_max_ms']} ms, "
                  f"{r['orphans_late_1s']} later than 1 s, the last of those due "
                  f"{r['orphans_late_until_s']} s after the kill")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
