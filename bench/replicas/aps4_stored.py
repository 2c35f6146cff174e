"""APScheduler 4.0.0a6 in `stored_herd.py`'s herd: schedules kept in its SQLAlchemy data store on
PostgreSQL (asyncpg event broker), run by scheduler processes that share the store.

    python aps4_stored.py populate URL COUNT DUE       # COUNT one-off schedules due at DUE (epoch s)
    python aps4_stored.py replica URL DUE QUIET OUT    # run until QUIET s pass with no start after DUE

URL is a SQLAlchemy URL (postgresql+asyncpg://...). The schedules are added with the data store's
`add_schedule`, as `AsyncScheduler.add_schedule` does, 16 at a time, all of one task `herd` with no
limit on its running jobs (the default, 1, would run the herd one job at a time across the cluster).
Each replica appends a line per start to OUT, and prints its CPU since DUE and its peak RSS as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aps4_tasks
from apscheduler import AsyncScheduler, ConflictPolicy, Schedule
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker
from apscheduler.triggers.date import DateTrigger
from sqlalchemy.ext.asyncio import create_async_engine


def _scheduler(url: str, pool_size: int = 5) -> AsyncScheduler:
    engine = create_async_engine(url, pool_size=pool_size)
    return AsyncScheduler(SQLAlchemyDataStore(engine), AsyncpgEventBroker.from_async_sqla_engine(engine))


async def populate(url: str, count: int, due: float) -> float:
    """Add `count` schedules due at `due`; return the seconds it took."""
    started = time.monotonic()
    async with _scheduler(url, pool_size=16) as scheduler:
        task = await scheduler.configure_task("herd", func=aps4_tasks.herd, max_running_jobs=None)
        when = datetime.fromtimestamp(due, UTC)
        ids = iter(range(count))

        async def add() -> None:
            for i in ids:
                trigger = DateTrigger(when)
                schedule = Schedule(id=f"h-{i:07d}", task_id=task.id, trigger=trigger, kwargs={"n": i},
                                    job_executor=task.job_executor)
                schedule.next_fire_time = trigger.next()
                await scheduler.data_store.add_schedule(schedule, ConflictPolicy.do_nothing)

        await asyncio.gather(*(add() for _ in range(16)))
    return time.monotonic() - started


async def replica(url: str, due: float, quiet: float, out: str) -> dict[str, Any]:
    """Run until `quiet` s pass with no start after `due`; the CPU since `due` and the peak RSS."""
    aps4_tasks.STARTS = open(out, "a", buffering=1 << 16)  # noqa: SIM115, ASYNC230 - before the run; closed below
    async with _scheduler(url) as scheduler:
        await scheduler.start_in_background()
        print("ready", flush=True)
        await asyncio.sleep(max(0.0, due - time.time()))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        before = usage.ru_utime + usage.ru_stime
        while time.time() < due + quiet or time.time() - aps4_tasks.LAST[0] < quiet:  # noqa: ASYNC110
            await asyncio.sleep(0.25)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        await scheduler.stop()
    aps4_tasks.STARTS.close()
    return {"cpu_s": usage.ru_utime + usage.ru_stime - before, "peak_mb": usage.ru_maxrss / 1024}


if __name__ == "__main__":
    cmd, url, *rest = sys.argv[1:]
    if cmd == "populate":
        print(asyncio.run(populate(url, int(rest[0]), float(rest[1]))))
    else:
        print(json.dumps(asyncio.run(replica(url, float(rest[0]), float(rest[1]), rest[2]))), flush=True)
