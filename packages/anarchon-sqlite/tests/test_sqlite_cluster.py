"""Three real replica processes on one SQLite file: a graceful stop, then a kill -9 of a winner."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from anarchon_testkit.cluster import (
    STOP_SCENARIOS,
    Cluster,
    check_blocked_loops,
    check_history,
    check_stop_never_overlaps,
    check_stored_schedules,
)

LEASE_S = 2.0
HEARTBEAT_S = 0.5
JITTER_S = 0.05
# Room for what the bounds leave out: a claim's round trip and an event line reaching the file.
SLACK_S = 0.3


@pytest.mark.slow
def test_handover_after_sigterm_and_takeover_after_kill_9(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cluster.db"
    with Cluster(url, tmp_path / "replicas", replicas=3, lease=f"{LEASE_S}s", heartbeat=f"{HEARTBEAT_S}s",
                 tick_every="1s", long_every="6s", long_run="3s") as cluster:
        first = cluster.wait_for(lambda e: e.event == "start" and e.job == "long" and e.attempt == 1
            and e.slot > cluster.ready_ms, timeout=20)
        stopped_at = time.time()
        assert cluster.stop(first.pid) == 0
        handed = cluster.wait_for(
            lambda e: e.event == "start" and e.job == "long" and e.slot == first.slot and e.attempt == 2,
            timeout=10,
        )
        assert handed.pid != first.pid
        assert handed.t - stopped_at <= 2 * HEARTBEAT_S + SLACK_S, (
            f"handover took {handed.t - stopped_at:.2f} s, more than two heartbeats")
        cancelled = [e for e in cluster.events() if e.event == "cancelled" and e.pid == first.pid]
        assert [e.reason for e in cancelled] == ["stop"]

        cluster.spawn()  # back to three replicas
        nxt = cluster.wait_for(
            lambda e: e.event == "start" and e.job == "long" and e.slot > first.slot and e.attempt == 1,
            timeout=15,
        )
        killed_at = time.time()
        cluster.kill(nxt.pid)
        taken = cluster.wait_for(
            lambda e: e.event == "start" and e.job == "long" and e.slot == nxt.slot and e.attempt == 2,
            timeout=15,
        )
        assert taken.pid not in (nxt.pid, first.pid)
        bound = LEASE_S + HEARTBEAT_S + JITTER_S
        assert taken.t - killed_at <= bound + SLACK_S, (
            f"takeover took {taken.t - killed_at:.2f} s, more than lease + heartbeat + jitter ({bound} s)")
        assert taken.t - killed_at >= LEASE_S - HEARTBEAT_S - SLACK_S, "taken over before the lease ran out"
        # Ticks kept running on the survivors through both events: every tick slot from the first
        # after the replicas were ready to the last whose start line has surely been written. The one
        # exception: the killed replica may have held a tick's lease too (its slot shares the long
        # job's boundary), and under overlap="skip" the ticks after it are skipped until that lease
        # runs out, as the contract says.
        since, until = cluster.ready_ms + 1000, int(taken.t * 1000) - 1000
        assert until - since >= 6000, "the window covers neither event"
        held_from, held_to = int((killed_at - 1) * 1000), int((killed_at + bound + SLACK_S) * 1000)
        missed = [s for s in cluster.missed("tick", since, until) if not held_from <= s <= held_to]
        assert missed == [], cluster.output()
        cluster.assert_one_winner()


@pytest.mark.slow
def test_a_blocked_event_loop_keeps_its_lease_until_block_limit(tmp_path: Path) -> None:
    check_blocked_loops(f"sqlite:///{tmp_path}/blocked.db", tmp_path / "replicas")


@pytest.mark.slow
def test_history_keeps_the_newest_runs_and_status_lists_a_job_that_never_ran(tmp_path: Path) -> None:
    check_history(f"sqlite:///{tmp_path}/history.db", tmp_path / "replicas")


@pytest.mark.slow
@pytest.mark.parametrize("scenario", STOP_SCENARIOS)
def test_a_stop_never_runs_a_slot_twice_at_once(tmp_path: Path, scenario: str) -> None:
    check_stop_never_overlaps(f"sqlite:///{tmp_path}/stop.db", tmp_path / "replicas", scenario)


@pytest.mark.slow
def test_stored_schedules_from_the_cli_across_three_replicas(tmp_path: Path) -> None:
    check_stored_schedules(f"sqlite:///{tmp_path}/stored.db", tmp_path / "replicas")
