"""The pluggy plugin that makes `Scheduler.from_url("sqlite:///jobs.db")` find this backend.

Every process that builds a Scheduler loads this module, so it imports no backend (nor sqlite3):
the hooks do, when asked.
"""

from __future__ import annotations

from typing import Any

from anarchon import hookimpl

__all__ = ["anarchon_backend_schemes", "anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this distribution provides."""
    from ._backend import SqliteBackend
    from ._libsql import LibsqlBackend

    return [SqliteBackend, LibsqlBackend]


@hookimpl
def anarchon_backend_schemes() -> dict[str, str]:
    """The URL schemes this distribution handles, each with the class that handles it."""
    return {"sqlite": "anarchon_sqlite:SqliteBackend", "libsql": "anarchon_sqlite:LibsqlBackend"}
