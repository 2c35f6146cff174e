"""The anarchon conformance suite against RedisBackend through Redis Sentinel (a master, a replica, three
Sentinels; make test-topologies)."""

import uuid

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_redis import RedisBackend
from anarchon_testkit.topology import RedisSentinel, Topologies

pytestmark = pytest.mark.topology_kit


@pytest.fixture
def anarchon_backend_factory(topology: Topologies) -> BackendFactory:
    url = f"{topology.get(RedisSentinel).url}?prefix=kit-{uuid.uuid4().hex[:8]}"

    async def make() -> RedisBackend:
        backend = RedisBackend(url)
        await backend.open()
        return backend

    return make
