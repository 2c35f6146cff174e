"""Checked by mypy --strict in `make test` (never run): RabbitMQBackend is claim-only."""

from __future__ import annotations

from anarchon import JobContext, Scheduler
from anarchon_rabbitmq import RabbitMQBackend


async def handler(ctx: JobContext) -> None:
    """A handler."""


scheduler = Scheduler(backend=RabbitMQBackend("amqp://guest:guest@127.0.0.1:5672/"))

# Accepted: common options.
scheduler.every("a", "10s", handler, timeout="5s", jitter="10ms")

# Rejected: lease-only options on a claim-only backend.
scheduler.every("b", "10s", handler, overlap="skip")  # type: ignore[arg-type]
scheduler.cron("c", "* * * * *", handler, max_attempts=2)  # type: ignore[arg-type]
Scheduler(backend=RabbitMQBackend("amqp://127.0.0.1/"), lease="30s")  # type: ignore[arg-type]
