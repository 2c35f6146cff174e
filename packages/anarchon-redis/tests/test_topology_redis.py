"""RedisBackend on a real Redis Cluster (3 masters, 3 replicas) and behind Sentinel: a quick claim in
`make test`; a failover under three replicas in `make test-topologies` (marker topology_kit)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from anarchon.backends import ClaimOutcome, ClaimRequest
from anarchon_redis import RedisBackend
from anarchon_redis._keys import Keys
from anarchon_testkit.topology import (
    EXTRA_TICKS,
    RedisCluster,
    RedisSentinel,
    Topologies,
    run_through_failover,
    wait_for_replica,
)


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
        # Only once the replica has every claim the master acknowledged: that is what wait_replicas=1
        # guarantees for each win. Without it, replication is asynchronous and the in-flight slot can
        # be won again as attempt 1 on the promoted replica (docs/scaling.md; seen here under load).
        wait_for_replica(homes["long"], keys.job(namespace, "long") + ":sync")
        rc.kill(homes["long"])

    measured = run_through_failover(
        f"{rc.url}?prefix={prefix}", tmp_path, kill_the_master_of_long,
        recovered=lambda: rc.healthy() and homes["long"] not in rc.master_ports(),
        namespace=namespace,
    )
    print(f"\nRedis Cluster master failover: {measured}")


@pytest.mark.topology_kit
def test_a_sentinel_failover_under_three_replicas(topology: Topologies, tmp_path: Path) -> None:
    rs = topology.new(RedisSentinel)
    old: list[int] = []

    def kill_the_master(_: object) -> None:
        old.append(rs.kill_master(synced=True))  # see the Cluster test above

    measured = run_through_failover(
        f"{rs.url}?prefix=fo-{uuid.uuid4().hex[:8]}", tmp_path, kill_the_master,
        recovered=lambda: bool(old) and rs.master_port() != old[0],
    )
    print(f"\nRedis Sentinel failover: {measured}")
