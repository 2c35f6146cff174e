"""Starlette and FastAPI: start the scheduler with the app, stop it gracefully with the app.

    app = FastAPI(lifespan=scheduler.lifespan)

or, to keep a lifespan of your own (it runs inside, so the scheduler is up while it starts):

    from anarchon.integrations.starlette import lifespan

    @asynccontextmanager
    async def app_lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        yield {"db": ...}

    app = FastAPI(lifespan=lifespan(scheduler, inner=app_lifespan))

Every server process (each uvicorn or gunicorn worker) is one replica; the store picks one winner per
slot among them all. The scheduler runs on the server's event loop, so handlers must not block it: write
blocking work as plain functions (they run in a worker thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from .._scheduler import Scheduler, start_for_app

__all__ = ["lifespan"]

App = TypeVar("App")


def lifespan(
    *schedulers: Scheduler[Any],
    inner: Callable[[App], contextlib.AbstractAsyncContextManager[Any]] | None = None,
) -> Callable[[App], contextlib.AbstractAsyncContextManager[Any]]:
    """A lifespan that starts `schedulers` (in order), then enters `inner`, and yields `inner`'s state.

    On shutdown `inner` exits first, then the schedulers stop in reverse order, each gracefully
    (running handlers are signalled, and released for handover after `stop_timeout`).
    """
    if not schedulers:
        raise TypeError("lifespan() needs at least one scheduler: lifespan(scheduler, inner=...)")

    @contextlib.asynccontextmanager
    async def run(app: App) -> AsyncIterator[Mapping[str, Any] | None]:
        async with contextlib.AsyncExitStack() as stack:
            for scheduler in schedulers:
                await start_for_app(scheduler)  # (a failure: one exception, its chain at DEBUG)
                stack.push_async_callback(scheduler.stop)
            state = None if inner is None else await stack.enter_async_context(inner(app))
            yield state

    return run
