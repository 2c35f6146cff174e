"""The `anarchon` command: next (DST), backends, status, run (a real subprocess, SIGTERM)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from anarchon import ClaimRequest, MemoryBackend, MemoryStore, Scheduler
from anarchon._plugins import _scheme_hint
from anarchon.cli import format_status, main, read_status
from anarchon.testing import ManualClock


def test_next_previews_fire_times_across_the_spring_gap(capsys: pytest.CaptureFixture[str]) -> None:
    # Athens springs forward on 2026-03-29 at 03:00 -> 04:00: 03:30 does not exist that day.
    rc = main(["next", "30 3 * * *", "--timezone", "Europe/Athens", "-n", "3", "--after", "2026-03-28T00:00"])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [
        "2026-03-28T03:30:00+02:00", "2026-03-29T04:00:00+03:00", "2026-03-30T03:30:00+03:00",
    ]
    assert lines[1].split()[2] == "2026-03-29T01:00:00Z"


def test_next_with_the_issue_example(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["next", "0 8 * * 1-5", "--timezone", "Europe/Athens", "-n", "5",
               "--after", "2026-10-23T09:00"])
    assert rc == 0
    first = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    # Friday 23rd, then Mon-Fri; DST ends on Sunday the 25th, so the offset changes from +03 to +02.
    assert first == [
        "2026-10-26T08:00:00+02:00", "2026-10-27T08:00:00+02:00", "2026-10-28T08:00:00+02:00",
        "2026-10-29T08:00:00+02:00", "2026-10-30T08:00:00+02:00",
    ]


def test_errors_are_one_line_and_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "0 8 * *"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("anarchon next: error: invalid cron expression '0 8 * *'")
    assert main(["status", "nope://user:hunter2@db/0"]) == 1
    err = capsys.readouterr().err
    assert "hunter2" not in err and "no installed backend handles 'nope'" in err and err.count("\n") == 1
    assert main(["status", "memory-claim://"]) == 1
    assert "'inspect' capability" in capsys.readouterr().err
    assert main(["run", "no_such_module_here:scheduler"]) == 1
    assert "no such module" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_backends_lists_the_installed_drivers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    memory = next(r for r in rows if r["class"] == "anarchon.MemoryBackend")
    assert memory["schemes"] == ["memory://"] and "lease" in memory["capabilities"]
    assert main(["backends"]) == 0
    assert "memory-claim://" in capsys.readouterr().out


def test_status_reads_the_records() -> None:
    clock = ManualClock(1_800_000_000_000)
    store = MemoryStore(clock)
    backend = MemoryBackend(store)
    result = asyncio.run(backend.claim(ClaimRequest("ns", "report", 1_800_000_000_000, "host:1:ab12",
                                                     lease_ms=30_000)))
    assert result.won
    clock.advance(2_500)
    states = asyncio.run(read_status(MemoryBackend(store), "ns"))
    table = format_status(states).splitlines()
    assert table[0].split() == ["JOB", "LAST", "SLOT", "(UTC)", "ATTEMPT", "STATUS", "HOLDER",
                                "LEASE", "EXPIRES", "IN"]
    cells = table[1].split()
    assert cells[:5] == ["report", "2027-01-15T08:00:00Z", "1", "running", "host:1:ab12"]
    assert cells[5] == "27.5s"
    row = json.loads(format_status(states, as_json=True))[0]
    assert row["slot_ms"] == 1_800_000_000_000 and row["status"] == "running"
    assert format_status([]).startswith("no jobs recorded in this namespace yet")
    assert format_status([], namespace="myap").startswith("no jobs recorded in namespace 'myap' yet")


def test_status_never_creates_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["status", "sqlite:///nonexistent.db"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nonexistent.db' does not exist (nothing was created)" in err
    assert list(tmp_path.iterdir()) == []


def test_status_names_a_wrong_or_empty_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "memory://", "--namespace", ""]) == 1
    assert "invalid --namespace ''" in capsys.readouterr().err
    assert main(["status", "memory://", "--namespace", "myap"]) == 0
    assert "no jobs recorded in namespace 'myap' yet" in capsys.readouterr().out


def test_a_scheme_typo_gets_did_you_mean_and_no_install_hint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "memroy://"]) == 1
    err = capsys.readouterr().err
    assert "did you mean 'memory://'?" in err and "pip install" not in err
    assert main(["status", "memory-claimm://"]) == 1
    assert "did you mean 'memory-claim://'?" in capsys.readouterr().err


def test_an_uninstalled_drivers_scheme_names_that_driver() -> None:
    installed = ["memory", "memory-claim", "sqlite"]
    assert _scheme_hint("postgresql", installed) == "install its driver, `pip install anarchon-postgres`"
    hint = _scheme_hint("mysql", installed)
    assert "anarchon-postgres" in hint and "anarchon-sqlite" not in hint


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"anarchon {metadata.version('anarchon-core')}"


def test_run_with_an_unreachable_store_prints_one_line(tmp_path: Path) -> None:
    """`scheduler.run()` and `anarchon run`: one line on stderr, exit status 1, no traceback."""
    (tmp_path / "down_jobs.py").write_text(
        "from anarchon import Scheduler\n"
        "from anarchon_sqlite import SqliteBackend\n"
        "scheduler = Scheduler(SqliteBackend.from_url('sqlite:///no-such-dir/jobs.db'))\n"
        "scheduler.every('tick', '1s', lambda: None)\n"
        "if __name__ == '__main__':\n"
        "    scheduler.run()\n"
    )
    for args in (["down_jobs.py"], ["-m", "anarchon.cli", "run", "down_jobs:scheduler"]):
        done = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 1, done
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith("anarchon: error: cannot open sqlite:///no-such-dir/jobs.db"), done


def _collector_seen_by_a_handler(tmp_path: Path, *, set_up: str = "", run_args: str = "") -> tuple[int, int]:
    """Run a script that does `set_up`, then `scheduler.run(run_args)`, and return what its first
    handler run sees: how many objects are frozen, and the youngest generation's threshold."""
    (tmp_path / "gc_jobs.py").write_text(
        "import gc\n"
        "from anarchon import MemoryBackend, Scheduler\n"
        f"{set_up}\n"
        "scheduler = Scheduler(MemoryBackend(), lease='2s', heartbeat='0.5s')\n\n"
        "@scheduler.every('tick', '100ms', jitter=0, catch_up=0)\n"
        "async def tick() -> None:\n"
        "    print(gc.get_freeze_count(), gc.get_threshold()[0], flush=True)\n"
        "    await scheduler.stop()\n\n"
        f"scheduler.run({run_args})\n"
    )
    done = subprocess.run([sys.executable, "gc_jobs.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done
    frozen, young = map(int, done.stdout.split()[:2])
    return frozen, young


@pytest.mark.parametrize("tune", [True, False])
def test_run_tunes_the_collector_once_started(tmp_path: Path, tune: bool) -> None:
    """`scheduler.run()` freezes the objects alive once it has started (`gc.freeze()`: a collection
    then skips them) and raises the youngest generation's threshold, unless `tune_gc=False`."""
    frozen, young = _collector_seen_by_a_handler(tmp_path, run_args=f"tune_gc={tune}")
    if tune:
        assert frozen > 10_000 and young == 10_000, (frozen, young)
    else:
        assert frozen == 0 and young < 10_000, (frozen, young)


@pytest.mark.parametrize("setting", [50_000, 0])
def test_run_leaves_a_higher_young_threshold_and_a_disabled_collector_as_they_are(tmp_path: Path,
                                                                                  setting: int) -> None:
    """An app that set a higher threshold, or turned automatic collection off (0), keeps its setting."""
    _frozen, young = _collector_seen_by_a_handler(tmp_path, set_up=f"gc.set_threshold({setting})")
    assert young == setting


def test_run_runs_a_users_scheduler_and_stops_on_sigterm(tmp_path: Path) -> None:
    out = tmp_path / "runs.txt"
    (tmp_path / "cli_jobs.py").write_text(
        "from anarchon import MemoryBackend, Scheduler\n"
        "scheduler = Scheduler(backend=MemoryBackend(), lease='2s', heartbeat='0.5s')\n\n"
        "@scheduler.every('tick', '100ms', jitter=0, catch_up=0)\n"
        "def tick(ctx) -> None:\n"
        f"    with open({str(out)!r}, 'a') as f:\n"
        "        f.write(f'{ctx.slot}\\n')\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "anarchon.cli", "run", "cli_jobs:scheduler"], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not (out.exists() and len(out.read_text().splitlines()) >= 2):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "no run within 10 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "stopping (signal SIGTERM)" in output and "tick slot=" in output


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("anarchon")
    done = subprocess.run([str(script), "next", "*/15 * * * *", "-n", "2"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 2


@pytest.mark.parametrize("verb", ["pause", "resume", "trigger"])
def test_controls_on_a_claim_only_store_are_refused_in_one_line(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([verb, "memory-claim://", "tick", "--namespace", "app"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"anarchon {verb}: error: cannot {verb} 'tick': ")
    assert "lacks the 'control' capability" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("verb", "said"), [("pause", "paused"), ("resume", "resumed"), ("trigger", "triggered")]
)
def test_controls_print_what_they_did(verb: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb, "memory://", "tick", "--force"]) == 0
    assert capsys.readouterr().out.startswith(f"tick: {said}")


def test_status_shows_a_trigger_record_by_its_job_name() -> None:
    store = MemoryStore()

    async def main() -> str:
        async def tick() -> None:
            pass

        s = Scheduler(MemoryBackend(store), heartbeat="1s", lease="3s")
        s.every("tick", "1h", tick)
        await s.start()
        await s.trigger("tick")
        for _ in range(100):
            if [j for j in await MemoryBackend(store).jobs("anarchon") if j.status.value == "done"]:
                break
            await asyncio.sleep(0.01)
        await s.stop()
        return format_status(await read_status(MemoryBackend(store), "anarchon"))

    table = asyncio.run(main())
    assert "tick (trigger)" in table and "\x1f" not in table, table


def _history_store() -> tuple[MemoryStore, ManualClock]:
    """A store with one running job that failed before, and one job published that never ran."""
    from anarchon import CatalogueEntry, RunRecord

    clock = ManualClock(1_800_000_000_000)
    store = MemoryStore(clock)
    backend = MemoryBackend(store)

    async def fill() -> None:
        assert (await backend.claim(ClaimRequest("ns", "report", 1_800_000_000_000, "host:1:ab12",
                                                 lease_ms=30_000))).won
        await backend.record_runs("ns", [
            RunRecord("report", 1_799_999_940_000, 1, 1, "host:2:cd34", "failed", 1_799_999_940_010, 1500,
                      "ValueError: the report\nhas no rows"),
            RunRecord("report", 1_799_999_880_000, 1, 1, "host:2:cd34", "done", 1_799_999_880_010, 900),
        ], 10)
        await backend.publish_catalogue("ns", [
            CatalogueEntry("report", "host:1:ab12", "every 1m", "every", "UTC", {}, 1_800_000_060_000,
                           fingerprint="every:60000+0"),
            CatalogueEntry("digest", "host:1:ab12", "cron '0 8 * * 1-5' (Europe/Athens)", "cron",
                           "Europe/Athens", {"lease": "30s"}, 1_800_000_000_000 - 1,
                           fingerprint="cron:0 8 * * 1-5@Europe/Athens"),
        ], 180_000)

    asyncio.run(fill())
    clock.advance(2_500)
    return store, clock


def test_status_shows_next_runs_last_outcomes_and_jobs_that_never_ran() -> None:
    from anarchon.cli import format_overview, read_overview

    store, _clock = _history_store()
    overview = asyncio.run(read_overview(MemoryBackend(store), "ns"))
    rows = {r["job"]: r for r in json.loads(format_overview(overview, as_json=True))}
    assert list(rows) == ["digest", "report"]
    report, digest = rows["report"], rows["digest"]
    assert (report["status"], report["holder"], report["attempt"]) == ("running", "host:1:ab12", 1)
    assert report["next_run"] == "2027-01-15T08:01:00Z" and report["schedule"] == "every 1m"
    assert (report["last_outcome"], report["last_instance"]) == ("failed", "host:2:cd34")
    assert report["last_error"] == "ValueError: the report\nhas no rows"
    assert digest["status"] == "never run" and digest["last_slot"] is None and digest["last_outcome"] is None
    # Its published next slot has passed: the next one is computed from the schedule (Monday, 08:00 in
    # Athens, after Friday 10:00 there).
    assert digest["next_run"] == "2027-01-18T06:00:00Z"
    table = format_overview(overview).splitlines()
    assert table[0].split()[:4] == ["JOB", "NEXT", "RUN", "(UTC)"]
    assert table[1].split()[:2] == ["digest", digest["next_run"]] and "never run" in table[1]
    assert "ValueError: the report has no rows" in table[2], "the error on one line"


def test_history_prints_the_newest_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from anarchon.cli import format_history, read_history

    store, _clock = _history_store()
    runs = asyncio.run(read_history(MemoryBackend(store), "ns", "report", 1))
    assert [r.outcome for r in runs] == ["failed"]
    rows = json.loads(format_history(runs, as_json=True))
    assert rows[0]["slot"] == "2027-01-15T07:59:00Z" and rows[0]["duration_ms"] == 1500
    table = format_history(asyncio.run(read_history(MemoryBackend(store), "ns", "report", 10)))
    assert [line.split()[2] for line in table.splitlines()[1:]] == ["failed", "done"]
    assert format_history([], job="nope").startswith("no runs of 'nope' recorded")
    assert main(["history", "memory://", "report", "--limit", "0"]) == 1
    assert "invalid --limit 0" in capsys.readouterr().err
    assert main(["history", "memory-claim://", "report"]) == 1
    err = capsys.readouterr().err
    assert "keeps no run history" in err and "MemoryClaimBackend" in err
    assert main(["history", "memory://", "report", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_dashboard_without_its_distribution_says_what_to_install(tmp_path: Path) -> None:
    """`anarchon dashboard` lives in the core's CLI, but the page is anarchon-dashboard's: without it,
    one line saying what to install (the import is blocked, as if the distribution were absent)."""
    code = ("import sys; sys.modules['anarchon_dashboard'] = None; from anarchon.cli import main; "
            "sys.exit(main(['dashboard', 'memory://']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=False, cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr == ("anarchon dashboard: error: the dashboard is a distribution of its own: "
                           "pip install anarchon-dashboard\n")
