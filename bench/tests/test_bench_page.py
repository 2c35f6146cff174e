"""The benchmark pages are generated from a run's results: the targets are judged from the numbers."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from page import merged, newest_results, render, render_numbers


def run(scheduler: str, scenario: str, *, missed: int = 0, p50: float = 10, p99: float = 40,
        steady: float = 0.2, takeover: float | None = None) -> dict[str, Any]:
    return {"scheduler": scheduler, "scenario": scenario, "runs": 100, "duplicates": 0, "missed": missed,
            "latency_ms": {"p50": p50, "p99": p99, "max": p99}, "gap_after_kill_ms": None,
            "takeover_ms": takeover, "cpu_per_replica_s": 0.5, "steady_cpu_per_45s": steady,
            "peak_rss_mb": 30.0, "store_cpu_s": 1.0, "round_trips_per_slot": 1.0}


def test_the_page_judges_each_target_from_the_runs() -> None:
    data = {
        "meta": {"machine": "2 cores", "repeats": 1,
                 "durations": {"A": 45, "B": 45, "D": 45, "K": 45, "S": 45, "R": 45, "C": 60},
                 "kill_at": {"A": 20, "B": None, "D": None, "K": 20, "S": None, "R": None, "C": None}},
        "runs": [
            run("anarchon-redis", "A", missed=9, takeover=5000),
            run("anarchon-rabbitmq", "A", p50=31, p99=65),
            run("arq-redis", "A", p50=300, p99=400),
            run("anarchon-redis", "B", steady=0.4),
            run("anarchon-rabbitmq", "B", missed=12, steady=4.9),
            run("anarchon-redis", "D", p50=40, p99=90, steady=2.0),
            run("anarchon-postgresql", "D", p50=60, p99=180, steady=3.1),
            run("apscheduler4-postgresql", "D", p50=900, p99=2500, steady=30),
            run("anarchon-redis", "K", takeover=5400),
            run("anarchon-postgresql", "K", takeover=6300),
            run("anarchon-nats", "K"),
            run("anarchon-redis", "S", steady=0.25),
            run("anarchon-nats-kv", "S", steady=1.3),
            run("anarchon-redis", "R", steady=0.1),
            run("anarchon-redis", "C", p50=600, p99=900, steady=16),
            run("anarchon-postgresql", "C", missed=5),
        ],
    }
    page = render(data)
    line = r"^\| ([^|]+) \| (?:A|B|D|K|S|R|C|C5) \|.*$"
    rows = {m.group(1): m.group(0) for m in re.finditer(line, page, re.M)}
    assert rows["p50 ≤ 25 ms and p99 ≤ 60 ms at 10 jobs"].endswith("| redis | rabbitmq |")
    assert rows["0 duplicates and 0 missed at 200 jobs"].endswith("| redis | rabbitmq |")
    takeover = "a killed run taken over as attempt 2 within lease + heartbeat (6 s), where one ran"
    assert rows[takeover].endswith("| redis | - |")
    assert rows["10,000 jobs on Redis, none missed"].endswith("| redis | - |")
    assert rows["10,000 jobs on PostgreSQL, none missed"].endswith("| - | postgresql |")
    # The kill of scenario K lands on a run in flight, so every lease backend is judged, and a
    # claim-only backend (no takeover) is not.
    in_flight = "a run killed in flight taken over as attempt 2 within lease + heartbeat (6 s)"
    assert rows[in_flight].endswith("| redis | postgresql |")
    assert rows["p99 ≤ 100 ms at 2,000 jobs"].endswith("| redis | postgresql |")
    assert rows["≤ 2.2 CPU s per replica per 45 s at 2,000 jobs"].endswith("| redis | postgresql |")
    assert "| apscheduler4-postgresql | 0 | 0 | 900 / 2,500 |" in page
    assert "| K | 10 | 10 s |" in page
    rest = "steady CPU ≤ 0.3 s per replica per 45 s at 10 jobs, default settings"
    assert rows[rest].endswith("| redis | nats-kv |")
    idle = "10,000 jobs not due: < 1 % of a core (0.45 s per 45 s) and < 80 MB RSS"
    assert rows[idle].endswith("| redis | - |")
    assert "| R | 10,000 | 365 d (not due) |" in page
    assert "5,000 jobs on PostgreSQL" not in page  # no C5 in this run
    assert "| arq-redis | 0 | 0 | 300 / 400 |" in page
    assert "## Every number" not in page and "DESIGN" not in page
    numbers = render_numbers(data)
    assert "## Every number" in numbers and "## Reading the numbers" in numbers
    assert "| anarchon-redis | 100 | 0 | 9 | 10 | 40 | 40 | n/a | 5000 |" in numbers


def test_the_page_says_how_often_each_scenario_ran_and_shows_the_spread() -> None:
    data: dict[str, Any] = {
        "meta": {"machine": "2 cores", "repeats": {"A": 1, "D": 3, "S": 3},
                 "durations": {"A": 45, "D": 45, "S": 45}, "kill_at": {"A": 20, "D": None, "S": None}},
        "runs": [
            run("anarchon-redis", "A", takeover=5000),
            run("anarchon-redis", "D", p99=90, steady=2.0),
            run("anarchon-redis", "D", p99=120, steady=2.4),
            run("anarchon-redis", "D", p99=95, steady=2.1),
            run("arq-redis", "D", p50=300, p99=400),
            *(run("anarchon-redis", "S", steady=s) for s in (0.25, 0.28, 0.31)),
        ],
    }
    data["runs"][2]["missed"] = 7
    page = render(data)
    assert "every store on loopback, 3 repeats of D and S; 1 repeat of A. Where a scenario ran more" in page
    assert "One repeat: read differences of about 10% as noise." in page
    # The targets are judged on the median of the repeats, and each repeat's misses are listed.
    line = r"^\| ([^|]+) \| (?:A|D|S) \|.*$"
    rows = {m.group(1): m.group(0) for m in re.finditer(line, page, re.M)}
    assert rows["p99 ≤ 100 ms at 2,000 jobs"].endswith("| redis | - |")
    assert rows["≤ 2.2 CPU s per replica per 45 s at 2,000 jobs"].endswith("| redis | - |")
    assert rows["0 duplicates and 0 missed at 2,000 jobs"].endswith("| - | redis |")
    assert "| anarchon-redis | 0, 0, 0 | 0, 7, 0 | 10 / 95 | 2.10 (2.00-2.40) | 1.0 |" in page
    assert "| 10 / 40 | 0.28 (0.25-0.31) | 1.0 |" not in page  # no peer ran S
    assert "Scenarios A and S run anarchon alone." in page
    assert "| 0.28 (0.25-0.31) |" in render_numbers(data)  # S, in every number


def test_one_repeat_of_every_scenario_is_said_once() -> None:
    data = {"meta": {"machine": "2 cores", "repeats": 1, "durations": {"B": 45}, "kill_at": {"B": None}},
            "runs": [run("anarchon-redis", "B")]}
    page = render(data)
    assert ("every store on loopback, 1 repeat of each scenario. One repeat: read differences of about 10% "
            "as noise. Raw data") in page


def test_a_resumed_run_keeps_the_scenarios_it_does_not_repeat(tmp_path: Path) -> None:
    from run import SCENARIOS, resumed, run_meta

    stop = 1_000_000_045_000
    lines = [{"scenario": "A", "scheduler": "anarchon-redis", "run_id": "A01", "repeat": 0, "stop_t": stop},
             {"scenario": "D", "scheduler": "anarchon-redis", "run_id": "D01", "repeat": 0, "stop_t": stop},
             {"scenario": "D", "scheduler": "anarchon-redis", "run_id": "D11", "repeat": 1, "stop_t": stop}]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    (tmp_path / "results.json").write_text(json.dumps(
        {"meta": {"durations": {"A": 30.0, "D": 45.0}, "kill_at": {"A": 15.0, "D": None}}}))
    runs = resumed(tmp_path, [SCENARIOS["D"]])
    assert [(r["scenario"], r["repeat"]) for r in runs] == [("A", 0), ("D", 0), ("D", 1)]
    meta = run_meta(tmp_path, [SCENARIOS["D"]], runs)
    # A keeps the duration and kill time it ran with; D is as asked for now.
    assert meta == {"repeats": {"A": 1, "D": 2}, "durations": {"A": 30.0, "D": SCENARIOS["D"].duration},
                    "kill_at": {"A": 15.0, "D": None}}


def test_publish_takes_the_newest_finished_run(tmp_path: Path) -> None:
    runs = (("2026-01-01T10-00-00", True), ("2026-01-02T10-00-00", True), ("2026-01-03T10-00-00", False))
    for name, done in runs:
        (tmp_path / name).mkdir()
        if done:
            (tmp_path / name / "results.json").write_text("{}")
    assert newest_results(tmp_path) == tmp_path / "2026-01-02T10-00-00"


def herd(scheduler: str, repeat: int, *, last: float, store_us: float | None, peak: list[float]
         ) -> dict[str, Any]:
    """A row as `stored_herd.py --json` prints it (run.py adds scenario, scheduler, repeat and args)."""
    return {"url": "redis://127.0.0.1:6379/11", "count": 5000, "replicas": 3, "history": "on",
            "populate_s": 0.6, "starts": 5000, "duplicates": 0, "missed": 0, "first_s": 0.4, "last_s": last,
            "fires_per_s": 5000 / last, "cpu_s": 1.1, "fires_per_cpu_s": 4545.5, "store_cpu_s": 0.5,
            "store_us_per_fire": store_us, "peak_mb": peak, "scenario": "M3", "scheduler": scheduler,
            "repeat": repeat, "args": ["--lead", "20", "--quiet", "3"]}


def churn(scheduler: str, repeat: int, *, lost: int) -> dict[str, Any]:
    """A row as `stored_churn.py --json` prints it."""
    return {"url": "postgresql://postgres@127.0.0.1:5432/bench_anarchon", "count": 36000, "replicas": 3,
            "populate_s": 3.1, "history": "on", "changes": 2990, "conflicts": 0, "skipped": 0,
            "changes_per_s": 99.7, "cpu_s": 2.0, "seconds": 30.0, "due": 250, "starts": 300, "duplicates": 0,
            "lost": lost, "raced": 1, "late_after_change": 0, "late_removed_or_moved": 0, "stale_args": 0,
            "p50_ms": 30.0, "p99_ms": 120.0, "cpu_pct": [5.0, 6.5, 7.0], "peak_mb": [50.0, 51.0, 52.0],
            "work": "/tmp/x", "scenario": "M4", "scheduler": scheduler, "repeat": repeat,
            "args": ["--rate", "100", "--warmup", "10", "--seconds", "30"]}


def test_the_stored_scenarios_get_a_table_each_with_min_max_over_repeats() -> None:
    data: dict[str, Any] = {
        "meta": {"machine": "2 cores", "repeats": {"B": 1}, "durations": {"B": 45}, "kill_at": {"B": None}},
        "runs": [run("anarchon-redis", "B"), run("arq-redis", "B")],
        "stored": [churn("anarchon-postgresql", 0, lost=0),
                   herd("anarchon-postgresql", 0, last=2.5, store_us=180.4, peak=[60.0, 62.0, 70.0]),
                   herd("anarchon-redis", 0, last=1.5, store_us=40.2, peak=[50.0, 52.0, 55.0]),
                   herd("anarchon-redis", 1, last=1.25, store_us=None, peak=[49.0, 52.0, 53.0]),
                   churn("anarchon-postgresql", 1, lost=3)],
    }
    page = render(data)
    m3 = page.index("### Scenario M3: 5,000 stored schedules due at one second, 3 replicas")
    m4 = page.index("### Scenario M4: 36,000 hourly stored schedules, changed at 100 a second, 3 replicas")
    assert page.index("### Scenario B: 200 jobs") < m3 < m4 < page.index("Every metric of every scenario")
    assert "Scenarios M3 and M4 keep the schedules as data" in page
    # Redis before PostgreSQL; the cells span the repeats (and the replicas, for peak RSS).
    assert page.index("| anarchon-redis | 0 | 0 | 0.40 | 1.25-1.50 | 3,333-4,000 | 4,546 | 40 | 49-55 |") < \
        page.index("| anarchon-postgresql | 0 | 0 | 0.40 | 2.50 | 2,000 | 4,546 | 180 | 60-70 |")
    assert "| anarchon-postgresql | 100 | 0 | 0-3 | 1 | 0 | 30 | 120 | 5-7 |" in page
    assert "2 repeats, each cell min-max over them; `bench/stored_churn.py`." in page
    assert "| anarchon-postgresql | 100 | 0 | 0-3 |" in render_numbers(data)
    # A run of the stored scenarios alone renders too, and a run without them has no such section.
    alone = render({**data, "runs": [], "meta": {**data["meta"], "repeats": {}, "durations": {},
                                                  "kill_at": {}}})
    assert "### Scenario M3" in alone and "### Scenario B" not in alone
    assert "Scenario M" not in render({**data, "stored": []})


def test_the_stored_scenarios_can_come_from_a_run_of_their_own(tmp_path: Path) -> None:
    import pytest

    meta = {"machine": "2 cores", "repeats": {"B": 1}, "durations": {"B": 45}, "kill_at": {"B": None}}
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "results.json").write_text(json.dumps(
        {"meta": meta, "runs": [run("anarchon-redis", "B"), run("arq-redis", "B")],
         "stored": [herd("anarchon-redis", 0, last=9.0, store_us=None, peak=[50.0])]}))
    (tmp_path / "stored").mkdir()
    (tmp_path / "stored" / "results.json").write_text(json.dumps(
        {"meta": {**meta, "repeats": {}}, "runs": [],
         "stored": [herd("anarchon-redis", 0, last=1.25, store_us=None, peak=[49.0, 53.0])]}))
    data = merged(tmp_path / "code", tmp_path / "stored")
    page = render(data)
    assert "### Scenario B: 200 jobs" in page and "| anarchon-redis | 0 | 0 | 0.40 | 1.25 |" in page
    assert "| 9.00 |" not in page
    assert merged(tmp_path / "code")["stored"][0]["last_s"] == 9.0
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "results.json").write_text(json.dumps({"meta": meta, "runs": []}))
    with pytest.raises(SystemExit, match="no stored-schedule rows"):
        merged(tmp_path / "code", tmp_path / "none")


def test_the_stored_targets_are_judged_on_every_repeat() -> None:
    data: dict[str, Any] = {
        "meta": {"machine": "2 cores", "repeats": {}, "durations": {}, "kill_at": {}}, "runs": [],
        "stored": [herd("anarchon-redis", 0, last=6.5, store_us=50.0, peak=[50.0]),
                   herd("anarchon-postgresql", 0, last=9.5, store_us=130.0, peak=[60.0]),
                   herd("anarchon-postgresql", 1, last=13.9, store_us=240.0, peak=[60.0]),
                   herd("apscheduler4-postgresql", 0, last=465.0, store_us=3000.0, peak=[160.0]),
                   churn("anarchon-postgresql", 0, lost=0)],
    }
    page = render(data)
    assert ("| 100,000 stored schedules due at one second: each started once, the last within 10 s | M3 "
            "| redis | postgresql |") in page
    # M4 asks every change made (at 1,000 a second in the full run; the made-up row made 99.7).
    assert "| M4 | - | postgresql |" in page
    assert "| M1 |" not in page  # (no M1 row in this run)


def test_the_published_pages_are_what_their_data_renders() -> None:
    """The pages in docs/ are generated: an edit made there, not in bench/page.md or bench/numbers.md,
    would be lost at the next `make bench-publish`."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    data = merged(docs / "benchmarks")
    assert render(data) == (docs / "benchmarks.md").read_text(), \
        "docs/benchmarks.md differs from its render: edit bench/page.md (or page.py) instead"
    assert render_numbers(data) == (docs / "internals" / "benchmark-numbers.md").read_text(), \
        "docs/internals/benchmark-numbers.md differs from its render: edit bench/numbers.md instead"
