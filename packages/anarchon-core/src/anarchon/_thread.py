"""Sync apps: the scheduler on its own event loop in a daemon thread (Django, Flask, gunicorn workers).

Every process that calls `start_in_thread()` is one more replica: gunicorn workers and pods share the
store and so share the work. A process forked *after* the start has no scheduler thread (fork copies
only the calling thread), so the child refuses to use it and says where to start it instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import sys
import threading
from typing import Protocol

from ._errors import AnarchonError
from ._process import PROCESS
from ._settings import default_instance_id

__all__ = ["Runnable", "SchedulerThread", "fork_message"]

logger = logging.getLogger("anarchon")

_RECIPE = "docs/recipes/flask-gunicorn.md"


def fork_message(parent: int) -> str:
    """The refusal a forked child gives."""
    return (
        f"this process (pid {os.getpid()}) was forked from pid {parent} after "
        "scheduler.start_in_thread(): the child has no scheduler thread. Start the scheduler after the "
        "fork instead: with gunicorn, call scheduler.start_in_thread() in the post_fork(server, worker) "
        f"hook of gunicorn.conf.py (or drop --preload); see {_RECIPE}"
    )


class Runnable(Protocol):
    """What the thread needs of a scheduler."""

    instance_id: str

    @property
    def log(self) -> logging.Logger:
        """Where the scheduler logs."""
        ...

    async def start(self) -> None:
        """Start scheduling."""

    async def stop(self) -> None:
        """Stop gracefully."""

    async def _wait_for_stop_or(self, event: asyncio.Event) -> bool:
        """Wait for `event` or a stop begun elsewhere; True if `event` came first."""


def _fresh_instance_id(scheduler: Runnable) -> None:
    """A default id (`host:pid:hex`) made in another process, e.g. gunicorn's master with --preload,
    would make every worker claim under one name: give this process its own."""
    match = re.fullmatch(rf"{re.escape(socket.gethostname())}:(\d+):[0-9a-f]{{4}}", scheduler.instance_id)
    if match and int(match.group(1)) != os.getpid():
        scheduler.instance_id = default_instance_id()


class SchedulerThread:
    """Runs one scheduler on a private event loop in a daemon thread."""

    def __init__(self, scheduler: Runnable) -> None:
        self.scheduler = scheduler
        self.pid = os.getpid()
        self.thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def alive_in_parent(self) -> bool:
        """True when this runner was started by another process (so this one is a forked child)."""
        return self.thread is not None and self.pid != os.getpid()

    def warn_if_forked(self) -> None:
        """In a process forked after the start, say on stderr where to start the scheduler instead."""
        if self.alive_in_parent():
            # Printed, not raised: at-fork callbacks cannot fail the fork.
            print(f"anarchon: warning: {fork_message(self.pid)}", file=sys.stderr)

    def check_fork(self) -> None:
        """Raise `RuntimeError` in a process forked after the start."""
        if self.alive_in_parent():
            raise RuntimeError(fork_message(self.pid))

    def start(self, timeout: float) -> threading.Thread:
        """Start the thread and wait until the scheduler has started; re-raise its start error."""
        _fresh_instance_id(self.scheduler)
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._main, name="anarchon-scheduler", daemon=True)
        PROCESS.add_scheduler_thread(self)
        self.thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"{self.scheduler!r} did not start within {timeout} s")
        if self._error is not None:
            self.thread.join()
            error, self._error = self._error, None
            if isinstance(error, AnarchonError) and not self.scheduler.log.isEnabledFor(logging.DEBUG):
                # The message names the store and the cause; the driver's chained exceptions (dozens
                # of lines) are for debugging.
                raise error.with_traceback(None) from None
            raise error
        return self.thread

    def _main(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.scheduler.start()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            # Until stop_thread(), or until a handler stopped the scheduler: then the thread ends too.
            await self.scheduler._wait_for_stop_or(self._stop)
        finally:
            await self.scheduler.stop()

    def stop(self, timeout: float) -> bool:
        """Ask the loop to stop the scheduler gracefully; wait up to `timeout` s. True if it ended."""
        self.check_fork()
        thread, loop, stop = self.thread, self._loop, self._stop
        if thread is None or loop is None or stop is None:
            return True
        if thread.is_alive():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed meanwhile
                pass
            thread.join(timeout)
        if thread.is_alive():
            logger.warning("%s did not stop within %.1f s; its daemon thread ends with the process",
                           self.scheduler.instance_id, timeout)
            return False
        return True
