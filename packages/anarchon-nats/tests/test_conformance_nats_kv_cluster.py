"""The anarchon conformance suite against NatsKVBackend on a three-node JetStream cluster, both buckets
replicated on every node (R3; make test-topologies). The backend declares the slack with which the
stream leader ages a lease out (`expiry_slack_ms`), and the kit, the model test included, allows it."""

import uuid

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_nats import NatsKVBackend
from anarchon_testkit.topology import NatsCluster, Topologies

pytestmark = pytest.mark.topology_kit

LEASE = "400ms"
"""The bucket's TTL: short, since the suite waits leases out in real time."""


@pytest.fixture
def anarchon_backend_factory(topology: Topologies) -> BackendFactory:
    url = topology.get(NatsCluster).url
    bucket = f"kit_{uuid.uuid4().hex[:10]}"

    async def make() -> NatsKVBackend:
        backend = NatsKVBackend(url, bucket=bucket, lease=LEASE, replicas=3, timeout="15s")
        await backend.open()
        return backend

    return make
