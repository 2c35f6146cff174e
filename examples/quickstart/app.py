"""The quick start: run this file in three terminals, or run `make demo`, which does it for you.

Every process registers the same two jobs on one SQLite file. For each slot, one process wins and
runs the handler; the others wait as backups and take over if the winner stops or dies.
"""

import os
import time

from anarchon import JobContext, Scheduler
from anarchon_sqlite import SqliteBackend

scheduler = Scheduler(SqliteBackend.from_url("sqlite:///jobs.db"), lease="6s", heartbeat="1s", log=True)


@scheduler.every("sync", "10s")
async def sync(ctx: JobContext) -> None:
    print(f"[handler] sync slot={ctx.slot} attempt={ctx.attempt} pid={os.getpid()}")


@scheduler.every("report", "30s")
def report(ctx: JobContext) -> None:  # a plain function: it runs in a worker thread
    print(f"[handler] report slot={ctx.slot} attempt={ctx.attempt} pid={os.getpid()}")
    for _ in range(12):  # about 12 s of work, in steps that can stop early
        ctx.raise_if_cancelled()  # set on a graceful stop: the run is handed over to another process
        time.sleep(1)
    print(f"[handler] report slot={ctx.slot} attempt={ctx.attempt} pid={os.getpid()} done")


if __name__ == "__main__":
    scheduler.run()  # until SIGINT/SIGTERM, then a graceful stop
