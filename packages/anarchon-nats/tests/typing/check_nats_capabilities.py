"""Checked by mypy --strict in `make test` (never run): NatsBackend is claim-only, NatsKVBackend leases."""

from __future__ import annotations

from anarchon import JobContext, Scheduler
from anarchon_nats import NatsBackend, NatsKVBackend


async def handler(ctx: JobContext) -> None:
    """A handler."""


claim_only = Scheduler(backend=NatsBackend("nats://127.0.0.1:4222"))
leases = Scheduler(backend=NatsKVBackend("nats://127.0.0.1:4222", lease="10s"), lease="10s", heartbeat="2s")

# Accepted.
claim_only.every("a", "10s", handler, timeout="5s")
leases.every("b", "10s", handler, overlap="replace", max_attempts=2)

# Rejected: lease-only options on the claim-only backend.
claim_only.every("c", "10s", handler, overlap="skip")  # type: ignore[arg-type]
claim_only.at("d", 1_800_000_000, handler, catch_up="5m")  # type: ignore[arg-type]
Scheduler(backend=NatsBackend("nats://127.0.0.1:4222"), heartbeat="1s")  # type: ignore[arg-type]

# Rejected: tasks run stored schedules, which a Key-Value bucket does not keep (no 'schedules').
leases.task("report")  # type: ignore[arg-type]
