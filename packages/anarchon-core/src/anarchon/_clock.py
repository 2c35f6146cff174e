"""The injectable clock: every wall-clock reading in the engine goes through one."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Source of wall time in epoch milliseconds (UTC); sleeping is done by the event loop."""

    def now_ms(self) -> int:
        """Return the current wall time as integer epoch milliseconds, UTC."""
        ...


class SystemClock:
    """The machine's real-time clock."""

    def now_ms(self) -> int:
        """Return the system's wall time in epoch milliseconds."""
        return time.time_ns() // 1_000_000
