"""Log lines: how slots, errors and handlers read in anarchon's logs, and the `log=True` console handler."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import os
import sys
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from ._schedules import from_ms

__all__ = ["SUMMARY_S", "SkipSummary", "SlotText", "app_logging", "enable_console_logging", "fields",
           "fmt_slot", "handler_exc_info", "qualname", "short"]

logger = logging.getLogger("anarchon")
"""The engine's logger unless the scheduler was given one (`log=<Logger>`)."""


def fmt_slot(slot: int) -> str:
    """Format a slot for logs: ISO 8601 UTC, milliseconds only when present."""
    dt = from_ms(slot)
    ms = slot % 1000
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms:03d}Z" if ms else "Z")


class SlotText(int):
    """A slot for a log line, formatted only if the line is emitted (an `int`: made in C, once or
    twice per claim attempt)."""

    __slots__ = ()

    @property
    def slot(self) -> int:
        """The slot, epoch ms."""
        return int(self)

    def __str__(self) -> str:
        return fmt_slot(self)


def fields(job: str, slot: int, instance: str, *, attempt: int = 0, outcome: str | None = None
           ) -> dict[str, object]:
    """A log line's structured fields, passed as `extra` so that a formatter (JSON, say) reads them as
    record attributes: `job`, `slot` (epoch ms), `instance` (the instance logging), and `attempt` and
    `outcome` where they apply."""
    extra: dict[str, object] = {"job": job, "slot": slot, "instance": instance}
    if attempt:
        extra["attempt"] = attempt
    if outcome is not None:
        extra["outcome"] = outcome
    return extra


SUMMARY_S = 60.0
"""How often, at most, the slots skipped are summed up in one INFO line."""


class SkipSummary:
    """Counts the slots skipped (paused, or behind an older run) and says them in one INFO line a
    minute after the first of them (and at a stop), instead of a line per slot per replica. (A timer
    only while there is a count: an idle scheduler wakes for nothing.)"""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._counts: dict[tuple[str, str], int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._since = 0.0
        """When the first slot counted now was skipped (the loop's clock)."""

    def add(self, reason: str, job: str) -> None:
        """One slot of `job` skipped for `reason` ("paused", "overlap"); call on the scheduler's loop."""
        key = (reason, job)
        self._counts[key] = self._counts.get(key, 0) + 1
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._since = loop.time()
            self._timer = loop.call_at(self._since + SUMMARY_S, self.say)

    def say(self) -> None:
        """Log what was skipped since the last line, if anything, and start counting again."""
        seconds = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            seconds = asyncio.get_running_loop().time() - self._since
        counts, self._counts = self._counts, {}
        if not counts:
            return
        by_reason: dict[str, list[str]] = {}
        for (reason, job), n in sorted(counts.items()):
            by_reason.setdefault(reason, []).append(f"{job} x{n}")
        shown = "; ".join(f"{reason}: {', '.join(jobs[:10])}"
                          + (f" and {len(jobs) - 10} more jobs" if len(jobs) > 10 else "")
                          for reason, jobs in by_reason.items())
        self._log.info("%d slot(s) skipped in %d s (%s)", sum(counts.values()), math.ceil(seconds), shown,
                       extra={"outcome": "skipped"})


def short(exc: BaseException) -> str:
    """`Type: message` for an exception, or just the type when it has no message."""
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


def qualname(obj: object) -> str:
    """A handler's qualified name, or its repr."""
    return getattr(obj, "__qualname__", None) or repr(obj)


# The frames between the scheduler and a handler: anarchon's own, and asyncio's and the executor's.
_INTERNAL = tuple(os.path.dirname(path) + os.sep
                  for path in (__file__, asyncio.__file__, concurrent.futures.__file__))


def handler_exc_info(exc: BaseException, log: logging.Logger) -> tuple[type[BaseException], BaseException,
                                                                        TracebackType | None]:
    """`exc_info` for an exception a handler raised: its traceback from the first frame of the user's
    code on (the frames that called the handler dropped), or whole when `log` is enabled for DEBUG."""
    tb = exc.__traceback__
    if not log.isEnabledFor(logging.DEBUG):
        first = tb
        while first is not None and first.tb_frame.f_code.co_filename.startswith(_INTERNAL):
            first = first.tb_next
        tb = first or tb  # all internal: an error of anarchon's own, shown whole
    return type(exc), exc, tb


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """`log=True`'s console handler: the records no other handler receives, on whatever `sys.stderr` is
    at the time (test runners swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass

    def filter(self, record: logging.LogRecord) -> bool:
        """Only a record no other handler takes (the app's own logging, or the CLI's): one line per event."""
        elsewhere = any(h is not self and record.levelno >= h.level
                        for h in _handlers_up(logging.getLogger(record.name)))
        return not elsewhere and bool(super().filter(record))


def _handlers_up(logger: logging.Logger) -> Iterator[logging.Handler]:
    """The handlers a record of `logger` reaches: its own, then each parent's while `propagate` holds."""
    current: logging.Logger | None = logger
    while current is not None:
        yield from current.handlers
        current = current.parent if current.propagate else None


def app_logging(log: logging.Logger) -> bool:
    """True when `log`'s records reach a handler besides `log=True`'s: the app has set up logging."""
    return any(not isinstance(h, _StderrHandler) for h in _handlers_up(log))


def enable_console_logging(log: logging.Logger) -> None:
    """`log=True`: INFO lines like 'anarchon: sync slot=… won attempt=1 (host:1:ab12)' on stderr, unless
    the app's logging (or the CLI's) already prints them."""
    if any(isinstance(h, _StderrHandler) for h in log.handlers):
        return
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    log.addHandler(handler)
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)
