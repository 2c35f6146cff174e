"""`FastAPI(lifespan=scheduler.lifespan)` and the composable helper, with the real TestClient."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from fastapi import FastAPI, Request
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from anarchon import JobContext, MemoryBackend, Scheduler
from anarchon.integrations.starlette import lifespan


def make_scheduler(seen: list[int]) -> Scheduler[MemoryBackend]:
    scheduler = Scheduler(backend=MemoryBackend(), lease="2s", heartbeat="0.5s")

    @scheduler.every("tick", "100ms", jitter=0, catch_up=0)
    async def tick(ctx: JobContext) -> None:
        seen.append(ctx.slot)

    return scheduler


def test_fastapi_lifespan_starts_and_stops_the_scheduler() -> None:
    seen: list[int] = []
    scheduler = make_scheduler(seen)
    app = FastAPI(lifespan=scheduler.lifespan)

    @app.get("/jobs")
    def jobs() -> dict[str, Any]:
        return {"running": scheduler.running, "jobs": sorted(scheduler.jobs)}

    assert not scheduler.running
    with TestClient(app) as client:
        assert client.get("/jobs").json() == {"running": True, "jobs": ["tick"]}
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(seen) >= 2
    assert not scheduler.running


def test_the_helper_composes_with_an_app_lifespan_and_keeps_its_state() -> None:
    seen: list[int] = []
    first, second = make_scheduler(seen), make_scheduler([])
    order: list[str] = []

    @asynccontextmanager
    async def app_lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        order.append(f"enter running={first.running and second.running}")
        yield {"greeting": "hello"}
        order.append(f"exit running={first.running and second.running}")

    async def home(request: Request) -> JSONResponse:
        return JSONResponse({"greeting": request.state.greeting})

    app = Starlette(routes=[Route("/", home)], lifespan=lifespan(first, second, inner=app_lifespan))
    with TestClient(app) as client:
        assert client.get("/").json() == {"greeting": "hello"}
    assert order == ["enter running=True", "exit running=True"]
    assert not first.running and not second.running


def test_the_helper_needs_a_scheduler() -> None:
    with pytest.raises(TypeError, match="at least one scheduler"):
        lifespan()
