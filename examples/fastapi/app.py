"""FastAPI with anarchon: every server process is one replica; the store picks one runner per slot.

    pip install "anarchon-core[fastapi]" anarchon-sqlite uvicorn
    uvicorn app:app --workers 2
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI

from anarchon import JobContext, Scheduler, cron, every

scheduler = Scheduler.from_url(
    os.environ.get("ANARCHON_URL", "sqlite:///anarchon-fastapi.db"),
    namespace="fastapi-example", lease="10s", heartbeat="2s", log=True,
)


class Reports:
    """Jobs declared on methods, registered on an instance (which could hold clients, settings, ...)."""

    def __init__(self) -> None:
        self.refreshed = 0

    @every("refresh-cache", "5s", timeout="4s")
    async def refresh(self, ctx: JobContext) -> None:
        self.refreshed += 1
        print(f"refresh-cache ran: slot={ctx.scheduled_at:%H:%M:%S} on {ctx.instance_id}", flush=True)

    @cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
    def digest(self, ctx: JobContext) -> None:
        print(f"digest for {ctx.scheduled_at:%Y-%m-%d}", flush=True)


reports = Reports()
scheduler.register(reports)
app = FastAPI(lifespan=scheduler.lifespan)


@app.get("/jobs")
async def jobs() -> list[dict[str, Any]]:
    """The store's record of every job: last slot, attempt, status, holder."""
    states = await scheduler.backend.jobs(scheduler.namespace)  # needs the 'inspect' capability
    return [{"job": s.job, "slot": s.slot, "attempt": s.attempt, "status": s.status, "holder": s.owner}
            for s in states]


@app.get("/")
async def home() -> dict[str, Any]:
    """This process's view."""
    return {"instance": scheduler.instance_id, "running": scheduler.running, "refreshed": reports.refreshed}
