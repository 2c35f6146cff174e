"""Stored schedules in a herd: N schedules due at the same second, shared by replicas.

    python bench/stored_herd.py redis://127.0.0.1:6379/14 postgresql://postgres@127.0.0.1:5432/test \\
        --count 100000 --replicas 3

For each URL: a process of its own writes N one-off schedules (`at`), all due at one second T, in a
fresh namespace; `--replicas` replica processes (default lease and heartbeat, the task registered) are
started and ready before T. Each replica appends a line per start (schedule, slot, attempt, wall time)
to a file of its own, and prints its CPU (user + sys, every thread) from T to the last start it saw.
Printed: starts, duplicate (schedule, slot, attempt)s, schedules that never started, when the first and
the last started after T, the drain rate (starts a second from T to the last), that rate per core used
by the replicas, and each replica's peak RSS. The namespace's schedules are removed afterwards.
Numbers move with the machine's load: compare within one run.

`--history on,off` runs each URL twice, with the default history and with `history=0` (no run
history, no job catalogue). The store's CPU is measured too, from T to the replicas' exit: Redis's
`used_cpu_sys + used_cpu_user` (INFO cpu), or the CPU of every `postgres` process (the backends, the
exited ones through the postmaster's children's time, and the background workers), read from /proc.
Both count whatever else the server did meanwhile: on a shared server, read them as an upper bound.

With `HERD_CALLS=1` in the environment, each replica counts its calls of the store (`COUNTED`) and
the items they carried, and the row gets them summed (`calls`: name -> [calls, items]): how many
statements or round trips the herd took, and how big each batch was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def _replica(url: str, namespace: str, due: float, quiet_s: float, out: str,
             settings: dict[str, Any] | None = None) -> None:
    """One replica: run until `quiet_s` pass with no start after `due`, then print its CPU since `due`."""
    from anarchon import JobContext, Scheduler

    scheduler: Scheduler[Any] = Scheduler.from_url(url, namespace=namespace, **(settings or {}))
    fh = open(out, "a", buffering=1 << 16)  # noqa: SIM115 - closed at the end of main()
    last = [0.0]

    @scheduler.task("herd")
    async def herd(ctx: JobContext, n: int) -> None:
        now = time.time()
        last[0] = now
        fh.write(f"{ctx.name} {ctx.slot} {ctx.attempt} {now:.4f}\n")

    calls = _count_calls(scheduler.backend) if os.environ.get("HERD_CALLS") else None

    async def main() -> None:
        if os.environ.get("HERD_STACKS"):
            _watch_loop(asyncio.get_running_loop())
        async with scheduler:
            print("ready", flush=True)
            await asyncio.sleep(max(0.0, due - time.time()))
            usage = resource.getrusage(resource.RUSAGE_SELF)
            before = usage.ru_utime + usage.ru_stime
            while time.time() < due + quiet_s or time.time() - last[0] < quiet_s:  # noqa: ASYNC110
                await asyncio.sleep(0.25)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime - before
        fh.close()
        print(json.dumps({"cpu_s": cpu, "peak_mb": usage.ru_maxrss / 1024,
                          **({"calls": calls} if calls is not None else {})}), flush=True)

    profile = os.environ.get("HERD_PROFILE")
    if profile:  # (a cProfile dump per replica, for looking at where a herd's time goes)
        import cProfile

        cProfile.runctx("asyncio.run(main())", globals(), {"asyncio": asyncio, "main": main},
                        f"{profile}.{os.getpid()}")
    else:
        asyncio.run(main())


COUNTED = ("claim_many", "release_many", "record_runs", "advance_schedules", "due_schedules", "get_schedules",
           "schedules_version", "renew_many", "publish_catalogue", "catalogue")


def _count_calls(backend: Any) -> dict[str, list[int]]:
    """Count each of the backend's `COUNTED` calls and the items of its first argument that is a list:
    {name: [calls, items]} (`HERD_CALLS=1`: how many statements a herd takes, and how big)."""
    counts: dict[str, list[int]] = {}
    for name in COUNTED:
        call = getattr(backend, name, None)
        if call is None:
            continue

        async def counted(*args: Any, _call: Any = call, _name: str = name, **kw: Any) -> Any:
            c = counts.setdefault(_name, [0, 0])
            c[0] += 1
            c[1] += next((len(a) for a in args if isinstance(a, list | tuple)), 0)
            return await _call(*args, **kw)

        setattr(backend, name, counted)
    return counts


def _watch_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Print the loop thread's stack to stderr whenever the loop has not ticked for 1 s."""
    import threading
    import traceback

    tick = [time.monotonic()]
    main_id = threading.get_ident()

    def beat() -> None:
        tick[0] = time.monotonic()
        loop.call_later(0.1, beat)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if time.monotonic() - tick[0] > 1.0:
                frame = sys._current_frames().get(main_id)
                if frame is not None:
                    stack = "".join(traceback.format_stack(frame)[-12:])
                    stalled = time.monotonic() - tick[0]
                    print(f"--- loop stalled {stalled:.1f} s at {time.time():.1f}:\n{stack}",
                          file=sys.stderr, flush=True)

    loop.call_soon(beat)
    threading.Thread(target=watch, daemon=True).start()


async def _populate(url: str, namespace: str, count: int, due: float) -> float:
    """Write `count` one-off schedules due at `due` (`add_many`); return the seconds it took."""
    from datetime import UTC, datetime

    from anarchon import At, NewSchedule, Schedules

    when = At.parse(datetime.fromtimestamp(due, UTC))
    started = time.monotonic()
    async with Schedules.from_url(url, namespace=namespace) as schedules:
        await schedules.add_many(NewSchedule(f"h-{i:07d}", "herd", when, args={"n": i}) for i in range(count))
    return time.monotonic() - started


async def _analyze(url: str) -> None:
    """Refresh PostgreSQL's statistics of the schedules table after a bulk write, as autovacuum does on
    a server where it is on (the servers here run without it): with the statistics of an empty table,
    the planner reads a million rows as if they were none."""
    if not url.startswith(("postgresql://", "postgres://")):
        return
    from anarchon import backend_for_url

    backend: Any = backend_for_url(url)
    await backend.open()
    try:
        async with backend.pool.acquire() as conn:
            await conn.execute(f"ANALYZE {backend.sql.schedules_table}")
    finally:
        await backend.close()


async def _clean(url: str, namespace: str) -> None:
    """Delete everything the run left under `namespace` (schedules, lease records, history, catalogue):
    the stores here are shared, and a million stale rows slow the next run down. On PostgreSQL, vacuum
    the tables too: the servers here run without autovacuum, and after a dozen herds of 100,000 the
    tables held 650,000 dead lease records and 2.3 million dead schedules (779 MB of schedules, none
    live), which each scan of them read again."""
    from anarchon import backend_for_url

    backend: Any = backend_for_url(url)
    await backend.open()
    try:
        if hasattr(backend, "keys"):  # Redis or Valkey: every key of the namespace has it in its tag
            batch: list[Any] = []
            async for key in backend.client.scan_iter(match=f"{{anarchon:{namespace}*", count=5000):
                batch.append(key)
                if len(batch) >= 5000:
                    await backend.client.unlink(*batch)
                    batch = []
            if batch:
                await backend.client.unlink(*batch)
        elif hasattr(backend, "sql"):  # PostgreSQL
            sql = backend.sql
            async with backend.pool.acquire() as conn:
                for table in (sql.table, sql.schedules_table, sql.schedule_versions_table, sql.history_table,
                              sql.history_count_table, sql.catalogue_table, sql.controls_table):
                    await conn.execute(f"DELETE FROM {table} WHERE namespace = $1", namespace)
                for table in (sql.table, sql.schedules_table, sql.history_table, sql.history_count_table):
                    await conn.execute(f"VACUUM (ANALYZE) {table}", timeout=600)
        else:
            raise SystemExit(f"no cleanup for {url}: delete namespace {namespace!r} by hand")
    finally:
        await backend.close()


def history_settings(mode: str) -> dict[str, Any]:
    """The replicas' settings for a `--history` mode: "on" (the default history) or "off" (history=0)."""
    if mode not in ("on", "off"):
        raise SystemExit(f"invalid --history {mode!r}: use on, off or on,off")
    return {} if mode == "on" else {"history": 0}


def store_cpu(url: str) -> float | None:
    """CPU seconds the store's server has used so far (Redis: INFO cpu; PostgreSQL: every `postgres`
    process, reaped backends included), or None for another store."""
    if url.startswith(("redis://", "valkey://")):
        import redis

        client = redis.Redis.from_url(url.replace("valkey://", "redis://", 1))
        try:
            info = client.info("cpu")
        finally:
            client.close()
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    if url.startswith(("postgresql://", "postgres://")):
        from run import store_cpu as processes_cpu

        return processes_cpu(("postgres",))
    return None


class StoreCpu:
    """The store's CPU from a moment (`at`, wall time, sampled by a timer thread) to `stop()`."""

    def __init__(self, url: str, at: float) -> None:
        import threading

        self.url = url
        self.first: float | None = None
        self._timer = threading.Timer(max(0.0, at - time.time()), self._sample)
        self._timer.start()

    def _sample(self) -> None:
        self.first = store_cpu(self.url)

    def stop(self) -> float | None:
        """The CPU seconds since `at` (None: not measured for this store, or stopped before `at`)."""
        self._timer.cancel()
        last = store_cpu(self.url)
        return None if last is None or self.first is None else last - self.first


def _replicas(argvs: list[list[str]], *, timeout: float, env: dict[str, str] | None = None,
              python: str = sys.executable) -> list[dict[str, Any]]:
    """Start a replica process per argument list (this interpreter, or `python`), wait for each, and
    return the JSON object each printed last (`{"crashed": true}` for one that printed none); every one
    is killed on a timeout."""
    procs = [subprocess.Popen([python, *argv], stdout=subprocess.PIPE, text=True, env=env)
             for argv in argvs]
    try:
        results = []
        for proc in procs:
            out, _ = proc.communicate(timeout=timeout)
            lines = out.strip().splitlines()
            try:
                results.append(json.loads(lines[-1]))
            except (IndexError, json.JSONDecodeError):
                results.append({"crashed": True})
        return results
    finally:
        for proc in procs:
            proc.kill()


def _starts(work: Path) -> list[tuple[str, int, int, float]]:
    """The (schedule, slot, attempt, wall time) lines the replicas wrote to `work`/starts-*.txt."""
    starts: list[tuple[str, int, int, float]] = []
    for path in work.glob("starts-*.txt"):
        for line in path.read_text().splitlines():
            name, slot, attempt, t = line.split()
            starts.append((name, int(slot), int(attempt), float(t)))
    return starts




def _psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _run(url: str, args: argparse.Namespace, history: str) -> dict[str, Any]:
    namespace = f"herd-{uuid.uuid4().hex[:8]}"
    due = float(int(time.time() + args.lead))
    work = Path(tempfile.mkdtemp(prefix="anarchon-herd-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    python = sys.executable
    populate = [__file__, "--populate", url, namespace, str(args.count), str(due)]
    replica = [__file__, "--replica", url, namespace, str(due), str(args.quiet)]
    settings = [json.dumps(history_settings(history))]
    if args.aps4:  # APScheduler 4 in its own venv and database, on the server of `url`
        python = str(Path(__file__).resolve().parent / ".venv-aps4" / "bin" / "python")
        script = str(Path(__file__).resolve().parent / "replicas" / "aps4_stored.py")
        database = f"bench_aps4_{namespace.replace('-', '_')}"  # (made for the run, dropped afterwards)
        _psql(url, f"CREATE DATABASE {database}")
        aps_url = url.replace("postgresql://", "postgresql+asyncpg://", 1).rsplit("/", 1)[0] + f"/{database}"
        populate = [script, "populate", aps_url, str(args.count), str(due)]
        replica, settings = [script, "replica", aps_url, str(due), str(args.quiet)], []
    try:
        done = subprocess.run([python, *populate], capture_output=True, text=True, check=True, env=env)
        populate_s = float(done.stdout.strip().splitlines()[-1])
        if time.time() > due - 5:
            raise SystemExit(f"writing {args.count} schedules took {populate_s:.0f} s: raise --lead")
        server = StoreCpu(url, due)
        argvs = [[*replica, str(work / f"starts-{k}.txt"), *settings] for k in range(args.replicas)]
        results = _replicas(argvs, timeout=args.lead + 1800, env=env, python=python)
        store_s = server.stop()
    finally:
        if args.aps4:
            _psql(url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        else:
            asyncio.run(_clean(url, namespace))
    starts = _starts(work)
    keys = [(n, s, a) for n, s, a, _ in starts]
    names = {n for n, _, _, _ in starts}
    times = sorted(t for *_, t in starts)
    cpu = sum(r["cpu_s"] for r in results if "cpu_s" in r)
    last = times[-1] - due if times else float("nan")
    rate = len(starts) / last if times and last > 0 else float("nan")
    return {"url": url, "scheduler": "apscheduler4" if args.aps4 else "anarchon", "count": args.count,
            "replicas": args.replicas, "history": "-" if args.aps4 else history,
            "populate_s": populate_s, "starts": len(starts), "duplicates": len(keys) - len(set(keys)),
            "missed": args.count - len(names),
            "first_s": times[0] - due if times else None, "last_s": last, "fires_per_s": rate,
            "cpu_s": cpu, "fires_per_cpu_s": len(starts) / cpu if cpu else None, "store_cpu_s": store_s,
            "store_us_per_fire": store_s / len(starts) * 1e6 if store_s is not None and starts else None,
            "peak_mb": [r["peak_mb"] for r in results if "peak_mb" in r],
            "crashed": sum(1 for r in results if r.get("crashed")),
            **({"calls": _summed([r["calls"] for r in results if "calls" in r])}
               if any("calls" in r for r in results) else {})}


def _summed(counts: list[dict[str, list[int]]]) -> dict[str, list[int]]:
    """The replicas' call counts added up: {name: [calls, items]}."""
    out: dict[str, list[int]] = {}
    for one in counts:
        for name, (n, items) in one.items():
            c = out.setdefault(name, [0, 0])
            c[0] += n
            c[1] += items
    return out


def main(argv: list[str]) -> int:
    """Entry point (a replica or the writer when `--replica` or `--populate` comes first)."""
    if argv and argv[0] == "--populate":
        import logging

        logging.getLogger("anarchon").setLevel(logging.ERROR)  # (an unknown task's warning, per add)
        print(asyncio.run(_populate(argv[1], argv[2], int(argv[3]), float(argv[4]))))
        asyncio.run(_analyze(argv[1]))
        return 0
    if argv and argv[0] == "--replica":
        _replica(argv[1], argv[2], float(argv[3]), float(argv[4]), argv[5],
                 json.loads(argv[6]) if len(argv) > 6 else None)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("urls", nargs="+")
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--history", default="on", help="on, off (history=0) or on,off: a run of each")
    ap.add_argument("--aps4", action="store_true",
                    help="run APScheduler 4 (bench/.venv-aps4, `make bench-peers`) instead, in a database of "
                         "its own on the PostgreSQL server of each URL")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--lead", type=float, default=90.0, help="seconds from now to the herd's second")
    ap.add_argument("--quiet", type=float, default=5.0, help="seconds with no start that end a replica")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    modes = args.history.split(",")
    for mode in modes:
        history_settings(mode)
    rows = [_run(url, args, mode) for url in args.urls for mode in modes]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'store':<36} {'history':>7} {'count':>7} {'starts':>7} {'dup':>4} {'missed':>6} {'first s':>8} "
          f"{'last s':>7} {'fires/s':>8} {'fires/CPU s':>11} {'store µs/fire':>13} {'peak MB':>10}")
    for r in rows:
        peak = (f"{min(r['peak_mb']):.0f}-{max(r['peak_mb']):.0f}" if r["peak_mb"]
                else f"{r['crashed']} crashed")
        store = "-" if r["store_us_per_fire"] is None else f"{r['store_us_per_fire']:.0f}"
        name = ("aps4 " if args.aps4 else "") + r["url"]
        print(f"{name[:36]:<36} {r['history']:>7} {r['count']:>7} {r['starts']:>7} {r['duplicates']:>4} "
              f"{r['missed']:>6} {r['first_s'] or 0:>8.2f} {r['last_s']:>7.2f} {r['fires_per_s']:>8.0f} "
              f"{r['fires_per_cpu_s'] or 0:>11.0f} {store:>13} {peak:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
