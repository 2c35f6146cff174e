"""The anarchon conformance suite against RedisBackend (every tier) on the local Redis."""

from collections.abc import Callable

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_redis import RedisBackend


@pytest.fixture
def anarchon_backend_factory(anarchon_service_url: Callable[[str], str]) -> BackendFactory:
    url = anarchon_service_url("redis")

    async def make() -> RedisBackend:
        backend = RedisBackend(url, prefix="anarchon-conformance")  # its own client and connection
        await backend.open()
        return backend

    return make
