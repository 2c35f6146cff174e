"""RedisBackend on a real Redis Cluster (3 masters, 3 replicas) and behind Sentinel: a quick claim in
`make test`; a failover under three replicas in `make test-topologies` (marker topology_kit)."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from anarchon.backends import ClaimOutcome, ClaimRequest
from anarchon.testing.cluster import Cluster, Event
from anarchon.testing.topology import RedisCluster, Topologies
from anarchon_redis import RedisBackend
from anarchon_redis._keys import Keys

EXTRA_TICKS = 8
"""Jobs `tick-0` ... `tick-7` besides `tick` and `long`: on a Cluster their keys land on every master."""


def gaps_around(cluster: Cluster, job: str, at: float) -> float:
    """The longest time (seconds) between two consecutive starts of `job` that spans wall time `at`."""
    times = sorted({e.slot: e.t for e in cluster.starts(job)}.values())
    spans = [b - a for a, b in itertools.pairwise(times) if a <= at <= b]
    return max(spans, default=0.0)


def run_through_failover(url: str, workdir: Path, fail: Callable[[Event], None], *,
                         recovered: Callable[[], bool], namespace: str | None = None,
                         settle_s: float = 6.0) -> dict[str, float]:
    """Three replicas on `url`; once a `long` run is in flight, `fail(its start event)` kills a server.

    Asserts that no (job, slot, attempt) is won twice and that the in-flight run either ended as
    attempt 1 or was taken over as attempt 2; returns the measured gaps (seconds): the longest gap in
    the starts of any 1 s job across the failure, and how long `recovered()` took to become true.
    """
    with Cluster(url, workdir, replicas=3, namespace=namespace, lease="2s", heartbeat="0.4s", tick_every="1s",
                 long_every="5s", long_run="3s", extra_ticks=EXTRA_TICKS) as cluster:
        ev = cluster.wait_for(lambda e: e.event == "start" and e.job == "long" and e.slot > cluster.ready_ms,
                              timeout=20)
        killed_at = time.time()
        fail(ev)
        deadline = time.monotonic() + 30
        while not recovered():
            assert time.monotonic() < deadline, f"the store did not recover within 30 s\n{cluster.output()}"
            time.sleep(0.05)
        recovered_after = time.time() - killed_at
        time.sleep(settle_s)
        cluster.assert_one_winner()
        outcome = [e for e in cluster.events()
                   if e.job == "long" and e.slot == ev.slot and e.event in ("end", "start")]
        kept = any(e.event == "end" and e.attempt == 1 for e in outcome)
        taken = any(e.event == "start" and e.attempt == 2 for e in outcome)
        assert kept or taken, (
            f"the run in flight was neither kept nor taken over: {outcome}\n{cluster.output()}")
        jobs = ["tick", *(f"tick-{i}" for i in range(EXTRA_TICKS))]
        gap = max(gaps_around(cluster, job, killed_at) for job in jobs)
        assert all(cluster.starts(job)[-1].t > killed_at + recovered_after for job in jobs), (
            f"a job did not run again after the failover\n{cluster.output()}")
        return {"gap_s": gap, "recovered_s": recovered_after}


async def test_a_cluster_url_claims_on_the_master_of_the_jobs_slot(topology: Topologies) -> None:
    rc = topology.get(RedisCluster)
    backend = RedisBackend(f"{rc.url}?prefix=t-{uuid.uuid4().hex[:8]}")
    await backend.open()
    try:
        assert backend.url.startswith("redis+cluster://")
        request = ClaimRequest("ns", "job", 1000, "me", 5000, 1)
        [first] = await backend.claim_many([request])
        [second] = await backend.claim_many([ClaimRequest("ns", "job", 1000, "you", 5000, 1)])
        assert (first.outcome, second.outcome) == (ClaimOutcome.WON, ClaimOutcome.TAKEN)
        assert [s.job for s in await backend.jobs("ns")] == ["job"]
    finally:
        await backend.close()


def test_bad_cluster_urls_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="host:port,host:port"):
        RedisBackend("redis+cluster://127.0.0.1:x,127.0.0.1:7001/")
    with pytest.raises(ValueError, match="no master name"):
        RedisBackend("redis+sentinel://127.0.0.1:26379/")


@pytest.mark.topology_kit
def test_a_master_failover_under_three_replicas(topology: Topologies, tmp_path: Path) -> None:
    rc = topology.new(RedisCluster)
    prefix = f"fo-{uuid.uuid4().hex[:8]}"
    namespace = f"cluster-{uuid.uuid4().hex[:8]}"
    keys = Keys(prefix)
    homes = {job: rc.master_of(keys.job(namespace, job))
             for job in ["tick", "long", *(f"tick-{i}" for i in range(EXTRA_TICKS))]}
    masters = set(rc.master_ports())
    assert set(homes.values()) == masters, f"the jobs' keys do not cover every master: {homes}"

    def kill_the_master_of_long(_: object) -> None:
        rc.kill(homes["long"])

    measured = run_through_failover(
        f"{rc.url}?prefix={prefix}", tmp_path, kill_the_master_of_long,
        recovered=lambda: rc.healthy() and homes["long"] not in rc.master_ports(),
        namespace=namespace,
    )
    print(f"\nRedis Cluster master failover: {measured}")
