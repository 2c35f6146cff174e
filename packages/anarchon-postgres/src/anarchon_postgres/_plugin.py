"""The pluggy plugin that registers `PostgresBackend` under the `anarchon` entry-point group.

Every process that builds a Scheduler loads this module, so it imports no backend (nor asyncpg):
the hooks do, when asked.
"""

from __future__ import annotations

from typing import Any

from anarchon import hookimpl

__all__ = ["anarchon_backend_schemes", "anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """Provide the PostgreSQL backend (URL schemes postgresql:// and postgres://)."""
    from ._backend import PostgresBackend

    return [PostgresBackend]


@hookimpl
def anarchon_backend_schemes() -> dict[str, str]:
    """The URL schemes this distribution handles, each with the class that handles it."""
    return {"postgresql": "anarchon_postgres:PostgresBackend",
            "postgres": "anarchon_postgres:PostgresBackend"}
