"""anarchon-prometheus against the real prometheus_client: found through the entry-point group, and a
scrape of the registry after real runs on SQLite and through a takeover, a lost lease and a skip."""

from __future__ import annotations

import asyncio
import importlib.metadata
import uuid
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import anarchon
from anarchon import JobContext, MemoryBackend, MemoryStore, Scheduler, to_ms
from anarchon.testing import FaultyBackend, VirtualClock
from anarchon_prometheus import Metrics
from anarchon_prometheus._plugin import metrics as default_metrics


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the registry's exposition text, by name and sorted labels."""
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def run_and_scrape(clock: VirtualClock, main: Coroutine[Any, Any, None], mine: Metrics,
                   registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Run `main` on the virtual clock, then unregister the plugin `mine` and scrape `registry`."""
    try:
        clock.run(main)
    finally:
        anarchon.plugin_manager().unregister(mine)
    return scrape(registry)


def test_found_through_the_entry_point_group() -> None:
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group="anarchon")}
    assert eps["prometheus"].value == "anarchon_prometheus._plugin:metrics"
    assert eps["prometheus"].dist is not None and eps["prometheus"].dist.name == "anarchon-prometheus"
    assert anarchon.plugin_manager().get_plugin("prometheus") is default_metrics
    assert not [e for e in anarchon.plugin_errors() if e.plugin == "prometheus"]


def test_a_scrape_of_the_default_registry_after_real_runs(tmp_path: Path) -> None:
    namespace = f"prom-{uuid.uuid4().hex[:8]}"
    scheduler = Scheduler.from_url(f"sqlite:///{tmp_path}/jobs.db", namespace=namespace, lease="2s",
                                   heartbeat="500ms")
    slots: dict[str, list[int]] = {"ok": [], "broken": []}
    enough = asyncio.Event()

    def ran(job: str, slot: int) -> None:
        slots[job].append(slot)
        if len(slots["ok"]) >= 2 and len(slots["broken"]) >= 2:
            enough.set()

    @scheduler.every("ok", "500ms", catch_up=0)
    async def ok(ctx: JobContext) -> None:
        await asyncio.sleep(0.05)
        ran("ok", ctx.slot)

    @scheduler.every("broken", "500ms", catch_up=0)
    async def broken(ctx: JobContext) -> None:
        ran("broken", ctx.slot)
        raise ValueError("no rows")

    async def main() -> None:
        async with scheduler:
            await asyncio.wait_for(enough.wait(), 30)
        # The stop has waited for the runs in progress: each one counts, as done, failed or handover.

    asyncio.run(main())
    samples = scrape(REGISTRY)

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted({"namespace": namespace, **labels}.items()))), 0.0)

    done = value("anarchon_runs_total", job_name="ok", outcome="done")
    failed = value("anarchon_runs_total", job_name="broken", outcome="failed")
    assert done == len(slots["ok"]) and failed == len(slots["broken"]), samples
    assert value("anarchon_runs_total", job_name="ok", outcome="failed") == 0
    assert value("anarchon_run_duration_seconds_count", job_name="ok") == done
    assert value("anarchon_run_duration_seconds_sum", job_name="ok") >= 0.05 * done
    assert value("anarchon_run_duration_seconds_bucket", job_name="ok", le="0.01") == 0
    assert value("anarchon_run_duration_seconds_bucket", job_name="ok", le="+Inf") == done
    claims = value("anarchon_claim_latency_seconds_count")
    assert claims >= done + failed
    assert value("anarchon_claim_latency_seconds_bucket", le="+Inf") == claims


def test_takeovers_lost_leases_and_skips_in_a_registry_of_ones_own() -> None:
    registry = CollectorRegistry()
    mine = Metrics(registry)
    assert not mine.made
    pm = anarchon.plugin_manager()
    pm.register(mine)
    start = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    clock = VirtualClock(start)
    store = MemoryStore(clock)
    schedulers = [Scheduler(FaultyBackend(MemoryBackend(store)), namespace="ops", instance_id=f"i{k}",
                            lease="6s", heartbeat="1s", clock=clock) for k in range(2)]
    for s in schedulers:
        async def report(ctx: JobContext) -> None:
            await ctx.sleep(20)

        s.every("report", "1m", report, catch_up=0)  # slot 10:01 runs 20 s

    skipper = Scheduler(MemoryBackend(store), namespace="ops", instance_id="i2", clock=clock)
    everyone: list[Scheduler[Any]] = [*schedulers, skipper]

    async def long(ctx: JobContext) -> None:
        await ctx.sleep(25 if ctx.slot == to_ms(start) + 10_000 else 3)

    skipper.every("long", "10s", long, catch_up=0)  # the slot at 10:00:10 runs 25 s

    async def main() -> None:
        for s in everyone:
            await s.start()
        await asyncio.sleep(61)
        winner = next(s for s in schedulers if s.active_runs)
        assert isinstance(winner.backend, FaultyBackend)
        winner.backend.freeze(10)  # its lease runs out: lost there, taken over by the other
        await asyncio.sleep(30)  # the takeover's run ends
        for s in everyone:
            await s.stop()

    samples = run_and_scrape(clock, main(), mine, registry)

    def value(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted({"namespace": "ops", **labels}.items()))), 0.0)

    assert mine.made
    assert value("anarchon_takeovers_total", job_name="report") == 1
    assert value("anarchon_leases_lost_total", job_name="report") == 1
    assert value("anarchon_runs_total", job_name="report", outcome="lost") == 1
    assert value("anarchon_runs_total", job_name="report", outcome="done") == 1  # the takeover's run
    # The slot at 10:00:10 runs 25 s: those at 20 s and 30 s are skipped, the later ones run.
    assert value("anarchon_slots_skipped_total", job_name="long") == 2
    assert value("anarchon_runs_total", job_name="long", outcome="done") >= 5
    assert value("anarchon_claim_latency_seconds_count") >= 10


@pytest.mark.parametrize("bad", [(), (1.0, 0.5)])
def test_bad_buckets_are_refused_by_prometheus_client_on_first_use(bad: tuple[float, ...]) -> None:
    metrics = Metrics(CollectorRegistry(), run_buckets=bad)
    with pytest.raises(ValueError, match=r"[Bb]ucket"):
        metrics._metrics()


def test_one_job_name_in_two_namespaces_and_outcomes_counts_under_each_label_set() -> None:
    """The per-run and per-claim hooks look their series up by all of their labels: a job of the same
    name in another namespace, or a run with another outcome, never lands in an earlier run's series."""
    registry = CollectorRegistry()
    mine = Metrics(registry)
    pm = anarchon.plugin_manager()
    pm.register(mine)
    clock = VirtualClock(datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
    store = MemoryStore(clock)
    schedulers = [Scheduler(MemoryBackend(store), namespace=ns, instance_id="i0", clock=clock)
                  for ns in ("blue", "green")]
    runs = {"blue": 0, "green": 0}

    def handler(namespace: str) -> Any:
        async def report(ctx: JobContext) -> None:
            runs[namespace] += 1
            if namespace == "green" and runs[namespace] % 2 == 0:
                raise ValueError("every other green run fails")
        return report

    for s in schedulers:
        s.every("report", "10s", handler(s.namespace), catch_up=0)

    async def main() -> None:
        for s in schedulers[:1]:
            await s.start()
        await asyncio.sleep(35)  # blue runs first, so its series are looked up first
        await schedulers[1].start()
        await asyncio.sleep(40)
        for s in schedulers:
            await s.stop()

    samples = run_and_scrape(clock, main(), mine, registry)

    def value(name: str, namespace: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted({"namespace": namespace, **labels}.items()))), 0.0)

    assert runs["blue"] >= 6 and runs["green"] >= 3
    assert value("anarchon_runs_total", "blue", job_name="report", outcome="done") == runs["blue"]
    assert value("anarchon_runs_total", "blue", job_name="report", outcome="failed") == 0
    green_failed = runs["green"] // 2
    assert value("anarchon_runs_total", "green", job_name="report", outcome="failed") == green_failed
    green_done = runs["green"] - green_failed
    assert value("anarchon_runs_total", "green", job_name="report", outcome="done") == green_done
    for namespace in runs:
        assert value("anarchon_run_duration_seconds_count", namespace, job_name="report") == runs[namespace]
        assert value("anarchon_claim_latency_seconds_count", namespace) == runs[namespace]


def test_stored_schedules_count_under_their_task_not_one_series_each() -> None:
    registry = CollectorRegistry()
    mine = Metrics(registry)
    anarchon.plugin_manager().register(mine)
    clock = VirtualClock(datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
    scheduler = Scheduler(MemoryBackend(clock=clock), instance_id="i0", clock=clock)
    ran: list[str] = []

    @scheduler.task("send-report")
    async def send_report(ctx: JobContext, customer: int) -> None:
        assert ctx.task == "send-report"
        ran.append(ctx.name)

    async def main() -> None:
        async with scheduler:
            for customer in range(50):
                await scheduler.schedules.add(f"report-{customer}", "send-report", every="10s",
                                              args={"customer": customer})
            await asyncio.sleep(25)

    samples = run_and_scrape(clock, main(), mine, registry)
    assert len(set(ran)) == 50 and len(ran) >= 100
    runs = {labels: v for (name, labels), v in samples.items() if name == "anarchon_runs_total"}
    assert runs == {(("job_name", "send-report"), ("namespace", "anarchon"), ("outcome", "done")): len(ran)}
    durations = [labels for (name, labels) in samples if name == "anarchon_run_duration_seconds_count"]
    assert durations == [(("job_name", "send-report"), ("namespace", "anarchon"))]
