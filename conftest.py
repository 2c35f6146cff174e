"""The `topology` fixture: production-shaped store topologies (Redis Cluster and Sentinel, a NATS
cluster, PgBouncer, a PostgreSQL standby) as real processes on loopback ports, for any test here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from anarchon.testing.topology import Topologies


def _unavailable(reason: str) -> NoReturn:
    """Skip, saying why; under ANARCHON_REQUIRE_SERVICES=1 (as in CI), fail instead."""
    if os.environ.get("ANARCHON_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; ANARCHON_REQUIRE_SERVICES=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topologies]:
    """Start what a test asks for (`topology.get(RedisCluster)`), once per session; stop it all at the end."""
    topologies = Topologies(tmp_path_factory.mktemp("topology"), _unavailable)
    try:
        yield topologies
    finally:
        topologies.close()
