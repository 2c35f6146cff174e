"""Checked by mypy --strict and pyright in `make test` (never run): RedisBackend
keeps schedules as data, so a scheduler on it registers tasks and reaches its schedules."""

from __future__ import annotations

from typing import Any

from anarchon import JobContext, Scheduler, Schedules
from anarchon.backends import ScheduleBackend
from anarchon_redis import RedisBackend, ValkeyBackend

store: ScheduleBackend = RedisBackend("redis://127.0.0.1:6379/0")
scheduler = Scheduler(backend=RedisBackend("redis://127.0.0.1:6379/0"))
schedules: Schedules = scheduler.schedules


@scheduler.task("send-report")
async def send_report(ctx: JobContext, **args: Any) -> None:
    """A task, run for each stored schedule that names it."""


valkey: ScheduleBackend = ValkeyBackend("valkey://127.0.0.1:6379/0")
