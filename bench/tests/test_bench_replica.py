"""The anarchon replica's call counts file (run with `.venv/bin/pytest bench/tests`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "replicas"))
from anarchon_replica import CallCounts


def test_counts_are_readable_at_once_and_after_each_write(tmp_path: Path) -> None:
    path = tmp_path / "calls-1.json"
    counts = CallCounts(path)
    assert json.loads(path.read_text()) == {}
    counts.add("claim_many", 200)
    counts.add("release", None)
    counts.write()
    assert json.loads(path.read_text()) == {"claim_many": 1, "claim_many_items": 200, "release": 1}
    for _ in range(12):
        counts.add("claim_many", 7)
    counts.write()
    assert json.loads(path.read_text()) == {"claim_many": 13, "claim_many_items": 284, "release": 1}


def test_nothing_is_written_without_a_call_since_the_last_write(tmp_path: Path) -> None:
    path = tmp_path / "calls-1.json"
    counts = CallCounts(path)
    counts.add("renew_many", 3)
    counts.write()
    path.write_text("sentinel")
    counts.write()
    assert path.read_text() == "sentinel"
    counts.add("renew_many", 1)
    counts.write()
    assert json.loads(path.read_text()) == {"renew_many": 2, "renew_many_items": 4}


def test_a_shorter_text_leaves_no_tail_of_the_longer_one(tmp_path: Path) -> None:
    path = tmp_path / "calls-1.json"
    counts = CallCounts(path)
    counts.add("claim_many", 123456789)
    counts.write()
    counts.counts.clear()
    counts.add("claim", None)
    counts.write()
    assert json.loads(path.read_text()) == {"claim": 1}
