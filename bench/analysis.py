"""Pure functions over the benchmark's start log: runs, duplicates, missed fires, latency, gaps.

A log record is a dict: {"ev": "start", "s": scheduler, "job", "fire" (intended epoch ms), "pid",
"t" (wall epoch ms), optional "attempt"}; "ready" records mark a replica that finished set-up.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EDGE_MS = 3000
"""The measured window leaves out the first and last 3 s."""


@dataclass(frozen=True)
class Kill:
    """The SIGKILL of a replica while its run of (job, fire) was in flight."""

    pid: int
    t: int
    job: str
    fire: int


def read_log(path: Path) -> list[dict[str, Any]]:
    """Read the JSON lines of a start log, skipping a torn last line."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by nearest rank, None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return float(ordered[int(rank) - 1])


def window(records: Iterable[dict[str, Any]], stop_t: int, edge_ms: int = EDGE_MS,
           launched: int | None = None) -> tuple[int, int]:
    """The measured window of fire times: from the last replica's ready + edge to stop - edge.

    With no replica ready (a scheduler still registering its jobs when the run ended) it starts at
    the launch (`launched`, epoch ms), or is empty when that is not known either."""
    ready = [r["t"] for r in records if r["ev"] == "ready"]
    if ready:
        start = max(ready)
    elif launched is not None:
        start = launched
    else:
        return stop_t, stop_t - edge_ms
    return start + edge_ms, stop_t - edge_ms


def expected_fires(
    jobs: Iterable[str], start: int, end: int, interval_ms: int = 1000
) -> set[tuple[str, int]]:
    """Every (job, fire) on the interval grid with start <= fire <= end."""
    first = -(-start // interval_ms) * interval_ms
    fires = range(first, end + 1, interval_ms)
    return {(job, f) for job in jobs for f in fires}


def analyse(records: list[dict[str, Any]], jobs: Sequence[str], stop_t: int, kill: Kill | None,
            in_flight_ms: int = 0, interval_ms: int = 1000, launched: int | None = None) -> dict[str, Any]:
    """Every per-run metric that the start log gives.

    A re-run after the kill of any (job, fire) the killed replica had in flight (started within
    `in_flight_ms` before the kill) is a takeover, not a duplicate.
    """
    starts = [r for r in records if r["ev"] == "start"]
    w_start, w_end = window(records, stop_t, launched=launched)
    by_key: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(starts, key=lambda r: r["t"]):
        by_key[(r["job"], r["fire"])].append(r)

    killed_key = (kill.job, kill.fire) if kill else None
    takeover_ms: int | None = None
    if kill is not None and killed_key in by_key:
        again = [r for r in by_key[killed_key] if r["pid"] != kill.pid and r["t"] >= kill.t]
        if again:
            takeover_ms = again[0]["t"] - kill.t

    in_flight: set[tuple[str, int]] = set()
    if kill is not None:
        in_flight = {(r["job"], r["fire"]) for r in starts
                     if r["pid"] == kill.pid and kill.t - max(in_flight_ms, 1) <= r["t"] <= kill.t}
        in_flight.add((kill.job, kill.fire))
    in_window = {k: v for k, v in by_key.items() if w_start <= k[1] <= w_end}
    duplicates = 0
    takeovers = 0
    for key, runs in in_window.items():
        extra = len(runs) - 1
        if key in in_flight and extra > 0 and any(r["pid"] != kill.pid for r in runs[1:]):  # type: ignore[union-attr]
            extra -= 1  # attempt 2 of a killed in-flight run is a takeover, not a duplicate
            takeovers += 1
        duplicates += max(0, extra)
    missed = len(expected_fires(jobs, w_start, w_end, interval_ms) - in_window.keys())
    latencies = [runs[0]["t"] - key[1] for key, runs in in_window.items()]

    gap_ms: int | None = None
    if kill is not None:
        times: dict[str, list[int]] = defaultdict(list)
        for r in starts:
            if r["t"] >= kill.t:
                times[r["job"]].append(r["t"])
        end = min(stop_t, w_end + EDGE_MS)
        gap_ms = 0
        for job in jobs:
            ts = [kill.t, *sorted(times.get(job, [])), end]
            gap_ms = max(gap_ms, max(b - a for a, b in itertools.pairwise(ts)))

    return {
        "window_ms": [w_start, w_end],
        "runs": sum(len(v) for v in in_window.values()),
        "duplicates": duplicates,
        "missed": missed,
        "latency_ms": {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
                       "max": max(latencies) if latencies else None},
        "latencies": latencies,
        "gap_after_kill_ms": gap_ms,
        "takeover_ms": takeover_ms,
        "takeovers": takeovers,
        "distinct_fires": len(by_key),
    }


def summarise(values: Sequence[float | None]) -> dict[str, float | None]:
    """Median with min and max, ignoring missing values."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None}
    return {"median": float(statistics.median(present)), "min": float(min(present)),
            "max": float(max(present))}
