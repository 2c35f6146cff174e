"""The anarchon conformance suite against LibsqlBackend (libSQL's driver, the SQLite backend's
statements) on a local file per test (make test-topologies)."""

from pathlib import Path

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_sqlite import LibsqlBackend

pytestmark = pytest.mark.topology_kit


@pytest.fixture
def anarchon_backend_factory(tmp_path: Path) -> BackendFactory:
    url = f"libsql:///{tmp_path / 'conformance.db'}"

    async def make() -> LibsqlBackend:
        backend = LibsqlBackend.from_url(url)  # its own connection to the shared file
        await backend.open()
        return backend

    return make
