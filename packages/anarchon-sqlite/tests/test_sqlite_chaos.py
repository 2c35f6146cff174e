"""A short chaos run on SQLite: replicas killed, frozen and stopped at random (`make chaos` runs longer)."""

from __future__ import annotations

from pathlib import Path

from anarchon_testkit.chaos import run


def test_a_short_chaos_run_keeps_every_guarantee(tmp_path: Path) -> None:
    report = run(f"sqlite:///{tmp_path / 'chaos.db'}", tmp_path / "logs", seconds=14, seed=5, quiet=True)
    assert report.violations == [], report.summary() + "\n" + "\n".join(report.violations)
    assert sum(report.actions.values()) >= 3, f"too few faults to mean anything: {report.summary()}"
    assert report.starts >= 10, report.summary()
