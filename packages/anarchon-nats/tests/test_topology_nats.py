"""Both NATS backends on a three-node JetStream cluster with R3 streams and buckets: the server that
leads the stream is killed under three replica processes (make test-topologies)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from anarchon_nats import NatsBackend, NatsKVBackend
from anarchon_testkit.cluster import Event
from anarchon_testkit.topology import NatsCluster, Topologies, run_through_failover


def test_a_comma_separated_url_names_every_server() -> None:
    backend = NatsBackend.from_url("nats://a:4222,b:4223,c:4224?replicas=3")
    assert backend._target == ["nats://a:4222", "nats://b:4223", "nats://c:4224"]
    assert backend.replicas == 3
    kv = NatsKVBackend.from_url("nats-kv://u:p@a:4222,b:4223?replicas=3&lease=2s")
    assert kv._target == ["nats://u:p@a:4222", "nats://u:p@b:4223"]
    with pytest.raises(ValueError, match="invalid replicas 'x': use 1 to 5"):
        NatsBackend.from_url("nats://a:4222?replicas=x")




@pytest.mark.topology_kit
@pytest.mark.parametrize("kind", ["stream", "kv"])
def test_the_stream_leader_is_killed_under_three_replicas(
    kind: str, topology: Topologies, tmp_path: Path
) -> None:
    nc = topology.new(NatsCluster)
    name = f"fo_{uuid.uuid4().hex[:8]}"
    if kind == "stream":
        stream = name.upper()
        url = f"{nc.url}?stream={stream}&prefix={name}&replicas=3"
    else:
        stream = f"KV_{name}"
        url = nc.url.replace("nats://", "nats-kv://", 1) + f"?bucket={name}&lease=2s&replicas=3"
    killed: list[int] = []

    def fail(_: Event) -> None:
        leader = nc.stream_leader(stream)
        killed.append(leader)
        nc.kill(leader)

    def recovered() -> bool:
        try:
            return bool(killed) and nc.stream_leader(stream) != killed[0]
        except Exception:
            return False

    measured = run_through_failover(url, tmp_path, fail, recovered=recovered)
    print(f"\nNATS {kind} R3, stream leader killed: {measured}")
