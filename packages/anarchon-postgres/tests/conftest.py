"""Fixtures shared by the PostgreSQL driver's tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from anarchon.testing import require_service

URL = os.environ.get("ANARCHON_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A private schema, dropped afterwards, so tests never collide with each other or with CI."""
    require_service("PostgreSQL", URL, 5432)
    name = f"anarchon_t_{uuid.uuid4().hex[:10]}"
    yield name
    conn = await asyncpg.connect(URL)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        await conn.close()
