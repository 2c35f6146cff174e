"""The anarchon conformance suite against PostgresBackend (every tier) on the local PostgreSQL.

In a private schema, dropped afterwards: the suite migrates its table to this release's schema
version, which must not touch tables that other checkouts' tests share.
"""

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_postgres import PostgresBackend


@pytest.fixture(scope="module")
def conformance_schema(
    anarchon_service_url: Callable[[str], str], drop_schema: Callable[[str, str], Coroutine[Any, Any, None]]
) -> Iterator[tuple[str, str]]:
    url = anarchon_service_url("postgres")
    name = f"anarchon_c_{uuid.uuid4().hex[:10]}"
    yield url, name
    asyncio.run(drop_schema(url, name))


@pytest.fixture
def anarchon_backend_factory(conformance_schema: tuple[str, str]) -> BackendFactory:
    url, schema = conformance_schema

    async def make() -> PostgresBackend:
        # Its own pool; small, since races open 32 backends at once.
        backend = PostgresBackend(url, schema=schema, table="anarchon_conformance", min_size=1, max_size=2)
        await backend.open()
        return backend

    return make
