"""Calls made in one event-loop step, sent to the store together as one batch call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from ._errors import AnarchonError

T = TypeVar("T")
R = TypeVar("R")


class StepBatcher(Generic[T, R]):
    """Collects the items submitted in one event-loop step and sends them in one batch call.

    Each submitter gets a future of its own item's result; a failed batch call fails every future
    of that batch (each caller's own retry decides what to do), and a future its waiter gave up on
    (cancelled) is left alone.
    """

    def __init__(self, send: Callable[[list[T]], Awaitable[Sequence[R]]],
                 spawn: Callable[[Coroutine[Any, Any, None]], Any], what: str) -> None:
        self._send = send
        self._spawn = spawn
        self._what = what
        self._pending: list[tuple[T, asyncio.Future[R]]] = []

    def submit(self, item: T) -> asyncio.Future[R]:
        """Queue `item` for this step's batch; the future resolves to its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((item, future))
        return future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if batch:
            self._spawn(self._send_batch(batch))

    async def _send_batch(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._send([item for item, _ in batch])
            if len(results) != len(batch):
                raise AnarchonError(f"{self._what} returned {len(results)} results for {len(batch)} items")
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
