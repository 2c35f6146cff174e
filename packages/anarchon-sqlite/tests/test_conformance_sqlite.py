"""The anarchon conformance suite against SqliteBackend (every tier it declares) on a file per test."""

from pathlib import Path

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_sqlite import SqliteBackend


@pytest.fixture
def anarchon_backend_factory(tmp_path: Path) -> BackendFactory:
    path = tmp_path / "conformance.db"

    async def make() -> SqliteBackend:
        backend = SqliteBackend(path)  # its own connection to the shared file
        await backend.open()
        return backend

    return make
