"""SIGINT and SIGTERM: a first one stops a scheduler gracefully, a second one ends the process at once.

`Scheduler.run()` owns its loop and its signals (`run_until_signal`). A stop anywhere else (a web app's
lifespan, `stop()` from your code) owns no signal, until a handler outlives `stop_timeout`: then, on the
main thread, a SIGINT or SIGTERM ends the process at once for as long as the stop waits (`SecondSignal`).
Ending at once releases nothing: the leases of the runs still going expire, and other replicas take
their slots over as the next attempt, once this process and its threads are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

from ._context import JobContext

__all__ = ["YOUNG_GC_THRESHOLD", "SecondSignal", "run_until_signal"]

YOUNG_GC_THRESHOLD = 10_000
"""The youngest generation's threshold that `run()` sets, where it is lower: a young collection every
10,000 new objects, not every 700 (CPython's default)."""


class Runnable(Protocol):
    """What `run_until_signal` needs of a scheduler."""

    @property
    def instance_id(self) -> str:
        """This replica's name."""
        ...

    @property
    def log(self) -> logging.Logger:
        """Where the scheduler logs."""
        ...

    @property
    def stop_timeout_ms(self) -> int:
        """How long a stop gives handlers."""
        ...

    async def __aenter__(self) -> Any:
        """Start."""

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        """Stop gracefully."""

    async def _wait_for_stop_or(self, event: asyncio.Event) -> bool:
        """Wait for `event` or a stop begun elsewhere; True if `event` came first."""


class SecondSignal:
    """Ends the process at once on a SIGINT or SIGTERM that comes while a stop waits."""

    def __init__(self, name: Callable[[], str], log: logging.Logger,
                 running: Callable[[], list[JobContext]]) -> None:
        self._name = name
        self._log = log
        self._running = running
        self.armed = False
        """True while a SIGINT or SIGTERM ends the process at once."""
        self._restore: dict[int, Any] = {}
        """The signal handlers that `arm` replaced, put back by `disarm`."""

    def arm(self) -> str:
        """A handler outlives the stop: let a SIGINT or SIGTERM end the process at once, where this
        thread may handle signals; say what ends the wait (for the log line naming the handler)."""
        again = "a second " if self.armed else ""  # (run() armed it at the first signal)
        if not self.armed and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    previous = signal.getsignal(sig)
                    signal.signal(sig, self.exit_now)
                except (ValueError, OSError):  # not the main interpreter: leave the signals alone
                    continue
                self._restore[sig] = previous
            self.armed = bool(self._restore)
        if self.armed:
            return (f"{again}SIGINT or SIGTERM exits now without releasing it, and another replica takes "
                    "the slot over as attempt 2 once the lease expires")
        return ("the process exits only after it returns (stop the process to end it: another replica "
                "then takes the slot over as attempt 2 once the lease expires)")

    def disarm(self) -> None:
        """Put back the signal handlers that `arm` replaced."""
        restore, self._restore = self._restore, {}
        for signum, previous in restore.items():
            if previous is not None:
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(signum, previous)
        if restore:
            self.armed = False

    def exit_now(self, signum: int, _frame: object = None) -> None:
        """End the process now, releasing nothing, so the leases of the runs still going expire and
        other replicas take their slots over."""
        running = ", ".join(f"{c.name} slot={c.slot} attempt={c.attempt}" for c in self._running()) or "none"
        self._log.warning("%s: second %s: exiting now without releasing (running: %s); other replicas take "
                          "these slots over once their leases expire", self._name(),
                          signal.Signals(signum).name, running)
        _flush_logs(self._log)
        os._exit(128 + signum)


async def run_until_signal(scheduler: Runnable, second: SecondSignal, *, tune_gc: bool) -> None:
    """Start `scheduler`, wait for SIGINT or SIGTERM (or a stop begun by a handler), stop it gracefully;
    a second signal meanwhile ends the process at once (`second`). `tune_gc`: see `Scheduler.run`."""
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    restore: dict[int, Any] = {}

    def first(sig: int) -> None:
        done.set()
        scheduler.log.info("%s stopping (signal %s): running jobs have stop_timeout=%d ms to end; a second "
                           "signal exits at once", scheduler.instance_id, signal.Signals(sig).name,
                           scheduler.stop_timeout_ms)

    def on_signal(signum: int, frame: object = None) -> None:
        # A Python-level handler, not a loop callback: it runs in the main thread between two
        # bytecodes, even while a handler blocks the event loop. The first signal begins the stop on
        # the loop; from then on a second one ends the process at once (as uvicorn's and Celery's
        # second Ctrl-C do), releasing nothing.
        if second.armed:
            second.exit_now(signum, frame)
        second.armed = True
        loop.call_soon_threadsafe(first, signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):  # not the main thread: signals are the app's
            restore[sig] = signal.getsignal(sig)
            signal.signal(sig, on_signal)
    try:
        async with scheduler:
            if tune_gc:
                gc.collect()
                gc.freeze()
                young, middle, old = gc.get_threshold()
                if 0 < young < YOUNG_GC_THRESHOLD:  # (0: the app turned automatic collection off)
                    gc.set_threshold(YOUNG_GC_THRESHOLD, middle, old)
            await scheduler._wait_for_stop_or(done)
    finally:
        second.armed = False
        for signum, previous in restore.items():
            if previous is not None:
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(signum, previous)


def _flush_logs(log: logging.Logger) -> None:
    """Flush every handler that `log`'s records reach, and the standard streams (before `os._exit`)."""
    current: logging.Logger | None = log
    while current is not None:
        for handler in current.handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        current = current.parent if current.propagate else None
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
