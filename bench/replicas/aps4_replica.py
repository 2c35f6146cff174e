"""An APScheduler 4.0.0a6 replica: SQLAlchemy data store on PostgreSQL, asyncpg event broker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from datetime import UTC, datetime, timedelta

import aps4_tasks
from _log import StartLog
from apscheduler import AsyncScheduler, ConflictPolicy
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy.ext.asyncio import create_async_engine


async def amain(config: dict[str, Any]) -> None:
    aps4_tasks.LOG = StartLog(config["log"], config["scheduler"])
    aps4_tasks.SLEEP = float(config["sleep"])
    engine = create_async_engine(config["url"])
    store = SQLAlchemyDataStore(engine)
    broker = AsyncpgEventBroker.from_async_sqla_engine(engine)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    async with AsyncScheduler(store, broker) as scheduler:
        if config.get("setup"):  # create the tables once, before the replicas race to
            return
        for i in range(int(config["jobs"])):
            name = f"j{i}"
            # One task per job: a task's max_running_jobs (default 1) applies across the cluster,
            # so one task shared by every schedule would run one job at a time.
            await scheduler.configure_task(name, func=aps4_tasks.handler)
            await scheduler.add_schedule(name, IntervalTrigger(seconds=1, start_time=start),
                                         id=name, args=[name], conflict_policy=ConflictPolicy.do_nothing)
        await scheduler.start_in_background()
        aps4_tasks.LOG.ready()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await scheduler.stop()


if __name__ == "__main__":
    asyncio.run(amain(json.loads(sys.argv[1])))
