"""A replica's steady CPU at rest, and the event-loop wakeups behind it, in real time.

    python bench/rest.py URL [URL ...] [--jobs 10] [--replicas 1] [--warmup 5] [--seconds 30]
    python bench/rest.py sqlite:////tmp/rest.db redis://127.0.0.1:6379/14 \\
        postgresql://postgres@127.0.0.1:5432/test "nats-kv://127.0.0.1:4222?bucket=rest" --replicas 3

Each replica is a process of its own, as in the cluster benchmark's scenario S: `--jobs` jobs due every
second whose handlers return at once, the default lease and heartbeat, no metrics or tracing plugin
(the plugins other than drivers are blocked, as `profile_claims.py --block` does). After `--warmup`
seconds it measures for `--seconds`. Printed per URL: the process CPU time (user + sys, every thread)
per 45 s (the benchmark's unit) for each replica and by thread, the scheduler loop's iterations per
second, and with `--trace` the busiest callbacks of every event loop in the process (the keeper
thread's too), by the function they call, per replica per second. The replicas share a fresh
namespace, deleted by nothing: the store keeps a few records per job.

The numbers move with the machine's load: compare two checkouts by running this script from both,
interleaved, and read the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

_BLOCK = ("prometheus", "opentelemetry")
"""Plugins left out: scenario S runs the core and the drivers only."""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user + sys) of each thread of this process, by its Python name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    cpu: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        name = names.get(int(tid), "other")
        name = name.split("_")[0] if name.startswith("asyncio_") else name
        cpu[name] = cpu.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return cpu


def _name(callback: Any) -> str:
    """The function a timer calls, by its qualified name (a bound method's, a partial's)."""
    func = getattr(callback, "func", callback)
    func = getattr(func, "__func__", func)
    if hasattr(func, "__self__") and type(func.__self__).__name__ == "Task":
        return f"task {func.__self__.get_coro().__qualname__}"
    return getattr(func, "__qualname__", repr(func))


async def _replica(url: str, namespace: str, jobs: int, warmup: float, seconds: float,
                   trace: bool, cprofile: int) -> dict[str, Any]:
    from anarchon import Capability, Scheduler, backend_for_url, plugin_manager

    for name in _BLOCK:
        plugin_manager().set_blocked(name)
    loop = asyncio.get_running_loop()
    counting = False
    iterations = 0
    callbacks: Counter[str] = Counter()
    run_once = loop._run_once  # type: ignore[attr-defined]

    def counted_run_once() -> None:
        nonlocal iterations
        if counting:
            iterations += 1
        run_once()

    loop._run_once = counted_run_once  # type: ignore[attr-defined]
    if trace:
        handle_run = asyncio.Handle._run

        def traced_run(handle: asyncio.Handle) -> None:
            if counting:
                kind = "timer" if isinstance(handle, asyncio.TimerHandle) else "soon"
                callbacks[f"{kind} {_name(getattr(handle, '_callback', None))}"] += 1
            handle_run(handle)

        asyncio.Handle._run = traced_run  # type: ignore[method-assign,assignment]
    backend = backend_for_url(url)
    scheduler: Scheduler[Any] = Scheduler(backend, namespace=namespace)
    options: dict[str, Any] = {"catch_up": 0} if Capability.LEASE in backend.capabilities else {}

    async def handler() -> None:
        return None

    for i in range(jobs):
        scheduler.every(f"j{i}", "1s", handler, **options)
    async with scheduler:
        await asyncio.sleep(warmup)
        counting = True
        profile = cProfile.Profile() if cprofile else None
        if profile is not None:
            profile.enable()
        cpu, wall, threads = _cpu(), time.monotonic(), _thread_cpu()
        await asyncio.sleep(seconds)
        cpu, wall = _cpu() - cpu, time.monotonic() - wall
        threads = {name: t - threads.get(name, 0.0) for name, t in _thread_cpu().items()}
        counting = False
        if profile is not None:
            profile.disable()
            stats = pstats.Stats(profile, stream=sys.stderr)
            stats.sort_stats(os.environ.get("REST_SORT", "tottime")).print_stats(cprofile)
    return {"cpu_s": cpu, "wall_s": wall, "iterations": iterations, "callbacks": dict(callbacks),
            "threads": dict(threads)}


def _child(args: argparse.Namespace) -> None:
    result = asyncio.run(_replica(args.url[0], args.namespace, args.jobs, args.warmup, args.seconds,
                                  args.trace, args.cprofile))
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", nargs="+")
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--trace", action="store_true",
                    help="count the loop's callbacks by the function they call (costs CPU itself)")
    ap.add_argument("--cprofile", type=int, default=0, metavar="N",
                    help="print each replica's N Python functions with the most own time (main thread; "
                         "REST_SORT=cumulative sorts by time in and under them)")
    ap.add_argument("--top", type=int, default=12, help="callbacks to list per URL, with --trace")
    ap.add_argument("--namespace", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    for url in args.url:
        namespace = f"rest-{uuid.uuid4().hex[:8]}"
        cmd = [sys.executable, os.path.abspath(__file__), url, "--child", "--namespace", namespace,
               "--jobs", str(args.jobs), "--warmup", str(args.warmup), "--seconds", str(args.seconds),
               *(["--trace"] if args.trace else []), "--cprofile", str(args.cprofile)]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(args.replicas)]
        results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        per45 = [r["cpu_s"] / r["wall_s"] * 45 for r in results]
        per_s = [r["iterations"] / r["wall_s"] for r in results]
        callbacks: Counter[str] = Counter()
        threads: dict[str, float] = {}
        for r in results:
            callbacks.update(r["callbacks"])
            for name, t in r["threads"].items():
                threads[name] = threads.get(name, 0.0) + t
        wall = sum(r["wall_s"] for r in results)
        mean = sum(per45) / len(per45)
        print(f"{url}: cpu per 45 s {' '.join(f'{c:.3f}' for c in per45)} (mean {mean:.3f}); "
              f"loop iterations/s {' '.join(f'{i:.1f}' for i in per_s)}")
        print("    cpu per 45 s by thread: " + ", ".join(
            f"{name} {t / wall * 45:.3f}" for name, t in sorted(threads.items(), key=lambda i: -i[1])))
        for name, n in callbacks.most_common(args.top):
            print(f"    {n / wall:7.2f}/s  {name}")


if __name__ == "__main__":
    main()
