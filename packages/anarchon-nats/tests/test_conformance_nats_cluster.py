"""The anarchon conformance suite against NatsBackend (claim-only stream) on a three-node JetStream
cluster, the stream replicated on every node (R3; make test-topologies)."""

import uuid

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_nats import NatsBackend
from anarchon_testkit.topology import NatsCluster, Topologies

pytestmark = pytest.mark.topology_kit


@pytest.fixture
def anarchon_backend_factory(topology: Topologies) -> BackendFactory:
    url = topology.get(NatsCluster).url
    stream = f"KIT_{uuid.uuid4().hex[:8].upper()}"

    async def make() -> NatsBackend:
        backend = NatsBackend(url, stream=stream, prefix=stream.lower(), duplicate_window="2m", replicas=3,
                              timeout="15s")  # an R3 stream on a loaded host can take seconds to create
        await backend.open()
        return backend

    return make
