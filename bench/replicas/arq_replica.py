"""An arq 0.28 replica: one worker per replica with one cron job per benchmark job (unique per fire)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _log import StartLog
from arq import cron
from arq.connections import RedisSettings
from arq.worker import Worker


def main(config: dict[str, Any]) -> None:
    log = StartLog(config["log"], config["scheduler"])
    sleep = float(config["sleep"])

    def make(name: str) -> Any:
        async def handler(ctx: dict[str, Any]) -> None:
            # A cron job's id is "<name>:<intended fire time in epoch ms>".
            log.start(name, int(str(ctx["job_id"]).rsplit(":", 1)[1]))
            if sleep:
                await asyncio.sleep(sleep)
        handler.__qualname__ = name
        return handler

    # microsecond=0: fire on the second (arq's default is .123456 past it).
    jobs = [cron(make(f"j{i}"), name=f"j{i}", second=set(range(60)), microsecond=0)
            for i in range(int(config["jobs"]))]
    worker = Worker(functions=[], cron_jobs=jobs, redis_settings=RedisSettings.from_dsn(config["url"]),
                    max_jobs=int(config.get("max_jobs", 100)), keep_result=0, handle_signals=True)
    log.ready()
    worker.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
