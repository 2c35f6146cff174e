"""The APScheduler 4 task function: importable by reference, since any replica may run any job."""

from __future__ import annotations

import asyncio
from typing import Any

from apscheduler import current_job

LOG: Any = None
SLEEP = 0.0


async def handler(name: str) -> None:
    """Record the start, with the job's scheduled fire time, then sleep."""
    fire = current_job.get().scheduled_fire_time
    LOG.start(name, int(fire.timestamp() * 1000) if fire is not None else -1)
    if SLEEP:
        await asyncio.sleep(SLEEP)
