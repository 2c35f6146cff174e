"""Fixtures shared by the PostgreSQL driver's tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import asyncpg
import pytest

from anarchon.testing import require_service

URL = os.environ.get("ANARCHON_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def _drop_schema(url: str, name: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def drop_schema() -> Callable[[str, str], Coroutine[Any, Any, None]]:
    """Drops a test's private schema, and everything in it, on the server at a URL."""
    return _drop_schema


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A private schema, dropped afterwards, so tests never collide with each other or with CI."""
    require_service("PostgreSQL", URL, 5432)
    name = f"anarchon_t_{uuid.uuid4().hex[:10]}"
    yield name
    await _drop_schema(URL, name)
