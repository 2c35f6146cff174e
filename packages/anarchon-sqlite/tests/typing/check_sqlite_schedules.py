"""Checked by mypy --strict and pyright in `make test` (never run): SqliteBackend
keeps schedules as data, so a scheduler on it registers tasks and reaches its schedules."""

from __future__ import annotations

from typing import Any

from anarchon import JobContext, Scheduler, Schedules
from anarchon.backends import ScheduleBackend
from anarchon_sqlite import SqliteBackend

store: ScheduleBackend = SqliteBackend("sqlite:///jobs.db")
scheduler = Scheduler(backend=SqliteBackend("sqlite:///jobs.db"))
schedules: Schedules = scheduler.schedules


@scheduler.task("send-report")
async def send_report(ctx: JobContext, **args: Any) -> None:
    """A task, run for each stored schedule that names it."""
