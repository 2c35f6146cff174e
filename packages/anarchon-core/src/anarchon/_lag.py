"""The event loop's lag: was the loop blocked, and which jobs were running then?"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

__all__ = ["job_names", "lag_threshold", "watch_lag"]


async def watch_lag(log: logging.Logger, running: Callable[[], list[str]], heartbeat_ms: int) -> None:
    """Measure the event loop's lag; name the running jobs when the loop was blocked."""
    loop = asyncio.get_running_loop()
    period = 0.5
    threshold = lag_threshold(heartbeat_ms)
    while True:
        start = loop.time()
        await asyncio.sleep(period)
        lag = loop.time() - start - period
        if lag > threshold:
            log.warning("event loop blocked for %d ms (running jobs: %s); renewals may be late",
                        int(lag * 1000), job_names(running()))


def lag_threshold(heartbeat_ms: int) -> float:
    """The lag, in seconds, worth a warning: half a heartbeat, between 0.1 s and 1 s."""
    return max(0.1, min(heartbeat_ms / 1000 / 2, 1.0))


def job_names(names: list[str]) -> str:
    """Up to ten names, sorted, for a log line."""
    names = sorted(names)
    text = ", ".join(names[:10]) or "none"
    if len(names) > 10:
        text += f" and {len(names) - 10} more"
    return text
