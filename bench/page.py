"""Write the benchmark pages (and their plot and raw data) from one benchmark run's results.

    python bench/page.py [RESULTS_DIR] [--stored STORED_DIR]    # `make bench-publish [STORED=dir]`

RESULTS_DIR holds the results.json (and plot.png) that run.py wrote (the newest bench/results/* by
default); `docs/benchmarks` re-renders the published run. With `--stored`, the stored-schedule
scenarios (M1-M4) come from STORED_DIR's run instead: a run of those alone, published beside the
code-job scenarios of another. Both pages are generated whole: docs/benchmarks.md (the workload, the
targets judged against this run, the plot, a short table per scenario) and
docs/internals/benchmark-numbers.md (how each number is measured, how to read and reproduce them,
and every number).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import SCENARIOS, STORED, aggregate, every_text, fmt, stored_tables, tables

BENCH = Path(__file__).resolve().parent
DOCS = BENCH.parent / "docs"
PAGE = DOCS / "benchmarks.md"
NUMBERS = DOCS / "internals" / "benchmark-numbers.md"
ASSETS = DOCS / "benchmarks"
TEXT = BENCH / "page.md"
"""The page's fixed part (what is measured, in short), with `{workload}` to fill in."""
NUMBERS_TEXT = BENCH / "numbers.md"
"""The fixed part of the numbers page: the metrics, the peers' set-up, reading and reproducing them."""



# The targets, each judged on the anarchon rows of one scenario (or only the backends named):
# (text, scenario, backends, check of one row).
Check = Callable[[dict[str, Any]], bool]
ORDER = ["anarchon-sqlite", "anarchon-redis", "anarchon-postgresql", "anarchon-redis-stream", "anarchon-nats",
         "anarchon-nats-kv", "anarchon-rabbitmq"]


def _median(row: dict[str, Any], key: str) -> float | None:
    value: float | None = row[key]["median"]
    return value


def _le(key: str, limit: float) -> Check:
    return lambda r: (v := _median(r, key)) is not None and v <= limit


def _none(key: str) -> Check:
    return lambda r: all(n == 0 for n in r[key])


def _clean(r: dict[str, Any]) -> bool:
    return _none("duplicates")(r) and _none("missed")(r)


def _fast(r: dict[str, Any]) -> bool:
    return _le("p50_ms", 25)(r) and _le("p99_ms", 60)(r)


LEASE = ("anarchon-sqlite", "anarchon-redis", "anarchon-postgresql", "anarchon-nats-kv")
TARGETS: list[tuple[str, str, tuple[str, ...], Check]] = [
    ("0 duplicates at 10 jobs, with a replica killed", "A", (), _none("duplicates")),
    ("0 duplicates and 0 missed at 200 jobs", "B", (), _clean),
    ("p50 ≤ 25 ms and p99 ≤ 60 ms at 10 jobs", "A", (), _fast),
    ("p50 ≤ 25 ms and p99 ≤ 60 ms at 200 jobs", "B", (), _fast),
    ("steady CPU ≤ 0.3 s per replica per 45 s at 10 jobs", "A", (), _le("steady_cpu_per_45s", 0.3)),
    ("steady CPU ≤ 1.2 s per replica per 45 s at 200 jobs", "B", (), _le("steady_cpu_per_45s", 1.2)),
    ("a killed run taken over as attempt 2 within lease + heartbeat (6 s), where one ran", "A", LEASE,
     _le("takeover_ms", 6000)),
    ("a run killed in flight taken over as attempt 2 within lease + heartbeat (6 s)", "K", LEASE,
     _le("takeover_ms", 6000)),
    ("0 duplicates and 0 missed at 2,000 jobs", "D", (), _clean),
    ("p99 ≤ 100 ms at 2,000 jobs", "D", ("anarchon-redis", "anarchon-postgresql"), _le("p99_ms", 100)),
    ("≤ 2.2 CPU s per replica per 45 s at 2,000 jobs", "D", ("anarchon-redis", "anarchon-postgresql"),
     _le("steady_cpu_per_45s", 2.2)),
    ("steady CPU ≤ 0.3 s per replica per 45 s at 10 jobs, default settings", "S", LEASE,
     _le("steady_cpu_per_45s", 0.3)),
    ("whole-process CPU < 0.5 s per replica at 10 jobs over 45 s, default settings", "S", LEASE,
     _le("cpu_per_replica_s", 0.5)),
    ("10,000 jobs not due: < 1 % of a core (0.45 s per 45 s) and < 80 MB RSS", "R", LEASE,
     lambda r: _le("steady_cpu_per_45s", 0.45)(r) and _le("peak_rss_mb", 80)(r)),
    ("10,000 jobs on Redis, none missed", "C", ("anarchon-redis",), _none("missed")),
    ("10,000 jobs on PostgreSQL, none missed", "C", ("anarchon-postgresql",), _none("missed")),
    ("5,000 jobs on PostgreSQL, none missed", "C5", ("anarchon-postgresql",), _none("missed")),
]


STORED_TARGETS: list[tuple[str, str, Check]] = [
    ("1,000,000 stored schedules at rest: ≤ 150 MB RSS and ≤ 1 % of a core per replica, ready ≤ 5 s",
     "M1", lambda r: max(r["peak_mb"]) <= 150 and max(r["cpu_pct"]) <= 1 and max(r["ready_s"]) <= 5),
    ("1,000,000 hourly stored schedules: p99 ≤ 100 ms, 0 duplicates, 0 lost", "M2",
     lambda r: r["p99_ms"] <= 100 and r["duplicates"] == 0 and r["missed"] == 0),
    ("100,000 stored schedules due at one second: each started once, the last within 10 s", "M3",
     lambda r: r["duplicates"] == 0 and r["missed"] == 0 and r["last_s"] <= 10),
    ("1,000 changes a second during M2: all made, each in force within a heartbeat, 0 duplicates, 0 lost",
     "M4", lambda r: r["changes_per_s"] >= 950 and r["late_after_change"] == 0 and r["duplicates"] == 0
     and r["lost"] == 0),
]
"""The stored-schedule targets, each judged on every repeat of a scenario (met: met in all of them)."""


def _short(name: str) -> str:
    return name.removeprefix("anarchon-")


def targets(rows: list[dict[str, Any]]) -> list[str]:
    """The targets table: which anarchon backends met each one in this run."""
    lines = ["| target | scenario | met on | not met on |", "| --- | --- | --- | --- |"]
    for text, scenario, backends, check in TARGETS:
        mine = [r for r in rows if r["scenario"] == scenario and r["scheduler"].startswith("anarchon-")
                and (not backends or r["scheduler"] in backends)]
        if "where one ran" in text:  # where a newer slot superseded the killed one first, none ran
            mine = [r for r in mine if any(r["takeovers_seen"])]
        if not mine:
            continue
        met = [_short(r["scheduler"]) for r in mine if check(r)]
        missed = [_short(r["scheduler"]) for r in mine if not check(r)]
        lines.append(f"| {text} | {scenario} | {', '.join(met) or '-'} | {', '.join(missed) or '-'} |")
    return lines


def stored_targets(stored: list[dict[str, Any]]) -> list[str]:
    """The rows of the targets table for the stored-schedule scenarios in `stored` (none without)."""
    lines = []
    for text, scenario, check in STORED_TARGETS:
        mine = [r for r in stored if r["scenario"] == scenario and r["scheduler"].startswith("anarchon-")]
        names = list(dict.fromkeys(r["scheduler"] for r in mine))
        if not names:
            continue
        met = [_short(n) for n in names if all(check(r) for r in mine if r["scheduler"] == n)]
        missed = [_short(n) for n in names if _short(n) not in met]
        lines.append(f"| {text} | {scenario} | {', '.join(met) or '-'} | {', '.join(missed) or '-'} |")
    return lines


def summary(rows: list[dict[str, Any]], scenario: str) -> list[str]:
    """One short table per scenario: the numbers a reader compares first."""
    lines = ["| scheduler | duplicates | missed | p50 / p99 ms | steady CPU s / replica / 45 s "
             "| store CPU s |", "| --- | --- | --- | --- | --- | --- |"]
    for r in (r for r in rows if r["scenario"] == scenario):
        p50, p99 = _median(r, "p50_ms"), _median(r, "p99_ms")
        latency = "n/a" if p50 is None or p99 is None else f"{p50:,.0f} / {p99:,.0f}"
        lines.append(f"| {r['scheduler']} | {', '.join(f'{n:,}' for n in r['duplicates'])} "
                     f"| {', '.join(f'{n:,}' for n in r['missed'])} | {latency} "
                     f"| {fmt(r['steady_cpu_per_45s'], 2)} | {fmt(r['store_cpu_s'], 1)} |")
    return lines


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def repeat_text(repeats: int | dict[str, int], scenarios: list[str]) -> str:
    """How often each scenario ran, and how to read its cells."""
    counts = repeats if isinstance(repeats, dict) else dict.fromkeys(scenarios, repeats)
    by_count: dict[int, list[str]] = {}
    for name in scenarios:
        by_count.setdefault(counts[name], []).append(name)
    if len(by_count) == 1:
        (n,) = by_count
        text = f"{n} repeat{'s' if n > 1 else ''} of each scenario"
    else:
        text = "; ".join(f"{n} repeat{'s' if n > 1 else ''} of {_names(names)}"
                         for n, names in sorted(by_count.items(), reverse=True))
    parts = [text + "."]
    if max(by_count) > 1:
        parts.append(("Each cell" if len(by_count) == 1 else "Where a scenario ran more than once, each cell")
                     + " is the median over the repeats, with min and max in brackets; duplicates and missed "
                     "list every repeat.")
    if min(by_count) == 1:
        parts.append("One repeat: read differences of about 10% as noise.")
    return " ".join(parts)


def _ordered(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """anarchon's backends first, in a fixed order, then the peers by name."""
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(runs, key=lambda r: (rank.get(r["scheduler"], len(ORDER)), r["scheduler"]))


STORED_TEXT = (
    "Scenarios {names} keep the schedules as data in the store, written first by a process of their own "
    "with `Schedules.add_many`, and run three replicas with the task and the default lease, heartbeat and "
    "jitter, the handler returning at once: M1 at rest (none due: memory, CPU, how soon a replica is "
    "ready), M2 hourly schedules spread over the hour, M3 a herd due at one second, M4 M2's schedules "
    "while two other processes add, update and remove some (a change counts from one heartbeat after it is "
    "answered). APScheduler 4 runs M3 too: the schedules added with its data store's `add_schedule`, one "
    "task with no limit on its running jobs, three scheduler processes on PostgreSQL. db-scheduler (Java) "
    "does not run here (its packages come from Maven Central, which this machine cannot reach); its "
    "published benchmark drains 2,000 to 11,840 executions a second with four scheduler VMs of 2 or 4 "
    "cores on a PostgreSQL of 4 or 8 cores (its docs/performance.md), where M3 shares 2 cores between "
    "the store and the three replicas. Each cell is "
    "min-max over the repeats, and over the three replicas where a number is "
    "per replica; the store's CPU counts the whole server. How each is measured: "
    "[stored schedules](internals/benchmark-numbers.md#stored-schedules-at-a-million-m1).")


def stored_section(data: dict[str, Any]) -> list[str]:
    """The stored-schedule scenarios' tables (M1-M4), when the run has them."""
    stored = _ordered(data.get("stored") or [])
    if not stored:
        return []
    names = [n for n in STORED if any(r["scenario"] == n for r in stored)]
    return [STORED_TEXT.replace("{names}", _names(names)), "", stored_tables(stored, heading="###")]


def render(data: dict[str, Any]) -> str:
    """The whole page for one run's results.json."""
    meta = data["meta"]
    rows = aggregate(_ordered(data["runs"]))
    scenarios = sorted({r["scenario"] for r in rows}, key=list(SCENARIOS).index)
    workload = ["| scenario | jobs | every | duration | fault | handler |",
                "| --- | --- | --- | --- | --- | --- |"]
    for name in scenarios:
        sc, secs = SCENARIOS[name], meta["durations"][name]
        kill = meta["kill_at"].get(name)
        fault = (f"SIGKILL at {kill:.0f} s of the replica that last started a run, while it runs" if kill
                 else "none")
        handler = f"sleeps {sc.sleep * 1000:.0f} ms" if sc.sleep else "returns at once"
        if sc.defaults:
            handler += "; default lease and heartbeat (30 s, 5 s)"
        who = f" ({', '.join(_short(s) for s in sc.only)} only)" if sc.only else ""
        every = every_text(sc)
        workload.append(
            f"| {name} | {sc.jobs:,} | {every} | {secs:.0f} s{who} | {fault} | {handler} |")
    repeats = repeat_text(meta["repeats"], scenarios) if scenarios else "the stored-schedule scenarios only."
    out = [TEXT.read_text().replace("{workload}", "\n".join(workload)),
           "## Results", "",
           f"Measured on {meta['machine']}, every store on loopback, {repeats} "
           "Raw data: [results.json](benchmarks/results.json).", "",
           "### Against the targets", "", *targets(rows), *stored_targets(_ordered(data.get("stored") or [])),
           ""]
    if (ASSETS / "plot.png").exists():
        out += ["![due-to-start latency and CPU per replica, by scheduler and scenario]"
                "(benchmarks/plot.png)", ""]
    # The scenarios the peers ran too get a table here; those anarchon runs alone are in the numbers page.
    compared = [n for n in scenarios if any(not r["scheduler"].startswith("anarchon-")
                                            for r in rows if r["scenario"] == n)]
    for name in compared:
        sc = SCENARIOS[name]
        out += [f"### Scenario {name}: {sc.jobs:,} jobs", "", *summary(rows, name), ""]
    out += stored_section(data)
    alone = [n for n in scenarios if n not in compared]
    out += [(f"Scenarios {_names(alone)} run anarchon alone. " if len(alone) > 1 else
             f"Scenario {alone[0]} runs anarchon alone. " if alone else "")
            + "Every metric of every scenario (latency after the kill, takeover, start-up CPU, memory, "
            "store calls per slot): [every number](internals/benchmark-numbers.md#every-number)."]
    return "\n".join(out).rstrip() + "\n"


def render_numbers(data: dict[str, Any]) -> str:
    """The numbers page for one run's results.json: the method, then every number."""
    meta = data["meta"]
    rows = aggregate(_ordered(data["runs"]))
    scenarios = sorted({r["scenario"] for r in rows}, key=list(SCENARIOS).index)
    repeats = repeat_text(meta["repeats"], scenarios) if scenarios else "the stored-schedule scenarios only."
    out = [NUMBERS_TEXT.read_text().rstrip(), "", "## Every number", "",
           f"Measured on {meta['machine']}, every store on loopback, {repeats}", "",
           tables(rows, meta, heading="###"),
           stored_tables(_ordered(data.get("stored") or []), heading="###")]
    return "\n".join(out).rstrip() + "\n"


def newest_results(root: Path = BENCH / "results") -> Path:
    """The newest run under bench/results that finished (wrote its results.json)."""
    done = sorted(p.parent for p in root.glob("*/results.json"))
    if not done:
        raise SystemExit(f"no finished run under {root}: run `make bench` (or `make bench-quick`) first")
    return done[-1]


def merged(results: Path, stored: Path | None = None) -> dict[str, Any]:
    """The results.json of `results`, with the stored-schedule rows of `stored`'s in place of its own."""
    data: dict[str, Any] = json.loads((results / "results.json").read_text())
    if stored is not None:
        other = json.loads((stored / "results.json").read_text())
        data["stored"] = other.get("stored") or []
        if not data["stored"]:
            raise SystemExit(f"{stored}/results.json has no stored-schedule rows (run M1-M4 there first)")
    return data


def publish(results: Path, stored: Path | None = None) -> None:
    """Write both pages, and copy the plot and the raw data beside them."""
    data = merged(results, stored)
    if results.resolve() != ASSETS.resolve() or stored is not None:
        ASSETS.mkdir(exist_ok=True)
        if results.resolve() != ASSETS.resolve():
            for stale in ASSETS.iterdir():
                stale.unlink()
            if (results / "plot.png").exists():
                shutil.copy(results / "plot.png", ASSETS / "plot.png")
        runs = [{k: v for k, v in r.items() if k != "latencies"} for r in data["runs"]]
        raw = json.dumps({"meta": data["meta"], "runs": runs, "stored": data.get("stored") or []}, indent=1)
        (ASSETS / "results.json").write_text(raw + "\n")
    PAGE.write_text(render(data))
    NUMBERS.parent.mkdir(exist_ok=True)
    NUMBERS.write_text(render_numbers(data))
    print(f"wrote {PAGE.relative_to(BENCH.parent)}, {NUMBERS.relative_to(BENCH.parent)} and "
          f"{ASSETS.relative_to(BENCH.parent)}/ from {results}")


def main(argv: list[str]) -> None:
    """Entry point: `[RESULTS_DIR] [--stored STORED_DIR]`."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("results", nargs="?", type=Path, default=None)
    ap.add_argument("--stored", type=Path, default=None,
                    help="a run of the stored-schedule scenarios, whose rows replace the run's own")
    args = ap.parse_args(argv)
    publish(args.results or newest_results(), args.stored)


if __name__ == "__main__":
    main(sys.argv[1:])
