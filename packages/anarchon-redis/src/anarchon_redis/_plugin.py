"""The pluggy plugin that registers the Redis backends under the `anarchon` entry-point group.

Every process that builds a Scheduler loads this module, so it imports no backend (nor redis-py):
the hooks do, when asked.
"""

from __future__ import annotations

from typing import Any

from anarchon.hookspecs import hookimpl

__all__ = ["anarchon_backend_schemes", "anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """RedisBackend, ValkeyBackend and RedisStreamBackend."""
    from ._lease import RedisBackend, ValkeyBackend
    from ._stream import RedisStreamBackend

    return [RedisBackend, ValkeyBackend, RedisStreamBackend]


@hookimpl
def anarchon_backend_schemes() -> dict[str, str]:
    """The URL schemes of the three backends, each with the class that handles it."""
    return {
        "redis": "anarchon_redis:RedisBackend",
        "rediss": "anarchon_redis:RedisBackend",
        "unix": "anarchon_redis:RedisBackend",
        "redis+cluster": "anarchon_redis:RedisBackend",
        "rediss+cluster": "anarchon_redis:RedisBackend",
        "redis+sentinel": "anarchon_redis:RedisBackend",
        "rediss+sentinel": "anarchon_redis:RedisBackend",
        "valkey": "anarchon_redis:ValkeyBackend",
        "valkeys": "anarchon_redis:ValkeyBackend",
        "redis+stream": "anarchon_redis:RedisStreamBackend",
        "rediss+stream": "anarchon_redis:RedisStreamBackend",
        "unix+stream": "anarchon_redis:RedisStreamBackend",
    }
