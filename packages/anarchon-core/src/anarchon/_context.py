"""What a handler receives: `JobContext` and its cancellation signal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime

from ._errors import RunCancelled
from ._schedules import from_ms

__all__ = ["TRIGGER_SUFFIX", "CancelSignal", "JobContext"]

TRIGGER_SUFFIX = "\x1ftrigger"
"""Appended to a job's name for the store record of its triggers: job names hold no control characters,
so no job's record can be a trigger's."""


_SIGNAL_LOCK = threading.Lock()
"""Orders `set` against a worker thread starting `wait_sync` (the events are made on first need)."""


class CancelSignal:
    """Set when the run must end: graceful stop, lost lease or timeout. Safe to read from threads."""

    __slots__ = ("_event", "_is_set", "_loop", "_thread_event", "reason")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # Most runs end without ever waiting on their signal: the events are created on first wait.
        self._is_set = False
        self._event: asyncio.Event | None = None
        self._thread_event: threading.Event | None = None
        self._loop = loop
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """True once the run has been asked to end."""
        return self._is_set

    def raise_if_cancelled(self) -> None:
        """Raise `RunCancelled` if the run has been asked to end."""
        if self._is_set:
            raise RunCancelled(self.reason or "cancelled")

    async def wait(self) -> None:
        """Wait until the run is asked to end."""
        if self._is_set:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()

    def wait_sync(self, timeout: float | None = None) -> bool:
        """Block a worker thread until the run is asked to end or `timeout` passes; True if asked."""
        with _SIGNAL_LOCK:
            if self._is_set:
                return True
            if self._thread_event is None:
                self._thread_event = threading.Event()
            event = self._thread_event
        return event.wait(timeout)

    def set(self, reason: str) -> None:
        """Ask the run to end (first reason wins). Call on the scheduler's loop."""
        with _SIGNAL_LOCK:
            if self._is_set:
                return
            self.reason = reason
            self._is_set = True
            thread_event = self._thread_event
        if thread_event is not None:
            thread_event.set()
        if self._event is not None:
            self._event.set()


@dataclass(slots=True, eq=False, init=False)
class JobContext:
    """Everything a handler knows about its run."""

    name: str
    """The job's name."""
    slot: int
    """The slot: intended fire time, epoch milliseconds UTC."""
    attempt: int
    """1 for the first run of a slot; +1 for each takeover."""
    token: int
    """Fencing token: larger than every earlier claim's; use it to fence writes."""
    instance_id: str
    """The instance running this slot."""
    namespace: str
    """The namespace the job lives in."""
    signal: CancelSignal = field(repr=False)
    """Set when the run must end."""
    _logger: logging.Logger | None = field(repr=False)
    triggered: bool
    """True for a run started by `Scheduler.trigger` (or `anarchon trigger`): `slot` is then the
    trigger's id, not a scheduled slot, and its lease is on the store record `record`."""
    task: str | None
    """The task of a stored schedule's run (`name` is then the schedule's id); None for a code job."""

    def __init__(self, name: str, slot: int, attempt: int, token: int, instance_id: str, namespace: str,
                 signal: CancelSignal, logger: logging.Logger | None = None, triggered: bool = False,
                 task: str | None = None) -> None:
        """The context of one run; `logger` defaults to `anarchon.job.<name>`."""
        self.name = name
        self.slot = slot
        self.attempt = attempt
        self.token = token
        self.instance_id = instance_id
        self.namespace = namespace
        self.signal = signal
        self._logger = logger
        self.triggered = triggered
        self.task = task

    @property
    def logger(self) -> logging.Logger:
        """A logger for the handler (`anarchon.job.<name>`)."""
        # Looked up on first use: a logger made for every job would stay in memory for the life of the
        # process, and each full garbage collection would traverse it, for handlers that never log.
        logger = self._logger
        if logger is None:
            logger = self._logger = logging.getLogger(f"anarchon.job.{self.name}")
        return logger

    @property
    def record(self) -> str:
        """The name of the store record that holds this run's lease: the job's name, or for a trigger
        the name of the job's trigger record."""
        return self.name + TRIGGER_SUFFIX if self.triggered else self.name

    @property
    def scheduled_at(self) -> datetime:
        """The slot as an aware UTC datetime."""
        return from_ms(self.slot)

    @property
    def cancelled(self) -> bool:
        """Shorthand for `signal.cancelled`."""
        return self.signal.cancelled

    def raise_if_cancelled(self) -> None:
        """Raise `RunCancelled` if the run has been asked to end."""
        self.signal.raise_if_cancelled()

    async def sleep(self, seconds: float) -> None:
        """Sleep; return early and raise `RunCancelled` if the run is asked to end meanwhile."""
        self.signal.raise_if_cancelled()
        with contextlib.suppress(TimeoutError):
            # Not asyncio.wait_for: on Python 3.11 it can swallow a cancellation (a stop after
            # stop_timeout) that arrives as the sleep ends.
            async with asyncio.timeout(seconds):
                await self.signal.wait()
        self.signal.raise_if_cancelled()

    def sleep_sync(self, seconds: float) -> None:
        """`sleep` for plain-function handlers running in a worker thread."""
        self.signal.raise_if_cancelled()
        self.signal.wait_sync(seconds)
        self.signal.raise_if_cancelled()

    def idempotency_key(self, *parts: object) -> str:
        """Return `"{namespace}:{name}:{slot}:{parts…}"`, the same on every attempt of this slot (for a
        trigger's run, `"{namespace}:{name}:trigger-{id}:{parts…}"`)."""
        slot = f"trigger-{self.slot}" if self.triggered else str(self.slot)
        return ":".join([self.namespace, self.name, slot, *(str(p) for p in parts)])
