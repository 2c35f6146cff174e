"""The pluggy plugin that registers the Redis backends under the `anarchon` entry-point group.

Every process that builds a Scheduler loads this module, so it imports no backend (nor redis-py):
the hooks do, when asked.
"""

from __future__ import annotations

from typing import Any

from anarchon.hookspecs import hookimpl

__all__ = ["anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """RedisBackend, ValkeyBackend and RedisStreamBackend."""
    from ._lease import RedisBackend, ValkeyBackend
    from ._stream import RedisStreamBackend

    return [RedisBackend, ValkeyBackend, RedisStreamBackend]
