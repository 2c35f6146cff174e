"""The pluggy plugin that registers `PostgresBackend` under the `anarchon` entry-point group."""

from __future__ import annotations

from typing import Any

from anarchon import hookimpl

from ._backend import PostgresBackend

__all__ = ["anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """Provide the PostgreSQL backend (URL schemes postgresql:// and postgres://)."""
    return [PostgresBackend]
