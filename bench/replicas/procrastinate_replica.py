"""A procrastinate 3.10 replica: one worker per replica, each deferring the periodic tasks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procrastinate
from _log import StartLog


async def amain(config: dict[str, Any]) -> None:
    log = StartLog(config["log"], config["scheduler"])
    sleep = float(config["sleep"])
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=config["url"]))

    def make(name: str) -> Any:
        async def handler(timestamp: int) -> None:  # the periodic task's fire time, epoch seconds
            log.start(name, timestamp * 1000)
            if sleep:
                await asyncio.sleep(sleep)
        return handler

    for i in range(int(config["jobs"])):
        name = f"j{i}"
        app.periodic(cron="* * * * * *", periodic_id=name)(app.task(name=name)(make(name)))
    async with app.open_async():
        if config.get("setup"):
            await app.schema_manager.apply_schema_async()
            return
        log.ready()
        worker = asyncio.create_task(app.run_worker_async(
            concurrency=int(config.get("concurrency", 10)), install_signal_handlers=False))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await asyncio.wait([worker, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(amain(json.loads(sys.argv[1])))
