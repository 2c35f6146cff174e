"""`anarchon-conformance mariadb_backend.testing:factory`: the conformance kit against a local MariaDB."""

from __future__ import annotations

import os

from anarchon_conformance import BackendFactory

from ._backend import MariaDBBackend

__all__ = ["factory"]


def factory() -> BackendFactory:
    """Backends on `$ANARCHON_MARIADB_URL` (default: root on 127.0.0.1:3306, database `test`)."""
    url = os.environ.get("ANARCHON_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test")

    async def make() -> MariaDBBackend:
        backend = MariaDBBackend(url)
        await backend.open()
        return backend

    return make
