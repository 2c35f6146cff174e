"""The anarchon conformance suite against FileLockBackend: this is the whole file."""

from pathlib import Path

import pytest
from filelock_backend import FileLockBackend

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403


@pytest.fixture
def anarchon_backend_factory(tmp_path: Path) -> BackendFactory:
    path = tmp_path / "claims.json"  # one store per test; every backend made here shares it

    async def make() -> FileLockBackend:
        backend = FileLockBackend(path)
        await backend.open()
        return backend

    return make
