"""The pluggy plugin that makes `Scheduler.from_url("sqlite:///jobs.db")` find this backend."""

from __future__ import annotations

from typing import Any

from anarchon import hookimpl

from ._backend import SqliteBackend

__all__ = ["anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this distribution provides."""
    return [SqliteBackend]
