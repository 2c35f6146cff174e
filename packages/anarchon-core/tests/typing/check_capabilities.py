"""Checked by mypy --strict in `make test` (never run): proves the typed capabilities.

Each rejected call carries a `type: ignore[...]`; with `warn_unused_ignores`, mypy fails if a
rejection ever stops happening, and fails on any accepted call that stops type-checking.
"""

from __future__ import annotations

from anarchon import Every, JobContext, MemoryBackend, MemoryClaimBackend, NewSchedule, Scheduler


async def handler(ctx: JobContext) -> None:
    """A handler."""


lease = Scheduler(backend=MemoryBackend(), lease="6s", heartbeat="1s", block_limit="2m")
claim_only = Scheduler(backend=MemoryClaimBackend())

# Accepted: lease-only options on a lease backend, chained.
lease.every("a", "10s", handler, overlap="skip", max_attempts=3, catch_up=0, retry=True).cron(
    "b", "0 8 * * 1-5", handler, timezone="Europe/Athens", lease="30s", heartbeat="5s"
)


@lease.every("c", "1m", overlap="buffer_one")
async def decorated(ctx: JobContext) -> None:
    """A decorated handler keeps its type."""


# Accepted: common options on a claim-only backend.
claim_only.every("d", "10s", handler, timeout="5s", jitter="10ms").at("e", 1_800_000_000, handler)

# Rejected: lease-only options on a claim-only backend.
claim_only.every("f", "10s", handler, overlap="skip")  # type: ignore[arg-type]
claim_only.cron("g", "* * * * *", handler, max_attempts=2)  # type: ignore[arg-type]
claim_only.at("h", 1_800_000_000, handler, catch_up="5m")  # type: ignore[arg-type]
claim_only.every("i", "10s", lease="30s")  # type: ignore[arg-type]
Scheduler(backend=MemoryClaimBackend(), lease="30s")  # type: ignore[arg-type]
Scheduler(backend=MemoryClaimBackend(), block_limit="1m")  # type: ignore[arg-type]

# Rejected: unknown options and bad option values, on any backend.
lease.every("j", "10s", handler, colour="blue")  # type: ignore[call-overload]
lease.every("k", "10s", handler, overlap="sometimes")  # type: ignore[arg-type]

# Rejected: no backend.
Scheduler()  # type: ignore[call-overload]


async def controls() -> None:
    """Cluster-wide controls need a backend that stores them."""
    await lease.pause("a")
    await lease.resume("a")
    trigger_id: int = await lease.trigger("a")
    assert trigger_id
    await claim_only.pause("d")  # type: ignore[arg-type]
    await claim_only.trigger("d")  # type: ignore[arg-type]


async def stored_schedules() -> None:
    """Schedules as data need a backend that keeps them; a task's handler keeps its type."""

    @lease.task("send-report")
    async def send_report(ctx: JobContext, customer: int) -> None:
        """A task: the run's context, then the schedule's arguments."""

    await send_report(ctx=await _a_context(), customer=1)
    added = await lease.schedules.add("cust-1", "send-report", every="1h", args={"customer": 1},
                                      overlap="skip", timeout="5m")
    await lease.schedules.update(added.id, version=added.version, cron="0 9 * * *", timezone="UTC")
    page = await lease.schedules.list(task="send-report", prefix="cust-")
    assert page.items or page.cursor is None
    claim_only.task("send-report")  # type: ignore[arg-type]
    await lease.schedules.add("x", "t", every="1h", overlap="sometimes")  # type: ignore[arg-type]
    await lease.schedules.add("x", "t", every="1h", colour="blue")  # type: ignore[call-arg]
    answers = await lease.schedules.add_many(
        [NewSchedule("cust-2", "send-report", Every.parse("1h"), args={"customer": 2},
                     options={"timeout": "5m"})],
        replace=True)
    assert all(a.added or a.schedule is None or a.schedule.version for a in answers)
    NewSchedule("x", "t", Every.parse("1h"), options={"overlap": "sometimes"})  # type: ignore[arg-type]
    NewSchedule("x", "t", Every.parse("1h"), options={"colour": "blue"})  # type: ignore[arg-type]


async def _a_context() -> JobContext:
    raise NotImplementedError
