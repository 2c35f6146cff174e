"""The wake-up of a background task: when does its next look come, at a deadline or when poked?"""

from __future__ import annotations

import asyncio

__all__ = ["Wakeup"]


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Wakeup:
    """An `asyncio.Event` for one waiting task, whose wait takes a deadline.

    The planner, the renewals and the history writer each sleep until their next due time or until
    something new is queued. Under `asyncio.timeout`, each deadline that passes cancels the sleeping
    task, throws `CancelledError` into it and turns that into `TimeoutError`, and every wait builds a
    `Timeout` beside its timer: here a deadline is one timer callback that ends the wait.
    """

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        """Wake the waiting task, or have its next `wait` return at once."""
        self._flag = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        """Let the next `wait` sleep."""
        self._flag = False

    def is_set(self) -> bool:
        """True once `set`, until `clear`."""
        return self._flag

    async def wait(self, within: float | None = None) -> bool:
        """Sleep until `set`, or for `within` seconds at most (None: no limit); True when set."""
        if self._flag:
            return True
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if within is None else loop.call_at(loop.time() + within, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        return self._flag
