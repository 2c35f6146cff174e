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


STARTS: Any = None
"""The open file that `herd` appends its starts to (bench/replicas/aps4_stored.py sets it)."""
LAST = [0.0]


async def herd(n: int) -> None:
    """Record a start as `stored_herd.py` reads them: schedule, slot (ms), attempt 1, wall time."""
    import time

    job = current_job.get()
    fire = job.scheduled_fire_time
    now = time.time()
    LAST[0] = now
    STARTS.write(f"{job.schedule_id} {int(fire.timestamp() * 1000) if fire else -1} 1 {now:.4f}\n")
