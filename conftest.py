"""Fixtures for every test here: the `topology` fixture, production-shaped store topologies (Redis
Cluster and Sentinel, a NATS cluster, PgBouncer, a PostgreSQL standby) as real processes on loopback
ports; and jitter draws seeded from each test's id (`ANARCHON_TEST_SEED` varies them)."""

from __future__ import annotations

import itertools
import os
import random
import types
import zlib
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

from anarchon import _planner
from anarchon_testkit.topology import Topologies


@pytest.fixture(autouse=True)
def _seeded_jitter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed each planner's draws (jitter, retry delays) in this process from the test's id and
    `ANARCHON_TEST_SEED` (default 0), in the order the planners are made.

    A test whose outcome depends on the draws (how claims batch, which replica claims first) then
    passes or fails the same way on every run, here and in CI, instead of now and then. Run with
    other values of `ANARCHON_TEST_SEED` to try other draws."""
    base = os.environ.get("ANARCHON_TEST_SEED", "0")
    seeds = itertools.count(zlib.crc32(f"{base}/{request.node.nodeid}".encode()) << 8)

    class Seeded(random.Random):
        def __init__(self, x: Any = None) -> None:
            super().__init__(next(seeds) if x is None else x)

    monkeypatch.setattr(_planner, "random", types.SimpleNamespace(Random=Seeded))


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
