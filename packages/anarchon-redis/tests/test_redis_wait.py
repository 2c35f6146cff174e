"""`wait_replicas`: a win is reported only once that many replicas hold it (Redis `WAIT`)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import pytest
import redis.asyncio

from anarchon import BackendUnavailable, ScheduleError
from anarchon.backends import ClaimOutcome, ClaimRequest
from anarchon_redis import RedisBackend, ValkeyBackend
from anarchon_redis._keys import Keys
from anarchon_testkit.topology import RedisCluster, RedisSentinel, Topologies


async def _store_now(raw: redis.asyncio.Redis) -> int:
    sec, usec = await raw.time()
    return int(sec) * 1000 + int(usec) // 1000


async def _replicas_online(ports: list[int], timeout_s: float = 30.0) -> None:
    """Wait until each master on `ports` has a replica in sync (a new replica first loads a snapshot,
    and WAIT does not count it until then)."""
    deadline = time.monotonic() + timeout_s
    for port in ports:
        client = redis.asyncio.Redis(host="127.0.0.1", port=port)
        try:
            while (await client.info("replication")).get("slave0", {}).get("state") != "online":
                assert time.monotonic() < deadline, f"the replica of 127.0.0.1:{port} never came online"
                await asyncio.sleep(0.1)
        finally:
            await client.aclose()


def test_wait_options_are_read_from_the_url_and_checked() -> None:
    backend = RedisBackend("redis://127.0.0.1:6379/0?wait_replicas=2&wait_timeout=250ms&prefix=p")
    assert (backend.wait_replicas, backend.wait_timeout_ms, backend.prefix) == (2, 250, "p")
    assert RedisBackend("redis://127.0.0.1:6379/0").wait_replicas == 0
    sibling = RedisBackend("redis://127.0.0.1:6379/0", wait_replicas=1, wait_timeout="2s").sibling()
    assert sibling is not None and (sibling.wait_replicas, sibling.wait_timeout_ms) == (1, 2000)
    assert ValkeyBackend("valkey://127.0.0.1:6379/0?wait_replicas=1").wait_replicas == 1
    for bad in ("x", "-1", "1.5", ""):
        with pytest.raises(ValueError, match=rf"invalid wait_replicas '{bad}'.*wait_replicas=1"):
            RedisBackend(f"redis://127.0.0.1:6379/0?wait_replicas={bad}")
    with pytest.raises(ValueError, match="invalid wait_replicas -1"):
        RedisBackend("redis://127.0.0.1:6379/0", wait_replicas=-1)
    with pytest.raises(ValueError, match=r"shorter than 10 s.*30000 ms"):
        RedisBackend("redis+cluster://127.0.0.1:7000/?wait_replicas=1&wait_timeout=30s")
    with pytest.raises(ScheduleError, match="wait_timeout"):
        RedisBackend("redis://127.0.0.1:6379/0?wait_timeout=soon")


async def test_a_win_no_replica_acknowledged_is_not_reported(
    redis_url: str, prefix: str, raw: redis.asyncio.Redis
) -> None:
    # The machine's server has no replica: WAIT 1 counts 0 after its timeout.
    backend = RedisBackend(redis_url, prefix=prefix, wait_replicas=1, wait_timeout="50ms")
    await backend.open()
    try:
        now = await _store_now(raw)
        request = ClaimRequest("ns", "job", now, "me", 30_000, 3)
        with pytest.raises(BackendUnavailable, match=(
                r"1 won claim\(s\) \(first 'job' slot=\d+\) reached 0 of the 1 replica\(s\) that "
                r"wait_replicas asks for within 50 ms, so they are not reported as won")):
            await backend.claim_many([request])
        # The record stays, held by nobody that runs it. The same owner's retry is answered its own lease
        # again (reissued), a win like any other: not reported while no replica acknowledges it.
        with pytest.raises(BackendUnavailable, match=r"reached 0 of the 1 replica\(s\)"):
            await backend.claim_many([request])
        # A batch that wins nothing is answered (its WAIT's count does not matter).
        [other] = await backend.claim_many([ClaimRequest("ns", "job", now, "other", 30_000, 3)])
        assert (other.outcome, other.holder, other.lease) == (ClaimOutcome.TAKEN, "me", None)
        state = await backend.inspect("ns", "job")
        assert state is not None and state.owner == "me"
    finally:
        await backend.close()


@pytest.mark.topology_kit
async def test_a_cluster_win_is_reported_once_each_master_s_replica_has_it(topology: Topologies) -> None:
    rc = topology.get(RedisCluster)
    await _replicas_online(rc.master_ports())
    prefix = f"w-{uuid.uuid4().hex[:8]}"
    backend = RedisBackend(f"{rc.url}?prefix={prefix}&wait_replicas=1")
    await backend.open()
    try:
        jobs = [f"job-{i}" for i in range(12)]  # keys on every master
        results = await backend.claim_many([ClaimRequest("ns", j, 1000, "me", 30_000, 3) for j in jobs])
        assert [r.outcome for r in results] == [ClaimOutcome.WON] * len(jobs)
    finally:
        await backend.close()
    # Each master has one replica: two cannot acknowledge.
    backend = RedisBackend(f"{rc.url}?prefix={prefix}&wait_replicas=2&wait_timeout=100ms")
    await backend.open()
    try:
        with pytest.raises(BackendUnavailable, match="reached 1 of the 2 replica"):
            await backend.claim_many([ClaimRequest("ns", "other", 1000, "me", 30_000, 3)])
    finally:
        await backend.close()


@pytest.mark.topology_kit
async def test_a_cluster_win_a_stopped_replica_lacks_is_not_reported(topology: Topologies) -> None:
    # The WAIT must count the claim's own write, on the master that holds the job: with that master's
    # replica stopped (SIGSTOP), the win is refused, while the other masters' replicas answer.
    rc = topology.get(RedisCluster)
    await _replicas_online(rc.master_ports())
    prefix = f"w-{uuid.uuid4().hex[:8]}"
    home = rc.master_of(Keys(prefix).job("ns", "job"))
    client = redis.asyncio.Redis(host="127.0.0.1", port=home)
    try:
        replica = rc.server(int((await client.info("replication"))["slave0"]["port"]))
    finally:
        await client.aclose()
    backend = RedisBackend(f"{rc.url}?prefix={prefix}&wait_replicas=1&wait_timeout=200ms")
    await backend.open()
    try:
        await backend.claim_many([ClaimRequest("ns", "warm-up", 1000, "me", 30_000, 3)])
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            with pytest.raises(BackendUnavailable, match="reached 0 of the 1 replica"):
                await backend.claim_many([ClaimRequest("ns", "job", 1000, "me", 30_000, 3)])
        finally:
            os.kill(replica.pid, signal.SIGCONT)
    finally:
        await backend.close()


@pytest.mark.topology_kit
async def test_a_sentinel_master_s_win_is_reported_once_its_replica_has_it(topology: Topologies) -> None:
    rs = topology.get(RedisSentinel)
    await _replicas_online([rs.master_port()])
    backend = RedisBackend(f"{rs.url}?prefix=w-{uuid.uuid4().hex[:8]}&wait_replicas=1")
    await backend.open()
    try:
        requests = [ClaimRequest("ns", f"j{i}", 1000, "me", 30_000, 3) for i in range(5)]
        results = await backend.claim_many(requests)
        assert [r.outcome for r in results] == [ClaimOutcome.WON] * 5
    finally:
        await backend.close()
