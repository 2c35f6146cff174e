"""The benchmark's analysis over a synthetic start log (run with `.venv/bin/pytest bench/tests`)."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analysis import Kill, analyse, expected_fires, percentile

T0 = 1_000_000_000_000


def start(job: str, fire: int, pid: int, t: int) -> dict[str, Any]:
    return {"ev": "start", "s": "x", "job": job, "fire": fire, "pid": pid, "t": t}


def test_percentile_nearest_rank() -> None:
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([], 50) is None


def test_expected_fires_on_the_grid() -> None:
    assert expected_fires(["a"], T0 + 1, T0 + 3000) == {("a", T0 + 1000), ("a", T0 + 2000), ("a", T0 + 3000)}


def test_duplicates_missed_latency_and_takeover() -> None:
    records: list[dict[str, Any]] = [{"ev": "ready", "pid": p, "t": T0} for p in (1, 2)]
    stop = T0 + 20_000
    for s in range(0, 21):
        fire = T0 + s * 1000
        if s == 10:
            continue  # missed
        records.append(start("a", fire, 1 if s < 8 else 2, fire + 10))
    records.append(start("a", T0 + 5000, 2, T0 + 5030))  # a duplicate
    records.append(start("a", T0 + 7000, 2, T0 + 12_000))  # attempt 2 of the killed run
    kill = Kill(pid=1, t=T0 + 7100, job="a", fire=T0 + 7000)
    m = analyse(records, ["a"], stop, kill, in_flight_ms=200)
    assert m["window_ms"] == [T0 + 3000, T0 + 17_000]
    assert m["missed"] == 1
    assert m["duplicates"] == 1
    assert m["takeovers"] == 1
    assert m["takeover_ms"] == 4900
    assert m["latency_ms"]["p50"] == 10
    assert m["gap_after_kill_ms"] == 2000  # 9.010 s -> 11.010 s around the missed fire


def test_a_scheduler_never_ready_misses_every_fire_since_its_launch() -> None:
    # Still registering its jobs when the run ended: no `ready`, no start. Its window starts at the
    # launch (not at the epoch, which would count 1.7 billion fires per job).
    m = analyse([], ["a", "b"], T0 + 10_000, None, launched=T0)
    assert m["runs"] == 0
    assert m["missed"] == 2 * 5  # fires T0+3 s .. T0+7 s (the window leaves 3 s at each edge)
    assert analyse([], ["a"], T0 + 10_000, None)["missed"] == 0


def test_a_start_record_reads_back_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start records are formatted by hand, not by json.dumps: they read back as the fields given,
    a job name that JSON must escape included, with and without an attempt."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "replicas"))
    from _log import StartLog
    from analysis import read_log

    log = StartLog(str(tmp_path / "starts.jsonl"), 'sched "x"')
    names = ["a", 'quote " and \\ back', "ünï\ncode"]
    for name in names:
        log.start(name, T0 + 1000, 2)
        log.start(name, T0 + 2000)
    starts = [r for r in read_log(tmp_path / "starts.jsonl") if r["ev"] == "start"]
    assert [(r["s"], r["job"], r["fire"], r.get("attempt"), r["pid"]) for r in starts] == [
        ('sched "x"', name, T0 + fire, attempt, os.getpid()) for name in names
        for fire, attempt in ((1000, 2), (2000, None))]
    assert all(isinstance(r["t"], int) for r in starts)


def test_the_start_log_records_the_cpu_spent_before_the_first_run(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "replicas"))
    from _log import StartLog
    from analysis import read_log

    log = StartLog(str(tmp_path / "starts.jsonl"), "x")
    log.ready()
    spent = resource.getrusage(resource.RUSAGE_SELF)
    log.start("a", T0)
    log.start("b", T0)
    records = read_log(tmp_path / "starts.jsonl")
    assert [r["ev"] for r in records] == ["ready", "first", "start", "start"]
    # The process's CPU so far (to 0.1 ms): what it had spent before the first start, and not much more.
    assert -0.0001 <= records[1]["cpu_s"] - (spent.ru_utime + spent.ru_stime) < 1
    # The analysis reads starts only: a log with the record gives the same numbers as one without.
    synthetic = [{"ev": "ready", "pid": 1, "t": T0}]
    synthetic += [start("a", T0 + s * 1000, 1, T0 + s * 1000 + 10) for s in range(21)]
    first = {**records[1], "pid": 1, "t": T0 + 5}
    without = analyse(synthetic, ["a"], T0 + 20_000, None)
    assert without["runs"] > 0
    assert analyse([*synthetic, first], ["a"], T0 + 20_000, None) == without
