"""Commands are packed by hiredis's C packer, into the same bytes redis-py's Python packer makes."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio

from anarchon_redis import RedisBackend
from anarchon_redis._client import _c_packing

COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "anarchon:{ns}:job", "anarchon:{ns}:others", 1_796_094_960_000, "host:1:ab12",
     30_000, 3, "skip", "every 1s", 2000),
    ("SCRIPT LOAD", "return 1"),
    (b"SCRIPT LOAD", "return 1"),
    ("SADD", "idx", "ジョブ-β-😀", 'it\'s "quoted"', "x" * 20_000),
    ("PUBLISH", "chan", b"\x00\xffbytes", 1.5, -7),
]


@pytest.mark.parametrize("args", COMMANDS)
def test_c_packer_matches_the_client_library(args: tuple[Any, ...]) -> None:
    python = redis.asyncio.Connection()
    packed = _c_packing(redis.asyncio.Connection)()
    assert b"".join(packed.pack_command(*args)) == b"".join(python.pack_command(*args))


def test_backends_built_from_a_url_use_it() -> None:
    backend = RedisBackend("redis://127.0.0.1:6379/0")
    cls = backend.client.connection_pool.connection_class
    assert cls.pack_command is not redis.asyncio.Connection.pack_command
    assert issubclass(cls, redis.asyncio.Connection)
    unix = RedisBackend("unix:///tmp/redis.sock")
    assert issubclass(unix.client.connection_pool.connection_class, redis.asyncio.UnixDomainSocketConnection)
