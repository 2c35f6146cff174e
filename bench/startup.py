"""A replica's start-up CPU, phase by phase, per backend: fresh processes, min and median.

    python bench/startup.py [--runs 7] [--jobs 10] [--baseline CHECKOUT] [--importtime | --callgrind]
                            [URL ...]

Each run is a new process (scenario S's replica: `--jobs` jobs every 1 s, default settings) that
reads its own CPU time (user + system, every thread) at the end of each phase:

- interpreter: the interpreter's start, `site` and this script, before any import of anarchon;
- import anarchon: `import anarchon` (asyncio and everything else it imports);
- plugins: `plugin_manager()`, finding the `anarchon` entry points and loading each plugin module;
- driver: `backend_for_url(url)`, importing the driver for its scheme and its client library;
- jobs: `Scheduler(backend)` and its jobs registered;
- open: `await backend.open()`, connecting and checking (or creating) the store's schema;
- first claims: `scheduler.start()` up to the start of every job's first run (its first claim round).

The CPU of each phase is the difference of two readings; `total` is the CPU at the end of the first
claim round. The URLs default to the four lease backends (SQLite, Redis, PostgreSQL, NATS KV) on the
local services: the PostgreSQL database `bench_startup`, the SQLite file and the Key-Value buckets
`bench_startup` are created afresh, the Redis DB 10 is flushed. One unmeasured run per URL first
creates the schema, so that the measured runs open a store that is ready, as a replica that restarts
does. Every process uses a namespace of its own.

Processes run in bench/.venv-anarchon (the core and the drivers, nothing else), as bench/run.py's do.
`--baseline CHECKOUT` runs the same processes in CHECKOUT's bench/.venv-anarchon too, alternating with
this checkout's, and prints each phase's median as a ratio (this checkout / the baseline).
`--importtime` instead prints, per URL, the modules with the largest own import time in one process
(`python -X importtime`), as a starting point for cutting imports. `--callgrind` instead counts the
instructions of one whole start-up (every thread, to the end of the first claim round) under
`valgrind --tool=callgrind`: slow, but free of the noise of a shared machine, so a change of a few
percent shows.
"""

from __future__ import annotations

import os
import sys
import time

PHASES = ("interpreter", "import anarchon", "plugins", "driver", "jobs", "open", "first claims")


def replica(url: str, jobs: int) -> None:
    """One measured start-up (this script, run as `startup.py --replica URL JOBS`): prints its readings."""
    cpu = time.process_time
    marks = [cpu()]
    import asyncio

    import anarchon
    marks.append(cpu())
    anarchon.plugin_manager()
    marks.append(cpu())
    backend = anarchon.backend_for_url(url)
    marks.append(cpu())
    scheduler = anarchon.Scheduler(backend, namespace=f"startup{os.getpid()}")
    started = 0
    all_started = asyncio.Event()

    async def handler() -> None:
        nonlocal started
        started += 1
        if started == jobs:
            marks.append(cpu())
            all_started.set()

    for i in range(jobs):
        scheduler.every(f"j{i}", "1s", handler, catch_up=0)
    marks.append(cpu())

    async def main() -> None:
        await backend.open()
        marks.append(cpu())
        async with scheduler:
            await asyncio.wait_for(all_started.wait(), 30)

    asyncio.run(main())
    print(" ".join(f"{m:.6f}" for m in marks))


# -- the runner --------------------------------------------------------------------------------

DEFAULT_URLS = (
    "sqlite:///{tmp}/startup.db",
    "redis://127.0.0.1:6379/10",
    "postgresql://postgres@127.0.0.1:5432/bench_startup",
    "nats-kv://127.0.0.1:4222?bucket=bench_startup",
)


def reset_store(url: str) -> None:
    """Start from an empty store: a new PostgreSQL database, an empty Redis DB, no SQLite file, no
    NATS Key-Value buckets."""
    import contextlib
    import subprocess
    from pathlib import Path
    from urllib.parse import parse_qsl, urlsplit

    from run import psql

    parts = urlsplit(url)
    if parts.scheme in ("postgresql", "postgres") and parts.path.strip("/").startswith("bench_"):
        db = parts.path.strip("/")
        psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        psql(f"CREATE DATABASE {db}")
    elif parts.scheme == "redis":
        subprocess.run(["redis-cli", "-p", str(parts.port or 6379), "-n", parts.path.strip("/") or "0",
                        "FLUSHDB"], check=True, stdout=subprocess.DEVNULL)
    elif parts.scheme == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(parts.path + suffix).unlink(missing_ok=True)
    elif parts.scheme == "nats-kv":
        import asyncio

        import nats
        from nats.js.errors import NotFoundError

        bucket = dict(parse_qsl(parts.query)).get("bucket", "anarchon")

        async def delete_buckets() -> None:
            nc = await nats.connect(f"nats://{parts.netloc}")
            try:
                for stream in (f"KV_{bucket}", f"KV_{bucket}_state"):
                    with contextlib.suppress(NotFoundError):
                        await nc.jetstream().delete_stream(stream)
            finally:
                await nc.close()

        asyncio.run(delete_buckets())


def measure(python: str, url: str, jobs: int) -> list[float]:
    """One fresh process's CPU seconds per phase."""
    import subprocess

    out = subprocess.run([python, __file__, "--replica", url, str(jobs)], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    marks = [float(x) for x in out.split()[-len(PHASES):]]
    from itertools import pairwise

    return [marks[0], *(b - a for a, b in pairwise(marks)), marks[-1]]


def instructions(python: str, url: str, jobs: int) -> int:
    """The instructions one start-up executes, every thread counted (callgrind)."""
    import re
    import subprocess

    err = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, __file__,
                          "--replica", url, str(jobs)], check=True, capture_output=True, text=True,
                         timeout=600).stderr
    found = re.search(r"Collected : (\d+)", err)
    if found is None:
        raise RuntimeError(f"no instruction count in callgrind's output: {err[-500:]}")
    return int(found.group(1))


def importtime(python: str, url: str, jobs: int, top: int = 25) -> None:
    """Print the modules with the largest own import time in one start-up."""
    import subprocess

    err = subprocess.run([python, "-X", "importtime", __file__, "--replica", url, str(jobs)], check=True,
                         capture_output=True, text=True, timeout=60).stderr
    rows: list[tuple[int, int, str]] = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, cumulative, name = line.removeprefix("import time:").split("|")
            rows.append((int(own), int(cumulative), name.strip()))
    own_ms = sum(r[0] for r in rows) / 1000
    print(f"{url}: {len(rows)} modules, {own_ms:.1f} ms own import time; the largest:")
    for own_us, cumulative_us, module in sorted(rows, reverse=True)[:top]:
        print(f"  {own_us / 1000:7.2f} ms own {cumulative_us / 1000:8.2f} ms with imports  {module}")


def main() -> None:
    import argparse
    import statistics
    import tempfile
    from pathlib import Path

    from run import anarchon_venv, compile_bytecode

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("urls", nargs="*", help="backend URLs (default: the four lease backends, locally)")
    ap.add_argument("--runs", type=int, default=7, help="fresh processes per URL (and per checkout)")
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--baseline", type=Path, help="another checkout to compare with")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--importtime", action="store_true", help="print the largest imports instead")
    mode.add_argument("--callgrind", action="store_true", help="count instructions under valgrind instead")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="anarchon-startup-")
    urls = [u.format(tmp=tmp) for u in args.urls or DEFAULT_URLS]
    here = Path(__file__).resolve().parents[1]
    checkouts = {"this": here, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    pythons: dict[str, str] = {}
    for name, checkout in checkouts.items():
        venv_python = anarchon_venv(checkout)
        compile_bytecode(checkout, venv_python)  # as run.py does: a replica does not compile its sources
        pythons[name] = str(venv_python)
    for url in urls:
        reset_store(url)
        if args.importtime:
            for name, python in pythons.items():
                print(f"[{name}]", end=" ")
                importtime(python, url, args.jobs)
            continue
        for python in pythons.values():
            measure(python, url, args.jobs)  # creates the schema; not counted
        if args.callgrind:
            counts = {name: instructions(python, url, args.jobs) for name, python in pythons.items()}
            line = ", ".join(f"{name} {n / 1e6:,.1f} M" for name, n in counts.items())
            ratio = f" ({counts['this'] / counts['baseline']:.3f} this/baseline)" if len(counts) == 2 else ""
            print(f"{url}: instructions to the end of the first claim round: {line}{ratio}", flush=True)
            continue
        runs: dict[str, list[list[float]]] = {name: [] for name in pythons}
        for _ in range(args.runs):
            for name, python in pythons.items():
                runs[name].append(measure(python, url, args.jobs))
        print(f"\n{url}: CPU ms per phase over {args.runs} fresh processes, {args.jobs} jobs")
        header = f"{'phase':<16}" + "".join(f"{name + ' min':>14}{name + ' median':>16}" for name in runs)
        print(header + ("  median this/baseline" if len(runs) == 2 else ""))
        for i, phase in enumerate((*PHASES, "total")):
            line = f"{phase:<16}"
            medians = []
            for samples in runs.values():
                column = [s[i] * 1000 for s in samples]
                medians.append(statistics.median(column))
                line += f"{min(column):14.1f}{medians[-1]:16.1f}"
            if len(medians) == 2:
                line += f"  {medians[0] / medians[1]:.2f}" if medians[1] else "  -"
            print(line)
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--replica"]:
        replica(sys.argv[2], int(sys.argv[3]))
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        main()
