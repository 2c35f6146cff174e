"""An APScheduler 3.11 replica: memory job store, so every replica runs every job (the common set-up)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import defaultdict, deque
from datetime import UTC, datetime, timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _log import StartLog
from apscheduler.events import EVENT_JOB_SUBMITTED
from apscheduler.schedulers.asyncio import AsyncIOScheduler


async def amain(config: dict[str, Any]) -> None:
    log = StartLog(config["log"], config["scheduler"])
    sleep = float(config["sleep"])
    pending: dict[str, deque[int]] = defaultdict(deque)

    def on_submitted(event: Any) -> None:  # runs before the job's coroutine starts
        for t in event.scheduled_run_times:
            pending[event.job_id].append(int(t.timestamp() * 1000))

    async def handler(job_id: str) -> None:
        queue = pending[job_id]
        log.start(job_id, queue.popleft() if queue else -1)
        if sleep:
            await asyncio.sleep(sleep)

    sched = AsyncIOScheduler(timezone=UTC)
    sched.add_listener(on_submitted, EVENT_JOB_SUBMITTED)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    for i in range(int(config["jobs"])):
        sched.add_job(handler, "interval", seconds=1, start_date=start, args=[f"j{i}"], id=f"j{i}")
    sched.start()
    log.ready()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    sched.shutdown(wait=False)


if __name__ == "__main__":
    asyncio.run(amain(json.loads(sys.argv[1])))
