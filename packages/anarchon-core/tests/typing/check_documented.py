"""The documented ways to build schedulers and register jobs, checked by mypy --strict and pyright strict,
and the rejections a user gets on a claim-only backend built the documented way (the end of the file).

The documentation's own code blocks are checked as they are written by tests/docs/test_code_blocks.py;
this file also runs against the installed wheels (tests/release). Names an example leaves to the
reader (a mailer, a billing client) are stubbed first.
"""

from __future__ import annotations

import types
from typing import Any

from opentelemetry import trace
from prometheus_client import CollectorRegistry

import anarchon
from anarchon import Event, JobContext, ReleaseOutcome, Scheduler, cron, every, hookimpl, plugin_manager
from anarchon.inspect import Inspector
from anarchon_nats import NatsBackend, NatsKVBackend
from anarchon_opentelemetry import Tracing
from anarchon_postgres import PostgresBackend
from anarchon_prometheus import Metrics
from anarchon_rabbitmq import RabbitMQBackend
from anarchon_redis import RedisBackend
from anarchon_sqlite import SqliteBackend

# -- what the examples leave to the reader ---------------------------------------------------------


async def send_digest(key: str) -> None:
    """Sends the digest once per key."""


class Mailer:
    """A mail client."""

    async def send_digest(self, key: str) -> None:
        """Sends the digest once per key."""


class Billing:
    """A payment client."""

    async def charge(self, customer: Any, idempotency_key: str) -> None:
        """Charges once per key."""


billing = Billing()


async def due_customers() -> list[Any]:
    """The customers to invoice."""
    return []


class Pager:
    """A paging service."""

    async def send(self, text: str) -> None:
        """Pages whoever is on call."""


pager = Pager()
provider = trace.get_tracer_provider()
my_app = types.SimpleNamespace(jobs=types.ModuleType("my_app.jobs"))
jobs = types.ModuleType("jobs")


# -- README.md, docs/index.md, docs/quickstart.md ---------------------------------------------------


def readme() -> None:
    scheduler = Scheduler(SqliteBackend.from_url("sqlite:///jobs.db"), lease="6s", heartbeat="1s", log=True)

    @scheduler.every("sync", "10s")
    async def sync(ctx: JobContext) -> None:
        print("sync", ctx.scheduled_at.isoformat(), "attempt", ctx.attempt)

    scheduler.run()


def index() -> None:
    scheduler = Scheduler(SqliteBackend.from_url("sqlite:///jobs.db"), lease="30s", heartbeat="5s", log=True)

    @scheduler.cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
    async def digest(ctx: JobContext) -> None:
        await send_digest(key=ctx.idempotency_key())

    scheduler.run()


def quickstart() -> None:
    scheduler = Scheduler(SqliteBackend.from_url("sqlite:///jobs.db"), lease="6s", heartbeat="1s", log=True)

    @scheduler.every("tick", "5s")
    async def tick(ctx: JobContext) -> None:
        print(f"tick {ctx.scheduled_at:%H:%M:%S} attempt {ctx.attempt} on {ctx.instance_id}")

    @scheduler.every("slow", "30s")
    async def slow(ctx: JobContext) -> None:
        for _ in range(20):
            await ctx.sleep(1)


# -- docs/backends/ ----------------------------------------------------------------------------------


def sqlite_page() -> None:
    scheduler = Scheduler(SqliteBackend.from_url("sqlite:///jobs.db"), lease="30s", heartbeat="5s")
    scheduler = Scheduler(SqliteBackend.from_url("sqlite:////var/lib/myapp/jobs.db"))
    scheduler = Scheduler(SqliteBackend("/var/lib/myapp/jobs.db", table="anarchon_jobs", busy_timeout="5s"))
    print(scheduler)


def postgres_page() -> None:
    backend = PostgresBackend.from_url("postgresql://app@db:5432/app?schema=jobs&table=anarchon_jobs")
    backend = PostgresBackend("postgresql://app@db:5432/app", schema="jobs", table="anarchon_jobs")
    scheduler = Scheduler(backend, lease="30s", heartbeat="5s")
    print(scheduler)


def nats_page() -> None:
    scheduler = Scheduler(NatsBackend.from_url("nats://127.0.0.1:4222?stream=ANARCHON&duplicate_window=2m"))
    Scheduler(NatsBackend("nats://127.0.0.1:4222", stream="ANARCHON", duplicate_window="2m"))
    print(scheduler)


def nats_kv_page() -> None:
    backend = NatsKVBackend.from_url("nats-kv://127.0.0.1:4222?bucket=anarchon&lease=30s")
    backend = NatsKVBackend("nats://127.0.0.1:4222", bucket="anarchon", lease="30s")
    scheduler = Scheduler(backend, lease="30s")
    print(scheduler)


def rabbitmq_page() -> None:
    scheduler = Scheduler(RabbitMQBackend.from_url("amqp://guest:guest@127.0.0.1:5672/?horizon=5m"))
    Scheduler(RabbitMQBackend("amqp://guest:guest@127.0.0.1:5672/", prefix="anarchon", horizon="5m"))
    print(scheduler)


# -- docs/decorators.md and the recipes ------------------------------------------------------------


class ReportsService:
    def __init__(self, mailer: Mailer) -> None:
        self.mailer = mailer

    @cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
    async def digest(self, ctx: JobContext) -> None:
        await self.mailer.send_digest(key=ctx.idempotency_key())

    @every("sync-customers", "10s", timeout="8s")
    def sync(self) -> None:
        ...


@cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
def digest(ctx: JobContext) -> None:
    ...


def decorators_page(scheduler: Scheduler[SqliteBackend]) -> None:
    scheduler.register(ReportsService(Mailer()))
    scheduler.register(my_app.jobs)


def fastapi_recipe() -> None:
    class ReportsService:
        @every("refresh-reports", "5m")
        async def refresh(self, ctx: JobContext) -> None:
            print("refreshing reports for", ctx.scheduled_at)

    scheduler = Scheduler(PostgresBackend.from_url("postgresql://app@db/app"), namespace="myapi")
    scheduler.register(ReportsService())


def flask_recipe() -> None:
    scheduler = Scheduler(RedisBackend.from_url("redis://redis:6379/0"), namespace="myflask")
    scheduler.register(jobs)
    scheduler.start_in_thread()
    scheduler.stop_thread(timeout=15)


def exactly_once_recipe() -> None:
    backend = PostgresBackend("postgresql://app@db/app")
    scheduler = Scheduler(backend, lease="30s", heartbeat="5s")

    @scheduler.every("settle", "1m")
    async def settle(ctx: JobContext) -> None:
        print(ctx.token)


def idempotency_recipe(scheduler: Scheduler[PostgresBackend]) -> None:
    @scheduler.cron("invoice-run", "0 2 1 * *", timezone="Europe/Athens")
    async def invoices(ctx: JobContext) -> None:
        for customer in await due_customers():
            await billing.charge(customer, idempotency_key=ctx.idempotency_key(customer.id))


# -- docs/operations.md ---------------------------------------------------------------------------


async def controls_section(scheduler: Scheduler[SqliteBackend]) -> None:
    """docs/operations.md, Controls: on a backend that stores controls."""
    await scheduler.pause("sync-customers")
    await scheduler.resume("sync-customers")
    trigger_id = await scheduler.trigger("sync-customers")
    print(trigger_id)
    await scheduler.pause("nightly-export", force=True)  # not deployed yet: paused from its first slot
    for store in (Scheduler(RedisBackend.from_url("redis://127.0.0.1:6379/0")),
                  Scheduler(PostgresBackend.from_url("postgresql://app@db:5432/app"))):
        await store.pause("sync-customers")


async def jobs_report() -> list[dict[str, object]]:
    """docs/operations.md, From your own code: `anarchon.inspect`."""
    async with Inspector("postgresql://app@db/app", namespace="myapp") as store:
        overview = await store.overview()
        return [{"job": job.name, "paused": job.paused, "next": job.next_slot, "missed": job.missed,
                 "last_outcome": job.last_run.outcome if job.last_run else None} for job in overview.jobs]


def history_section() -> None:
    """docs/operations.md, Status, catalogue and run history."""
    scheduler = Scheduler.from_url("postgresql://app@db/app", history=100)   # the default
    scheduler = Scheduler.from_url("postgresql://app@db/app", history=0)     # write neither
    print(scheduler.history)
    kept: int = Scheduler(PostgresBackend("postgresql://app@db/app"), history=10).history
    print(kept)


def operations_page() -> None:
    scheduler = Scheduler.from_url("redis://localhost")

    @scheduler.on("finished")
    async def alert_on_failure(event: Event) -> None:
        if event.outcome == "failed":
            await pager.send(f"{event.job} failed at slot {event.slot}: {event.error!r}")

    scheduler.on("takeover", lambda e: print(f"{e.instance} took over {e.job} (attempt {e.attempt})"))

    class SlowRuns:
        @hookimpl
        def anarchon_run_finished(self, ctx: JobContext, outcome: ReleaseOutcome | None,
                                  duration_ms: float | None) -> None:
            if duration_ms is not None and duration_ms > 60_000:
                ctx.logger.warning("%s took %.0f s", ctx.name, duration_ms / 1000)

    plugin_manager().register(SlowRuns())

    registry = CollectorRegistry()
    pm = anarchon.plugin_manager()
    pm.set_blocked("prometheus")
    pm.register(Metrics(registry, run_buckets=(1, 10, 60, 600)))
    pm.set_blocked("opentelemetry")
    pm.register(Tracing(tracer_provider=provider))


# -- rejected: lease options on a claim-only scheduler built the documented way -------------------


async def handler(ctx: JobContext) -> None:
    """A handler."""


nats = Scheduler(NatsBackend.from_url("nats://127.0.0.1:4222"))
nats.every("a", "10s", handler, overlap="allow")  # type: ignore[arg-type]
rabbit = Scheduler(RabbitMQBackend.from_url("amqp://guest:guest@127.0.0.1:5672/"), lease="30s")  # type: ignore[arg-type]
Scheduler(RedisBackend.from_url("redis://127.0.0.1:6379/0")).every("b", "10s", handler, overlap="allow")



async def controls_rejected() -> None:
    """Controls on a backend that stores none are rejected."""
    await nats.pause("a")  # type: ignore[arg-type]
    await rabbit.trigger("a")  # type: ignore[arg-type]
