"""The anarchon plugin: makes `mariadb://` and `mysql://` URLs work in `Scheduler.from_url`.

Every process that builds a Scheduler loads this module, so it imports nothing heavy: the hooks
import the backend (and aiomysql) when asked.
"""

from __future__ import annotations

from typing import Any

from anarchon import hookimpl

__all__ = ["anarchon_backend_schemes", "anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this package provides."""
    from ._backend import MariaDBBackend

    return [MariaDBBackend]


@hookimpl
def anarchon_backend_schemes() -> dict[str, str]:
    """The URL schemes this package handles, each with the class that handles it."""
    return {"mariadb": "mariadb_backend:MariaDBBackend", "mysql": "mariadb_backend:MariaDBBackend"}
