"""The cluster benchmark: anarchon and its peers on one workload, in one run, on one machine.

    python bench/run.py [--quick] [--repeats N] [--scenarios A,B,D,K,S,R,C,C5,M1,M2,M3,M4]
                        [--only name,name] [--out DIR] [--baseline CHECKOUT]

Each scheduler runs as 3 OS processes (replicas) registering the same J jobs, each every 1 s. Every
replica appends one JSON line per handler start to a shared log; `analysis.py` turns the log into
the metrics. Writes results.json, results.md and plot.png to --out (default bench/results/<time>).

M1-M4 are the stored-schedule scenarios: each runs one of the stored_* benches (`--json`) per store,
on the store the code jobs' scenarios use (emptied first), and keeps the rows it prints in
results.json under "stored" (and stored.jsonl as they come); `--quick` runs them small.

anarchon's replicas run in bench/.venv-anarchon, made on first use with the core and the drivers of
this checkout (editable) and nothing else: what a user of one driver installs, without the metrics,
tracing and dashboard plugins of the development venv.

`--baseline CHECKOUT` adds, beside each anarchon scheduler, the same scheduler from another checkout
of this repository (named `<scheduler>@baseline`, run in CHECKOUT/bench/.venv-anarchon, made the same
way, with that checkout's replica script), so an optimisation is measured before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from analysis import Kill, analyse, read_log, summarise

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = {"anarchon": BENCH / ".venv-anarchon/bin/python",
      "peers": BENCH / ".venv-peers/bin/python", "aps4": BENCH / ".venv-aps4/bin/python"}
DRIVERS = ("anarchon-core", "anarchon-sqlite", "anarchon-redis", "anarchon-postgres", "anarchon-rabbitmq",
           "anarchon-nats")
"""What a user of one driver installs, for every driver: the replicas load no metrics, tracing or
dashboard plugin (each installed plugin is loaded by every process that builds a Scheduler)."""
PG = "postgresql://postgres@127.0.0.1:5432"
REDIS_DB = {"anarchon-redis": 11, "arq": 12, "anarchon-redis-stream": 13}
REPLICAS = 3
WARMUP_S = 8  # start-up (imports, connections, schema) is over by then, for every scheduler here
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Scenario:
    name: str
    jobs: int
    duration: float
    kill_at: float | None
    sleep: float
    only: tuple[str, ...] = ()
    interval: float = 1.0
    """Each job's interval in seconds."""
    defaults: bool = False
    """Run anarchon with its default lease and heartbeat (30 s, 5 s) instead of 5 s and 1 s."""


ANARCHON = ("anarchon-sqlite", "anarchon-redis", "anarchon-postgresql", "anarchon-redis-stream",
            "anarchon-nats", "anarchon-nats-kv", "anarchon-rabbitmq")
LEASE = ("anarchon-sqlite", "anarchon-redis", "anarchon-postgresql", "anarchon-nats-kv")
PEERS = ("apscheduler3-memory", "apscheduler4-postgresql", "arq-redis", "procrastinate-postgresql")
SCENARIOS = {
    "A": Scenario("A", 10, 45, 20, 0.2),
    "B": Scenario("B", 200, 45, None, 0.0),
    # 2,000 jobs on the lease stores that are built for it, beside every peer.
    "D": Scenario("D", 2_000, 45, None, 0.0,
                  only=("anarchon-sqlite", "anarchon-redis", "anarchon-postgresql", *PEERS)),
    # A kill that always lands on a run in flight: each run lasts 2 s of every 10 s, and the replica
    # killed is the one that started a run last, under 1.5 s before the kill. Attempt 2 (within
    # lease + heartbeat, 6 s) ends before the next slot, so no slot is skipped behind it. The
    # takeover gap is what a user waits for attempt 2 of a crashed run.
    "K": Scenario("K", 10, 45, 20, 2.0, only=ANARCHON, interval=10.0),
    # At rest with default settings: 10 jobs every 1 s (S), and 10,000 jobs registered that are not
    # due during the run (R: every 365 days), on every lease backend.
    "S": Scenario("S", 10, 45, None, 0.0, only=LEASE, defaults=True),
    "R": Scenario("R", 10_000, 45, None, 0.0, only=LEASE, interval=365 * 86_400.0, defaults=True),
    "C": Scenario("C", 10_000, 60, None, 0.0, only=("anarchon-redis", "anarchon-postgresql")),
    # The target is 10,000 jobs on Redis but 5,000 on PostgreSQL: C5 measures the latter.
    "C5": Scenario("C5", 5_000, 60, None, 0.0, only=("anarchon-postgresql",)),
}


@dataclass(frozen=True)
class Stored:
    """A stored-schedule scenario: one of the stored_* benches, run on each store of `on`."""

    name: str
    title: str
    """What it measures, for the tables: "{count}" is filled in."""
    script: str
    count: int
    args: tuple[str, ...]
    quick_count: int
    quick_args: tuple[str, ...]
    on: tuple[str, ...] = ("anarchon-redis", "anarchon-postgresql")
    peer_args: tuple[str, ...] = ()
    """Appended for a peer (after `args`, so they win): e.g. a longer lead for a slower writer."""
    quick_peer_args: tuple[str, ...] = ()
    timeout: float = 1800


STORED = {
    "M1": Stored("M1", "{count} stored schedules at rest", "stored_rest.py", 1_000_000,
                 ("--kinds", "stored", "--warmup", "10", "--seconds", "45"),
                 10_000, ("--kinds", "stored", "--warmup", "5", "--seconds", "15")),
    "M2": Stored("M2", "{count} hourly stored schedules spread over the hour", "stored_spread.py", 1_000_000,
                 ("--warmup", "15", "--seconds", "90"), 36_000, ("--warmup", "10", "--seconds", "30")),
    # APScheduler 4 beside anarchon: its schedules added one by one take minutes at 100,000.
    "M3": Stored("M3", "{count} stored schedules due at one second", "stored_herd.py", 100_000,
                 ("--lead", "90"), 5_000, ("--lead", "20", "--quiet", "3"),
                 on=("anarchon-redis", "anarchon-postgresql", "apscheduler4-postgresql"),
                 peer_args=("--lead", "600", "--quiet", "10"), quick_peer_args=("--lead", "60")),
    "M4": Stored("M4", "{count} hourly stored schedules, changed at {rate} a second", "stored_churn.py",
                 1_000_000, ("--rate", "1000", "--warmup", "15", "--seconds", "60"),
                 36_000, ("--rate", "100", "--warmup", "10", "--seconds", "30")),
}
"""The stored-schedule scenarios (issue "schedules at scale"), at full size and with `--quick`."""


@dataclass
class Spec:
    """One scheduler under test: which venv, which replica script, which store."""

    name: str
    venv: str
    script: str
    store: tuple[str, ...] = ()  # process names of the store's server, for its CPU seconds
    url: str = ""
    database: str | None = None  # a PostgreSQL database created afresh for each run
    redis_db: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    bench_dir: Path = BENCH  # where the replica script lives (another checkout's, for a baseline)


def anarchon_venv(checkout: Path) -> Path:
    """The Python of `checkout`'s anarchon benchmark venv (bench/.venv-anarchon): its core and drivers
    installed from its own source tree, editable, and nothing else; made on first use."""
    venv = checkout / "bench" / ".venv-anarchon"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    packages = [checkout / "packages" / name for name in DRIVERS if (checkout / "packages" / name).is_dir()]
    made = stamp.stat().st_mtime if stamp.exists() else None
    if made is not None and all(made >= (p / "pyproject.toml").stat().st_mtime for p in packages):
        return python
    print(f"installing anarchon's core and drivers from {checkout} into {venv}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q",
                    *[arg for p in packages for arg in ("-e", str(p))]], check=True)
    stamp.touch()
    return python


def specs(workdir: Path) -> list[Spec]:
    """Every scheduler in the comparison, anarchon's drivers first."""
    return [
        Spec("anarchon-sqlite", "anarchon", "anarchon_replica.py", (), f"sqlite:///{workdir}/anarchon.db"),
        Spec("anarchon-redis", "anarchon", "anarchon_replica.py", ("redis-server",),
             f"redis://127.0.0.1:6379/{REDIS_DB['anarchon-redis']}", redis_db=REDIS_DB["anarchon-redis"]),
        Spec("anarchon-postgresql", "anarchon", "anarchon_replica.py", ("postgres",),
             f"{PG}/bench_anarchon", database="bench_anarchon"),
        Spec("anarchon-redis-stream", "anarchon", "anarchon_replica.py", ("redis-server",),
             f"redis+stream://127.0.0.1:6379/{REDIS_DB['anarchon-redis-stream']}",
             redis_db=REDIS_DB["anarchon-redis-stream"]),
        Spec("anarchon-rabbitmq", "anarchon", "anarchon_replica.py", ("beam.smp",),
             "amqp://guest:guest@127.0.0.1:5672/"),
        Spec("anarchon-nats", "anarchon", "anarchon_replica.py", ("nats-server",),
             "nats://127.0.0.1:4222?stream=BENCH_ANARCHON"),
        Spec("anarchon-nats-kv", "anarchon", "anarchon_replica.py", ("nats-server",),
             "nats-kv://127.0.0.1:4222?bucket=bench_anarchon&lease=5s"),
        Spec("apscheduler3-memory", "peers", "aps3_replica.py"),
        Spec("apscheduler4-postgresql", "aps4", "aps4_replica.py", ("postgres",),
             "postgresql+asyncpg://postgres@127.0.0.1:5432/bench_aps4", database="bench_aps4"),
        Spec("arq-redis", "peers", "arq_replica.py", ("redis-server",),
             f"redis://127.0.0.1:6379/{REDIS_DB['arq']}", redis_db=REDIS_DB["arq"]),
        Spec("procrastinate-postgresql", "peers", "procrastinate_replica.py", ("postgres",),
             f"{PG}/bench_procrastinate", database="bench_procrastinate"),
    ]


# -- the store ---------------------------------------------------------------------------------

def psql(sql: str) -> None:
    subprocess.run(["psql", f"{PG}/test", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True,
                   stdout=subprocess.DEVNULL)


def reset_store(spec: Spec) -> None:
    """Give the scheduler an empty store: a new database, an empty Redis DB."""
    if spec.database:
        psql(f"DROP DATABASE IF EXISTS {spec.database} WITH (FORCE)")
        psql(f"CREATE DATABASE {spec.database}")
    if spec.redis_db is not None:
        subprocess.run(["redis-cli", "-n", str(spec.redis_db), "FLUSHDB"], check=True,
                       stdout=subprocess.DEVNULL)


def proc_cpu(pid: int) -> float | None:
    """utime+stime of one live process so far, in seconds (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = stat[stat.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def proc_hwm_mb(pid: int) -> float | None:
    """A live process's peak RSS (VmHWM) in MB. Not `ru_maxrss` from wait4: on Linux that carries
    over the RSS the parent (this script, after analysing a big run) had when it forked the child."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def store_cpu(names: tuple[str, ...]) -> float:
    """CPU seconds used so far by every process with one of these names, reaped children included."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm in names:
            f = stat[stat.rindex(")") + 2:].split()
            total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return total / CLK_TCK


# -- one run -----------------------------------------------------------------------------------

def every_text(sc: Scenario) -> str:
    """How often each job of `sc` is due, for the tables."""
    return "365 d (not due)" if sc.interval >= 86_400 else f"{sc.interval:g} s"


def config_for(spec: Spec, sc: Scenario, workdir: Path, run_id: str) -> dict[str, Any]:
    url = spec.url
    # Its own bucket, with the default 30 s TTL (the baseline's replicas too).
    if sc.defaults and spec.name.removesuffix("@baseline") == "anarchon-nats-kv":
        url = url.replace("bucket=bench_anarchon&lease=5s", "bucket=bench_anarchon_defaults")
    return {"scheduler": spec.name, "url": url, "jobs": sc.jobs, "sleep": sc.sleep,
            "interval": sc.interval,
            "log": str(workdir / "starts.jsonl"), "workdir": str(workdir),
            "namespace": f"bench{run_id}", **({} if sc.defaults else {"lease": "5s", "heartbeat": "1s"}),
            **spec.extra}


def tail_latest_start(log: Path, live: set[int], since: int) -> dict[str, Any] | None:
    latest = None
    for r in read_log(log):
        if (r["ev"] == "start" and r["pid"] in live and r["t"] >= since
                and (latest is None or r["t"] > latest["t"])):
            latest = r
    return latest


def compile_bytecode(checkout: Path, python: Path) -> None:
    """Write the bytecode of a checkout's packages (installed editable), as `pip install` does for a
    wheel: with PYTHONDONTWRITEBYTECODE set, or before a first run, every replica would compile the
    sources at start, and its start-up CPU would count the compiler's."""
    sources = [str(src) for src in sorted(checkout.glob("packages/*/src"))]
    subprocess.run([str(python), "-m", "compileall", "-q", *sources], check=True, stdout=subprocess.DEVNULL)


def one_run(spec: Spec, sc: Scenario, workdir: Path, run_id: str) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    reset_store(spec)
    cfg = config_for(spec, sc, workdir, run_id)
    py = str(PY[spec.venv])
    script = str(spec.bench_dir / "replicas" / spec.script)
    if spec.name in ("apscheduler4-postgresql", "procrastinate-postgresql"):
        subprocess.run([py, script, json.dumps({**cfg, "setup": True})], check=True, timeout=60,
                       stdout=(workdir / "setup.out").open("w"), stderr=subprocess.STDOUT)
    cpu0 = store_cpu(spec.store)
    t_launch = time.time()
    procs: dict[int, subprocess.Popen[bytes]] = {}
    for i in range(REPLICAS):
        out = (workdir / f"replica-{i}.out").open("w")
        p = subprocess.Popen([py, script, json.dumps(cfg)], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        procs[p.pid] = p
    usage: dict[int, dict[str, float]] = {}

    def reap(pid: int) -> None:
        _, status, ru = os.wait4(pid, 0)
        procs[pid].returncode = status
        usage[pid] = {"cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}

    kill: Kill | None = None
    hwm: dict[int, float | None] = {}  # each replica's peak RSS, read just before it is signalled
    log = workdir / "starts.jsonl"
    # Steady-state CPU: each replica's CPU between the end of start-up and the stop, per 45 s.
    time.sleep(max(0.0, t_launch + WARMUP_S - time.time()))
    steady0 = {pid: (time.monotonic(), proc_cpu(pid)) for pid in procs}
    if sc.kill_at is not None:
        time.sleep(max(0.0, t_launch + sc.kill_at - time.time()))
        deadline = time.time() + 10
        while time.time() < deadline:
            now_ms = time.time_ns() // 1_000_000
            rec = tail_latest_start(log, set(procs), now_ms - int(sc.sleep * 1000 * 0.75))
            if rec is not None:
                hwm[rec["pid"]] = proc_hwm_mb(rec["pid"])
                os.kill(rec["pid"], signal.SIGKILL)
                kill = Kill(rec["pid"], time.time_ns() // 1_000_000, rec["job"], rec["fire"])
                reap(rec["pid"])
                break
            time.sleep(0.01)
    time.sleep(max(0.0, t_launch + sc.duration - time.time()))
    stop_t = time.time_ns() // 1_000_000
    live = [pid for pid in procs if pid not in usage]
    steady: list[float] = []
    for pid in live:
        t0, c0 = steady0[pid]
        c1 = proc_cpu(pid)
        if c0 is not None and c1 is not None:
            steady.append((c1 - c0) / (time.monotonic() - t0) * 45)
    for pid in live:
        hwm[pid] = proc_hwm_mb(pid)
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 15
    for pid in live:
        while time.time() < deadline:
            done, _status, ru = os.wait4(pid, os.WNOHANG)
            if done:
                usage[pid] = {"cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            reap(pid)
    cpu1 = store_cpu(spec.store)
    records = read_log(log) if log.exists() else []
    jobs = [f"j{i}" for i in range(sc.jobs)]
    metrics = analyse(records, jobs, stop_t, kill, in_flight_ms=int(sc.sleep * 1000),
                      interval_ms=int(sc.interval * 1000), launched=int(t_launch * 1000))
    survivors = [u for pid, u in usage.items() if u and (kill is None or pid != kill.pid)]
    firsts = list({r["pid"]: r["cpu_s"] for r in reversed(records) if r["ev"] == "first"}.values())
    calls: dict[str, int] = {}
    for f in workdir.glob("calls-*.json"):
        for k, v in json.loads(f.read_text()).items():
            calls[k] = calls.get(k, 0) + v
    round_trips = sum(v for k, v in calls.items() if not k.endswith("_items"))
    metrics.update(
        scheduler=spec.name, scenario=sc.name, run_id=run_id, stop_t=stop_t, launched=int(t_launch * 1000),
        kill=kill.__dict__ if kill else None,
        cpu_per_replica_s=statistics.mean(u["cpu_s"] for u in survivors) if survivors else None,
        cpu_replicas_s=[round(u["cpu_s"], 3) for u in survivors],
        startup_cpu_s=statistics.mean(firsts) if firsts else None,
        steady_cpu_per_45s=statistics.mean(steady) if steady else None,
        peak_rss_mb=max((v for v in hwm.values() if v is not None), default=None),
        store_cpu_s=round(cpu1 - cpu0, 3) if spec.store else None,
        backend_calls=calls or None,
        round_trips_per_slot=(round_trips / metrics["distinct_fires"]
                              if calls and metrics["distinct_fires"] else None),
    )
    return metrics


def stored_run(spec: Spec, sc: Stored, quick: bool, workdir: Path) -> list[dict[str, Any]]:
    """Run one stored-schedule scenario's bench on `spec`'s store, emptied first; its rows, each with
    the arguments it ran with (`count`, `args`). The bench's output is kept in `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    reset_store(spec)
    count, extra = (sc.quick_count, sc.quick_args) if quick else (sc.count, sc.args)
    python, url = str(PY[spec.venv]), spec.url
    if spec.venv == "aps4":  # the bench runs in anarchon's venv; the peer's processes in their own
        python, url = str(PY["anarchon"]), f"{PG}/test"
        extra = (*extra, "--aps4", *(sc.quick_peer_args if quick else sc.peer_args))
    cmd = [python, str(spec.bench_dir / sc.script), url, "--count", str(count), *extra, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=sc.timeout, cwd=ROOT)
    (workdir / "output.txt").write_text(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    start = done.stdout.find("\n[")  # the rows, printed last (M4 exits 1 on a lost or doubled start)
    if done.returncode not in (0, 1) or (start < 0 and not done.stdout.startswith("[")):
        raise RuntimeError(f"{sc.script} exited {done.returncode}: see {workdir / 'output.txt'}")
    rows: list[dict[str, Any]] = json.loads(done.stdout[start + 1 if start >= 0 else 0:])
    return [{**r, "args": list(extra)} for r in rows]


def span(values: list[float | None], fmt: str = "{:,.0f}") -> str:
    """min-max of `values` (one number when they are equal, "n/a" when there is none)."""
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    lo, hi = fmt.format(min(present)), fmt.format(max(present))
    return lo if lo == hi else f"{lo}-{hi}"


def _flat(rows: list[dict[str, Any]], key: str) -> list[float | None]:
    """Every value of `key` over `rows`, lists (one value per replica) flattened."""
    out: list[float | None] = []
    for r in rows:
        v = r.get(key)
        out += v if isinstance(v, list) else [v]
    return out


STORED_COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    # (heading, key, format) per column, for each scenario's table; every cell is min-max over repeats
    # (and over the replicas, for a per-replica number).
    "M1": [("written s", "populate_s", "{:,.0f}"), ("RSS MB", "rss_mb", "{:.1f}"),
           ("peak RSS MB", "peak_mb", "{:.1f}"), ("CPU % of a core", "cpu_pct", "{:.2f}"),
           ("ready s", "ready_s", "{:.2f}")],
    # (M2's fires a second are the scenario's: about 280.)
    "M2": [("due", "due", "{:,}"), ("dup", "duplicates", "{:,}"), ("lost", "missed", "{:,}"),
           ("p50 ms", "p50_ms", "{:,.0f}"),
           ("p99 ms", "p99_ms", "{:,.0f}"),
           ("CPU %", "cpu_pct", "{:.0f}"), ("peak MB", "peak_mb", "{:.0f}"),
           ("store µs/fire", "store_us_per_fire", "{:,.0f}")],
    "M3": [("dup", "duplicates", "{:,}"), ("never started", "missed", "{:,}"),
           ("first s", "first_s", "{:.2f}"),
           ("last s", "last_s", "{:.2f}"), ("fires/s", "fires_per_s", "{:,.0f}"),
           ("fires / replica CPU s", "fires_per_cpu_s", "{:,.0f}"),
           ("store µs/fire", "store_us_per_fire", "{:,.0f}"), ("peak MB", "peak_mb", "{:.0f}")],
    "M4": [("changes/s", "changes_per_s", "{:,.0f}"), ("dup", "duplicates", "{:,}"), ("lost", "lost", "{:,}"),
           ("raced", "raced", "{:,}"), ("late", "late_after_change", "{:,}"), ("p50 ms", "p50_ms", "{:,.0f}"),
           ("p99 ms", "p99_ms", "{:,.0f}"), ("CPU %", "cpu_pct", "{:.0f}")],
}


def stored_title(scenario: str, rows: list[dict[str, Any]]) -> str:
    """A stored scenario's heading, from the size it ran at."""
    sc = STORED[scenario]
    counts = sorted({r["count"] for r in rows})
    args = rows[0].get("args", []) if rows else []
    rate = f"{float(args[args.index('--rate') + 1]):,.0f}" if "--rate" in args else "?"
    return sc.title.format(count="/".join(f"{c:,}" for c in counts), rate=rate)


def stored_tables(stored: list[dict[str, Any]], heading: str = "###") -> str:
    """A table per stored scenario: a row per scheduler, each cell min-max over the repeats."""
    lines: list[str] = []
    for scenario in (s for s in STORED if any(r["scenario"] == s for r in stored)):
        mine = [r for r in stored if r["scenario"] == scenario]
        schedulers = list(dict.fromkeys(r["scheduler"] for r in mine))
        columns = STORED_COLUMNS[scenario]
        repeats = len({r["repeat"] for r in mine})
        lines += [f"{heading} Scenario {scenario}: {stored_title(scenario, mine)}, 3 replicas", "",
                  f"{repeats} repeat{'s' if repeats > 1 else ''}" + (", each cell min-max over them"
                                                                     if repeats > 1 else "")
                  + f"; `bench/{STORED[scenario].script}`.", "",
                  "| scheduler | " + " | ".join(c[0] for c in columns) + " |",
                  "| --- |" + " --- |" * len(columns)]
        for name in schedulers:
            rows = [r for r in mine if r["scheduler"] == name]
            cells = [span(_flat(rows, key), f) for _, key, f in columns]
            lines.append(f"| {name} | {' | '.join(cells)} |")
        lines.append("")
    return "\n".join(lines)


# -- reporting ---------------------------------------------------------------------------------

def fmt(s: dict[str, float | None], digits: int = 0) -> str:
    if s["median"] is None:
        return "n/a"
    med, lo, hi = (f"{s[k]:.{digits}f}" for k in ("median", "min", "max"))
    return med if lo == hi else f"{med} ({lo}-{hi})"


def aggregate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["scenario"], r["scheduler"]), []).append(r)
    rows = []
    for (scenario, scheduler), rs in groups.items():
        rows.append({
            "scenario": scenario, "scheduler": scheduler, "repeats": len(rs),
            "runs": summarise([r["runs"] for r in rs]),
            "duplicates": [r["duplicates"] for r in rs], "missed": [r["missed"] for r in rs],
            "p50_ms": summarise([r["latency_ms"]["p50"] for r in rs]),
            "p99_ms": summarise([r["latency_ms"]["p99"] for r in rs]),
            "max_ms": summarise([r["latency_ms"]["max"] for r in rs]),
            "gap_after_kill_ms": summarise([r["gap_after_kill_ms"] for r in rs]),
            "takeover_ms": summarise([r["takeover_ms"] for r in rs]),
            "takeovers_seen": [r["takeover_ms"] is not None for r in rs],
            "cpu_per_replica_s": summarise([r["cpu_per_replica_s"] for r in rs]),
            "steady_cpu_per_45s": summarise([r.get("steady_cpu_per_45s") for r in rs]),
            "startup_cpu_s": summarise([r.get("startup_cpu_s") for r in rs]),
            "peak_rss_mb": summarise([r["peak_rss_mb"] for r in rs]),
            "store_cpu_s": summarise([r["store_cpu_s"] for r in rs]),
            "round_trips_per_slot": summarise([r["round_trips_per_slot"] for r in rs]),
        })
    return rows


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any], stored: list[dict[str, Any]] | None = None
             ) -> str:
    """results.md: the run, then every number."""
    return (f"Run {meta['started']} on {meta['machine']}; {meta['note']}\n\n" + tables(rows, meta)
            + stored_tables(stored or []))


def tables(rows: list[dict[str, Any]], meta: dict[str, Any], heading: str = "###") -> str:
    """One table per scenario with every metric (results.md and docs/internals/benchmark-numbers.md)."""
    lines: list[str] = []
    for scenario in sorted({r["scenario"] for r in rows}, key=list(SCENARIOS).index):
        sc = SCENARIOS[scenario]
        secs = meta["durations"][scenario]
        lines += [f"{heading} Scenario {scenario}: {sc.jobs:,} jobs every {every_text(sc)}, 3 replicas, "
                  f"{secs:.0f} s"
                  + (f", SIGKILL at {meta['kill_at'][scenario]} s" if sc.kill_at else ""), "",
                  "Runs and latency:", "",
                  "| scheduler | runs | duplicates (each run) | missed (each run) | p50 ms | p99 ms | max ms "
                  "| gap after kill ms | attempt 2 after kill ms |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        mine = [r for r in rows if r["scenario"] == scenario]
        for r in mine:
            lines.append(
                f"| {r['scheduler']} | {fmt(r['runs'])} | {', '.join(map(str, r['duplicates']))} "
                f"| {', '.join(map(str, r['missed']))} | {fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} "
                f"| {fmt(r['max_ms'])} | {fmt(r['gap_after_kill_ms'])} | {fmt(r['takeover_ms'])} |")
        lines += ["", "Cost:", "",
                  "| scheduler | CPU s / replica | CPU s to first run | steady CPU s / replica / 45 s "
                  "| peak RSS MB | store CPU s | backend calls / slot |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in mine:
            lines.append(
                f"| {r['scheduler']} | {fmt(r['cpu_per_replica_s'], 2)} "
                f"| {fmt(r.get('startup_cpu_s') or summarise([]), 2)} | {fmt(r['steady_cpu_per_45s'], 2)} "
                f"| {fmt(r['peak_rss_mb'])} | {fmt(r['store_cpu_s'], 2)} "
                f"| {fmt(r['round_trips_per_slot'], 2)} |")
        lines.append("")
    return "\n".join(lines)


def resumed(out: Path, scenarios: list[Scenario]) -> list[dict[str, Any]]:
    """The runs an earlier invocation wrote to `out/runs.jsonl` (every scenario's, those not asked for
    this time too), each with the latencies (left out of that file) read again from its own start log."""
    by_name = {**SCENARIOS, **{sc.name: sc for sc in scenarios}}
    runs = []
    for line in (out / "runs.jsonl").read_text().splitlines():
        m = json.loads(line)
        sc = by_name.get(m["scenario"])
        if sc is None:
            continue
        rep = m.setdefault("repeat", int(m["run_id"][len(sc.name)]))
        log = out / f"{sc.name}-{rep}-{m['scheduler']}" / "starts.jsonl"
        kill = Kill(**m["kill"]) if m.get("kill") else None
        again = analyse(read_log(log) if log.exists() else [], [f"j{i}" for i in range(sc.jobs)], m["stop_t"],
                        kill, in_flight_ms=int(sc.sleep * 1000), interval_ms=int(sc.interval * 1000),
                        launched=m.get("launched"))
        m["latencies"] = again["latencies"]
        runs.append(m)
    return runs


def run_meta(out: Path, scenarios: list[Scenario], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each scenario's repeats, duration and kill time, for the scenarios of `runs`: those asked for
    now, and those an earlier invocation in `out` ran (as its results.json says, or as defined)."""
    durations = {s.name: s.duration for s in SCENARIOS.values()}
    kill_at = {s.name: s.kill_at for s in SCENARIOS.values()}
    earlier = out / "results.json"
    if earlier.exists():
        meta = json.loads(earlier.read_text())["meta"]
        durations.update(meta["durations"])
        kill_at.update(meta["kill_at"])
    durations.update({s.name: s.duration for s in scenarios})
    kill_at.update({s.name: s.kill_at for s in scenarios})
    names = sorted({r["scenario"] for r in runs}, key=list(SCENARIOS).index)
    return {"repeats": {n: len({r["repeat"] for r in runs if r["scenario"] == n}) for n in names},
            "durations": {n: durations[n] for n in names}, "kill_at": {n: kill_at[n] for n in names}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="one run of A and B, 30 s each (kill at 15 s), and of M1-M4, small")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scenarios", default=",".join([*SCENARIOS, *STORED]))
    ap.add_argument("--only", default="", help="comma-separated scheduler names")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--duration", type=float, default=None, help="override every scenario's duration (s)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout whose anarchon runs beside this one's (in a venv of its own)")
    ap.add_argument("--resume", type=Path, default=None,
                    help="an earlier run's results directory: keep its runs, do those of this invocation "
                         "it lacks (finish a cut-short run, or add repeats of some scenarios)")
    args = ap.parse_args()
    names = args.scenarios.split(",")
    unknown = [n for n in names if n not in SCENARIOS and n not in STORED]
    if unknown:
        raise SystemExit(f"unknown scenario {unknown[0]!r}: use some of {', '.join([*SCENARIOS, *STORED])}")
    scenarios = [SCENARIOS[s] for s in names if s in SCENARIOS]
    stored_scenarios = [STORED[s] for s in names if s in STORED]
    if args.duration:
        scenarios = [replace(s, duration=args.duration, kill_at=s.kill_at and args.duration / 2)
                     for s in scenarios]
    if args.quick:
        args.repeats = 1
        scenarios = [replace(s, duration=30, kill_at=15 if s.kill_at else None)
                     for s in scenarios if s.name in ("A", "B")]
    started = time.strftime("%Y-%m-%dT%H-%M-%S")
    out = args.resume or args.out or BENCH / "results" / started
    if args.resume:
        started = out.name
    out.mkdir(parents=True, exist_ok=True)
    PY["anarchon"] = anarchon_venv(ROOT)
    all_specs = specs(out)
    if args.baseline:
        base = args.baseline.resolve()
        PY["baseline"] = anarchon_venv(base)
        paired = []
        for spec in all_specs:
            paired.append(spec)
            if spec.venv == "anarchon":
                paired.append(replace(spec, name=f"{spec.name}@baseline", venv="baseline",
                                      bench_dir=base / "bench"))
        all_specs = paired
    only = set(filter(None, args.only.split(",")))
    compile_bytecode(ROOT, PY["anarchon"])
    if args.baseline:
        compile_bytecode(args.baseline.resolve(), PY["baseline"])
    earlier = (out / "runs.jsonl", out / "stored.jsonl")
    runs: list[dict[str, Any]] = resumed(out, scenarios) if args.resume and earlier[0].exists() else []
    stored: list[dict[str, Any]] = ([json.loads(line) for line in earlier[1].read_text().splitlines()]
                                    if args.resume and earlier[1].exists() else [])
    done = {(r["scenario"], r["repeat"], r["scheduler"]) for r in [*runs, *stored]}
    for rep in range(args.repeats):
        for sc in scenarios:
            for spec in all_specs:
                base_name = spec.name.removesuffix("@baseline")
                if (only and base_name not in only) or (sc.only and base_name not in sc.only):
                    continue
                if (sc.name, rep, spec.name) in done:
                    continue
                run_id = f"{sc.name}{rep}{int(time.time())}"
                print(f"[{time.strftime('%H:%M:%S')}] {sc.name} #{rep + 1} {spec.name}", flush=True)
                try:
                    m = one_run(spec, sc, out / f"{sc.name}-{rep}-{spec.name}", run_id)
                except Exception as exc:  # one broken peer must not sink the comparison
                    print(f"    FAILED: {exc!r}", flush=True)
                    continue
                print(f"    runs={m['runs']} dup={m['duplicates']} missed={m['missed']} "
                      f"p50={m['latency_ms']['p50']} p99={m['latency_ms']['p99']} "
                      f"cpu/replica={m['cpu_per_replica_s'] and round(m['cpu_per_replica_s'], 2)} "
                      f"steady/45s={m['steady_cpu_per_45s'] and round(m['steady_cpu_per_45s'], 2)} "
                      f"takeover={m['takeover_ms']} rt/slot={m['round_trips_per_slot']}",
                      flush=True)
                m["repeat"] = rep
                runs.append(m)
                with (out / "runs.jsonl").open("a") as fh:
                    fh.write(json.dumps({k: v for k, v in m.items() if k != "latencies"}) + "\n")
        for st in stored_scenarios:
            for spec in all_specs:
                if spec.name not in st.on or (only and spec.name not in only):
                    continue
                if (st.name, rep, spec.name) in done:
                    continue
                print(f"[{time.strftime('%H:%M:%S')}] {st.name} #{rep + 1} {spec.name}", flush=True)
                try:
                    rows = stored_run(spec, st, args.quick, out / f"{st.name}-{rep}-{spec.name}")
                except Exception as exc:
                    print(f"    FAILED: {exc!r}", flush=True)
                    continue
                for r in rows:
                    r.update(scenario=st.name, scheduler=spec.name, repeat=rep)
                    print(f"    {json.dumps({k: v for k, v in r.items() if k != 'url'})}", flush=True)
                stored += rows
                with (out / "stored.jsonl").open("a") as fh:
                    fh.writelines(json.dumps(r) + "\n" for r in rows)
    meta = {
        "started": started, "machine": f"{os.cpu_count()} cores, {os.uname().sysname} {os.uname().release}, "
        f"Python {sys.version.split()[0]}",
        "note": "shared machine: other work ran concurrently, so CPU and latency numbers are noisy",
        **run_meta(out, scenarios, runs),
    }
    rows = aggregate(runs)
    results = {"meta": meta, "summary": rows, "runs": runs, "stored": stored}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(markdown(rows, meta, stored))
    if PY["peers"].exists():  # matplotlib lives in the peers' venv (`make bench-peers`)
        subprocess.run([str(PY["peers"]), str(BENCH / "plot.py"), str(out / "results.json"),
                        str(out / "plot.png")], check=False)
    else:
        print(f"no plot: {PY['peers']} is missing (make bench-peers creates it)")
    print(markdown(rows, meta, stored))
    print(f"written to {out}; `make bench-publish RESULTS={out}` puts it into the docs")


if __name__ == "__main__":
    main()
