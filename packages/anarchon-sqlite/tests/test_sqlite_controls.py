"""Three real replica processes on one SQLite file, controlled from the `anarchon` command line."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from anarchon.testing.cluster import Cluster

HEARTBEAT_S = 0.5
# Room for what the bound leaves out: the job's jitter (50 ms), a poll's and a claim's round trips.
SLACK_S = 0.3


def cli(*args: str) -> str:
    """Run `anarchon ARGS` in a process of its own (one that registers no jobs); return its stdout."""
    done = subprocess.run([sys.executable, "-m", "anarchon.cli", *args], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_pause_resume_and_trigger_from_the_cli_reach_every_replica(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cluster.db"
    with Cluster(url, tmp_path / "replicas", replicas=3, heartbeat=f"{HEARTBEAT_S}s", tick_every="1s",
                 long_every="1h") as cluster:
        ns = cluster.namespace
        cluster.wait_for(lambda e: e.event == "start" and e.job == "tick" and e.slot > cluster.ready_ms,
                         timeout=10)

        cli("pause", url, "tick", "--namespace", ns)
        paused_ms = int(time.time() * 1000)
        time.sleep(3)
        late = [e.slot for e in cluster.starts("tick") if e.slot > paused_ms + (HEARTBEAT_S + SLACK_S) * 1000]
        assert not late, f"slots run after the pause plus a heartbeat: {late}"
        for log in sorted((tmp_path / "replicas").glob("replica-*.log")):
            assert "tick slot=" in log.read_text() and "skipped (paused)" in log.read_text(), (
                f"{log.name} does not report its paused slots as skipped:\n{cluster.output()}")

        out = cli("trigger", url, "tick", "--namespace", ns)  # a paused job can still be triggered
        found = re.search(r"trigger (\d+)", out)
        assert found, out
        trigger = int(found.group(1))
        ran = cluster.wait_for(lambda e: e.event == "start" and e.slot == trigger, timeout=5)
        assert ran.t * 1000 - trigger <= (HEARTBEAT_S + SLACK_S) * 1000
        time.sleep(2 * HEARTBEAT_S)
        assert [e.slot for e in cluster.starts("tick") if e.slot > paused_ms + 1000] == [trigger], (
            "the trigger runs exactly once, and the paused schedule not at all")

        cli("resume", url, "tick", "--namespace", ns)
        resumed_ms = int(time.time() * 1000)
        back = cluster.wait_for(lambda e: e.event == "start" and e.job == "tick" and e.slot > resumed_ms,
                                timeout=5)
        assert back.slot - resumed_ms <= 1000 + (HEARTBEAT_S + SLACK_S) * 1000
        cluster.assert_one_winner()
