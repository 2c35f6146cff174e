"""The operator's commands on a real SQLite file: controls refuse typos, status shows pauses and pending
triggers, forget and namespaces (the CLI in process, the store on disk between commands)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from anarchon import CatalogueEntry, ClaimRequest, ReleaseOutcome, RunRecord
from anarchon.cli import main
from anarchon_sqlite import SqliteBackend

NS = "ntapp"


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A store where replica `host-a` registers `report` (run once, done) and `digest` (never run), and
    another namespace holds one job."""
    path = tmp_path / "jobs.db"

    async def seed() -> None:
        backend = SqliteBackend(path)
        await backend.open()
        try:
            won = await backend.claim(ClaimRequest(NS, "report", 1_700_000_000_000, "host-a"))
            assert won.lease is not None and await backend.release(won.lease, ReleaseOutcome.DONE)
            await backend.record_runs(NS, [RunRecord("report", 1_700_000_000_000, 1, 1, "host-a", "done",
                                                     1_700_000_000_010, 40)], 10)
            await backend.publish_catalogue(NS, [
                CatalogueEntry("report", "host-a", "every 1m", "every", "UTC", {}, None,
                               fingerprint="every:60000+0"),
                CatalogueEntry("digest", "host-a", "every 1h", "every", "UTC", {}, None,
                               fingerprint="every:3600000+0"),
            ], 600_000)
            await backend.set_control("other", "solo", paused=True)
        finally:
            await backend.close()

    asyncio.run(seed())
    return f"sqlite:///{path}"


def status(url: str, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    assert main(["status", url, "--namespace", NS, "--json"]) == 0
    return {row["job"]: row for row in json.loads(capsys.readouterr().out)}


@pytest.mark.parametrize("verb", ["pause", "resume", "trigger"])
def test_a_control_of_an_unknown_job_is_refused_in_one_line(
        verb: str, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb, url, "reprot", "--namespace", NS]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"anarchon {verb}: error: cannot {verb} 'reprot': no job 'reprot' in "
                                   f"namespace '{NS}' (known: digest, report); ")
    assert "--force" in captured.err
    assert "reprot" not in status(url, capsys), "a refused control stores nothing"


@pytest.mark.parametrize("verb", ["pause", "resume", "trigger"])
def test_a_control_in_the_wrong_namespace_is_refused(
        verb: str, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb, url, "report"]) == 1
    assert "no job 'report' in namespace 'anarchon' (known: none)" in capsys.readouterr().err


def test_force_covers_a_job_not_deployed_yet(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pause", url, "nightly", "--namespace", NS, "--force"]) == 0
    assert capsys.readouterr().out.startswith("nightly: paused")
    assert status(url, capsys)["nightly"]["paused"] is True


def test_status_shows_a_pause_and_a_pending_trigger(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = status(url, capsys)["report"]
    assert (before["status"], before["paused"], before["pending_trigger"]) == ("done", False, False)
    assert before["last_success"] == "2023-11-14T22:13:20.050Z" and before["missed"] == 0
    assert main(["pause", url, "report", "--namespace", NS]) == 0
    assert main(["trigger", url, "digest", "--namespace", NS]) == 0
    capsys.readouterr()
    rows = status(url, capsys)
    assert (rows["report"]["status"], rows["report"]["paused"]) == ("done", True)
    assert rows["digest"]["pending_trigger"] is True and rows["digest"]["trigger_id"] > 0
    assert main(["status", url, "--namespace", NS]) == 0
    table = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "done (paused)" in table["report"]
    assert "never run (trigger pending)" in table["digest"]
    assert main(["resume", url, "report", "--namespace", NS]) == 0
    capsys.readouterr()
    assert status(url, capsys)["report"]["paused"] is False


def test_forget_is_refused_while_a_replica_registers_the_job_unless_forced(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pause", url, "report", "--namespace", NS]) == 0
    capsys.readouterr()
    assert main(["forget", url, "report", "--namespace", NS]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"anarchon forget: error: cannot forget 'report' in namespace '{NS}': live "
                          "replicas register it (host-a); ") and err.count("\n") == 1
    assert "report" in status(url, capsys)
    assert main(["forget", url, "report", "--namespace", NS, "--force"]) == 0
    assert capsys.readouterr().out.startswith(f"report: forgotten in namespace '{NS}'")
    assert "report" not in status(url, capsys), "its record, pause, runs and registration are gone"
    assert main(["history", url, "report", "--namespace", NS, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["forget", url, "report", "--namespace", NS, "--force"]) == 1
    assert ("nothing stored of 'report' in namespace 'ntapp' (jobs stored: digest)"
            in capsys.readouterr().err)


def test_forget_removes_a_typo_that_was_forced_in(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pause", url, "reprot", "--namespace", NS, "--force"]) == 0
    assert main(["forget", url, "reprot", "--namespace", NS]) == 0, "no replica registers a typo"
    capsys.readouterr()
    assert "reprot" not in status(url, capsys)


def test_namespaces_lists_each_with_its_job_count(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["namespaces", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [["NAMESPACE", "JOBS"], [NS, "2"], ["other", "1"]]
    assert main(["namespaces", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"namespace": NS, "jobs": 2},
                                                   {"namespace": "other", "jobs": 1}]
    assert main(["forget", url, "solo", "--namespace", "other"]) == 0
    capsys.readouterr()
    assert main(["namespaces", url, "--json"]) == 0
    assert [row["namespace"] for row in json.loads(capsys.readouterr().out)] == [NS]


def test_forget_and_namespaces_on_a_store_that_cannot_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["namespaces", "memory-claim://"]) == 1
    assert "'forget' capability" in capsys.readouterr().err
    assert main(["forget", "memory-claim://", "report"]) == 1
    assert "cannot forget 'report'" in capsys.readouterr().err
