"""The anarchon conformance suite against PostgresBackend through PgBouncer in transaction mode, in front
of the local PostgreSQL (make test-topologies)."""

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_postgres import PostgresBackend
from anarchon_testkit.topology import PgBouncer, Topologies

pytestmark = pytest.mark.topology_kit


@pytest.fixture
def anarchon_backend_factory(topology: Topologies) -> BackendFactory:
    bouncer = topology.get(PgBouncer)
    # The URLs only, not the topology: the kit's clock tests pickle the factory into other processes.
    url, direct_url = bouncer.url, bouncer.direct_url

    async def make() -> PostgresBackend:
        # Prepared statements do not survive a change of server connection: no statement cache.
        backend = PostgresBackend(url, table="anarchon_conformance_bouncer",
                                  statement_cache_size=0, listen_url=direct_url,
                                  min_size=1, max_size=2)
        await backend.open()
        return backend

    return make
