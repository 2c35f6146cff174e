"""The anarchon conformance suite against PostgresBackend (every tier) on the local PostgreSQL."""

from collections.abc import Callable

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_postgres import PostgresBackend


@pytest.fixture
def anarchon_backend_factory(anarchon_service_url: Callable[[str], str]) -> BackendFactory:
    url = anarchon_service_url("postgres")

    async def make() -> PostgresBackend:
        # Its own pool; small, since races open 32 backends at once.
        backend = PostgresBackend(url, table="anarchon_conformance", min_size=1, max_size=2)
        await backend.open()
        return backend

    return make
