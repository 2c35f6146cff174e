"""Fixtures for the Redis backend tests: the server URL, and a key prefix private to each test."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio

from anarchon.testing import require_service

REDIS_URL = os.environ.get("ANARCHON_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_url() -> str:
    """The server's URL; skips (or fails under ANARCHON_REQUIRE_SERVICES=1) when it is unreachable."""
    require_service("redis", REDIS_URL, 6379)
    return REDIS_URL


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix no other test uses; its keys are deleted afterwards."""
    name = f"anarchon-test-{uuid.uuid4().hex[:10]}"
    yield name
    import redis as sync_redis

    try:
        client = sync_redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        keys = list(client.scan_iter(match=f"*{name}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    except sync_redis.RedisError:
        pass


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """A plain client, for looking at keys and killing connections."""
    client = redis.asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()
