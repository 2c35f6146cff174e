"""Three real replica processes on one SQLite file, controlled from the `anarchon` command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from anarchon_testkit.cluster import check_controls


@pytest.mark.slow
def test_pause_resume_and_trigger_from_the_cli_reach_every_replica(tmp_path: Path) -> None:
    check_controls(f"sqlite:///{tmp_path}/cluster.db", tmp_path / "replicas")
