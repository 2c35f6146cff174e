"""The anarchon conformance suite against MariaDBBackend: this is the whole file."""

import os

import pytest
from mariadb_backend import MariaDBBackend

from anarchon.testing import require_service
from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403

URL = os.environ.get("ANARCHON_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test")


@pytest.fixture
def anarchon_backend_factory() -> BackendFactory:
    require_service("MariaDB", URL, 3306)  # skips when unreachable; fails under ANARCHON_REQUIRE_SERVICES=1

    async def make() -> MariaDBBackend:
        backend = MariaDBBackend(URL)  # its own pool; the kit gives each test its own namespace
        await backend.open()
        return backend

    return make
