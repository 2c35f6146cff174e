"""Virtual time and fault injection, for testing schedulers without sleeping in real time.

    clock = VirtualClock(start=datetime(2026, 1, 1, tzinfo=UTC))
    clock.run(main())          # asyncio sleeps and timeouts inside `main` take no real time

The event loop's own clock is virtual: when every task is waiting, the loop jumps to the next
timer at once. Handlers that run in worker threads still take real time; use async handlers in
virtual-time tests.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

from .._schedules import to_ms

__all__ = ["SkewedClock", "VirtualClock", "VirtualTimeLoop", "require_service"]

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real I/O without blocking; a wait for timers advances the virtual clock instead."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            # Nothing scheduled: only another thread can wake the loop.
            return super().select(None)
        self._clock.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is a `VirtualClock`."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(_VirtualSelector(clock))
        self._vclock = clock

    def time(self) -> float:
        return self._vclock.seconds


class VirtualClock:
    """A wall clock that starts at `start` and advances only as the virtual loop waits."""

    def __init__(self, start: datetime | int = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self.start_ms = to_ms(start) if isinstance(start, datetime) else start
        self.seconds = 0.0
        """Virtual seconds since start: the loop's `time()`."""

    def now_ms(self) -> int:
        """The virtual wall time, epoch ms."""
        return self.start_ms + round(self.seconds * 1000)

    def advance(self, seconds: float) -> None:
        """Move time forward (the loop does this itself while it waits)."""
        if seconds > 0:
            self.seconds += seconds

    def new_loop(self) -> VirtualTimeLoop:
        """Create an event loop driven by this clock."""
        return VirtualTimeLoop(self)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` to completion on a virtual-time loop, like `asyncio.run`."""
        with asyncio.Runner(loop_factory=self.new_loop) as runner:
            return runner.run(coro)


class SkewedClock:
    """Another clock's reading plus a fixed offset: an instance whose clock runs fast or slow."""

    def __init__(self, base: VirtualClock, offset_ms: int) -> None:
        self.base = base
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        """The base clock's time plus the offset."""
        return self.base.now_ms() + self.offset_ms


def require_service(name: str, url: str, default_port: int) -> None:
    """In a pytest test: skip when `url`'s server is unreachable, or fail when
    `ANARCHON_REQUIRE_SERVICES=1` (as in CI) says every service must be there."""
    import os
    import socket
    from urllib.parse import urlsplit

    import pytest

    from ..backends import redact_url

    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or default_port
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError as exc:
        reason = f"{name} unreachable at {redact_url(url)} ({exc})"
    if os.environ.get("ANARCHON_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; ANARCHON_REQUIRE_SERVICES=1 forbids skipping", pytrace=False)
    pytest.skip(reason)
