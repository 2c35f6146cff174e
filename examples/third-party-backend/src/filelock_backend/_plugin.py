"""The anarchon plugin: makes `filelock://` URLs work in `Scheduler.from_url`."""

from typing import Any

from anarchon import hookimpl

from ._backend import FileLockBackend


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this package provides."""
    return [FileLockBackend]
