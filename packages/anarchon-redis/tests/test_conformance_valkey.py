"""The anarchon conformance suite against ValkeyBackend (valkey-py) on the local Redis-protocol server."""

from collections.abc import Callable

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_redis import ValkeyBackend


@pytest.fixture
def anarchon_backend_factory(anarchon_service_url: Callable[[str], str]) -> BackendFactory:
    # valkey-py speaks the same protocol: the Redis service's URL with the valkey scheme.
    scheme, rest = anarchon_service_url("redis").split("://", 1)
    url = ("valkeys" if scheme == "rediss" else "valkey") + "://" + rest

    async def make() -> ValkeyBackend:
        backend = ValkeyBackend(url, prefix="anarchon-conformance-valkey")
        await backend.open()
        return backend

    return make
