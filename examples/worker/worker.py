"""A standalone worker: start it once per machine or pod; every slot runs in exactly one of them.

    pip install anarchon-core anarchon-sqlite
    anarchon run worker:scheduler        # or: python worker.py

Start it in three terminals: each slot runs once. Stop one with Ctrl-C while `report` runs and another
takes the run over at once as attempt 2. `ANARCHON_URL` picks the store (default: a SQLite file here).
"""

from __future__ import annotations

import os

from anarchon import JobContext, Scheduler

scheduler = Scheduler.from_url(
    os.environ.get("ANARCHON_URL", "sqlite:///anarchon-worker.db"),
    namespace="worker-example", lease="6s", heartbeat="1s", stop_timeout="5s", log=True,
)


@scheduler.every("tick", "5s")
async def tick(ctx: JobContext) -> None:
    print(f"tick ran: slot={ctx.scheduled_at:%H:%M:%S} attempt={ctx.attempt} on {ctx.instance_id}",
          flush=True)


@scheduler.every("report", "30s", timeout="25s")
def report(ctx: JobContext) -> None:
    """A blocking handler: plain functions run in a worker thread, so the loop keeps renewing the lease."""
    for step in range(10):
        ctx.sleep_sync(1)  # raises RunCancelled at once on a graceful stop, so the run is handed over
        print(f"report {ctx.idempotency_key()}: step {step + 1}/10", flush=True)


if __name__ == "__main__":
    scheduler.run()
