"""The anarchon plugin: makes `filelock://` URLs work in `Scheduler.from_url`.

Every process that builds a Scheduler loads this module, so the backend is imported in the hook.
"""

from typing import Any

from anarchon import hookimpl


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this package provides."""
    from ._backend import FileLockBackend

    return [FileLockBackend]
