"""Redis and Valkey backends for anarchon.

Install with `pip install anarchon-redis` (add `[valkey]` for valkey-py). Then any of:

    from anarchon import Scheduler
    from anarchon_redis import RedisBackend, RedisStreamBackend, ValkeyBackend

    scheduler = Scheduler.from_url("redis://:secret@cache:6379/0")        # RedisBackend
    scheduler = Scheduler(RedisBackend(existing_redis_asyncio_client, prefix="myapp"))
    scheduler = Scheduler.from_url("valkey://cache:6379/0")               # ValkeyBackend
    scheduler = Scheduler.from_url("redis+stream://cache:6379/0?strategy=script")  # claim-only

`RedisBackend` / `ValkeyBackend` (URL schemes `redis`, `rediss`, `unix` / `valkey`, `valkeys`) are lease
backends: the whole lease state machine runs as one Lua script per operation with the server's `TIME`,
every key of a job carries the hash tag `{prefix:namespace:job}` (Redis Cluster safe), `claim_many` is one
pipeline round trip, and a handover is published on `prefix:namespace:released` so that backups take a
graceful handover over at once.

`RedisStreamBackend` (schemes `redis+stream`, `rediss+stream`, `unix+stream`; `?strategy=` and `?maxlen=`
in the URL) is claim-only: one winner per (job, slot), with strategies `stream-id`, `idmp` (Redis >= 8.6)
and `script`.

Redis without persistence forgets every record on restart: see docs/backends/redis.md.
"""

from typing import TYPE_CHECKING

from anarchon.backends import lazy_exports

if TYPE_CHECKING:
    from ._lease import RedisBackend, ValkeyBackend
    from ._stream import RedisStreamBackend, Strategy

__all__ = ["RedisBackend", "RedisStreamBackend", "Strategy", "ValkeyBackend"]

# Every process that builds a Scheduler imports this package (its plugin module lives here), so the
# public names, and redis-py with them, are imported on first use only (PEP 562).
_EXPORTS = {
    "RedisBackend": "_lease",
    "ValkeyBackend": "_lease",
    "RedisStreamBackend": "_stream",
    "Strategy": "_stream",
}


if not TYPE_CHECKING:
    # Hidden from type checkers, which would otherwise accept any name imported from this package.
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
