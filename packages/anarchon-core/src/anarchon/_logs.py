"""Log lines: how slots, errors and handlers read in anarchon's logs, and the `log=True` console handler."""

from __future__ import annotations

import logging
import sys
from typing import Any

from ._schedules import from_ms

__all__ = ["SlotText", "enable_console_logging", "fmt_slot", "qualname", "short"]

logger = logging.getLogger("anarchon")
"""The engine's logger unless the scheduler was given one (`log=<Logger>`)."""


def fmt_slot(slot: int) -> str:
    """Format a slot for logs: ISO 8601 UTC, milliseconds only when present."""
    dt = from_ms(slot)
    ms = slot % 1000
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms:03d}Z" if ms else "Z")


class SlotText:
    """A slot for a log line, formatted only if the line is emitted."""

    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot

    def __str__(self) -> str:
        return fmt_slot(self.slot)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlotText) and other.slot == self.slot

    def __hash__(self) -> int:
        return hash(self.slot)


def short(exc: BaseException) -> str:
    """`Type: message` for an exception, or just the type when it has no message."""
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


def qualname(obj: object) -> str:
    """A handler's qualified name, or its repr."""
    return getattr(obj, "__qualname__", None) or repr(obj)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is at the time (test runners swap it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def enable_console_logging(log: logging.Logger) -> None:
    """`log=True`: INFO lines like 'anarchon: sync slot=… won attempt=1 (host:1:ab12)' on stderr."""
    if any(getattr(h, "_anarchon", False) for h in log.handlers):
        return
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    handler._anarchon = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)
