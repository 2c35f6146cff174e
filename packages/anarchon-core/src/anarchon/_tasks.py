"""Task ownership: which tasks has the scheduler started, and are they over?"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Iterable
from functools import partial
from typing import Any, TypeVar

__all__ = ["Tasks"]

T = TypeVar("T")


class Tasks:
    """Owns every task started on one event loop for one scheduler, each under a role ("claim",
    "run", …), so a stop can wait for or cancel one role without looking inside the tasks.

    Unlike `asyncio.TaskGroup`, one task's failure cancels nothing: it is logged, and the scheduler
    keeps going.
    """

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._roles: dict[str, set[asyncio.Task[Any]]] = {}
        self._callbacks: dict[str, partial[None]] = {}
        """Each role's done callback (one object per role, not one per task)."""

    def spawn(self, coro: Coroutine[Any, Any, T], role: str, name: str | None = None) -> asyncio.Task[T]:
        """Start `coro` as a task owned under `role`."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        tasks = self._roles.get(role)
        if tasks is None:
            tasks = self._roles[role] = set()
            self._callbacks[role] = partial(self._done, tasks)
        tasks.add(task)
        # One done callback, not two: each is a loop callback of its own when the task ends.
        task.add_done_callback(self._callbacks[role])
        return task

    def start(self, coro: Coroutine[Any, Any, T], role: str,
              context: contextvars.Context | None = None) -> asyncio.Task[T]:
        """Start `coro` as a task owned under `role` (in `context`, else a copy of the current one) that
        reports its own end: its last step calls `ended`, and it logs its own failures. No done
        callback, so its end costs no loop callback (for the tasks started once per run)."""
        task = asyncio.get_running_loop().create_task(coro, context=context)
        tasks = self._roles.get(role)
        if tasks is None:
            tasks = self._roles[role] = set()
            self._callbacks[role] = partial(self._done, tasks)
        tasks.add(task)
        return task

    def ended(self, task: asyncio.Task[Any] | None, role: str) -> None:
        """The last step of a task started with `start`: it is no longer owned."""
        tasks = self._roles.get(role)
        if tasks is not None and task is not None:
            tasks.discard(task)

    def of(self, *roles: str) -> list[asyncio.Task[Any]]:
        """The tasks still running under `roles` (every role when none is named)."""
        picked: Iterable[set[asyncio.Task[Any]]] = (
            (self._roles.get(r, set()) for r in roles) if roles else self._roles.values())
        # (A task from `start` cancelled before its first step never reached `ended`: it is done.)
        return [t for tasks in picked for t in tasks if not t.done()]

    def cancel(self, *roles: str) -> list[asyncio.Task[Any]]:
        """Cancel the tasks under `roles` (every role when none is named); return them."""
        tasks = self.of(*roles)
        for task in tasks:
            task.cancel()
        return tasks

    async def wait(self, *roles: str, within: float | None = None) -> bool:
        """Wait up to `within` s for the tasks under `roles` to end; True when none is left."""
        tasks = self.of(*roles)
        if tasks:
            await asyncio.wait(tasks, timeout=within)  # (not asyncio.timeout: the tasks are not cut)
        return not self.of(*roles)

    def _done(self, tasks: set[asyncio.Task[Any]], task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error("task %s failed", task.get_name(), exc_info=task.exception())
