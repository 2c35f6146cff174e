"""The conformance suite against RedisBackend sending one script call per job, as it does through a
Cluster client (whose jobs live in different slots); the other module covers the batch scripts."""

from collections.abc import Callable

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_redis import RedisBackend


@pytest.fixture
def anarchon_backend_factory(anarchon_service_url: Callable[[str], str]) -> BackendFactory:
    url = anarchon_service_url("redis")

    async def make() -> RedisBackend:
        backend = RedisBackend(url, prefix="anarchon-conformance-per-job")
        backend._cluster = True  # the path a Cluster client takes: one EVALSHA per job
        await backend.open()
        return backend

    return make
