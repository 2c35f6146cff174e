"""anarchon-opentelemetry against the real OpenTelemetry SDK: found through the entry-point group, and
one span per real run on SQLite in an InMemorySpanExporter, with the run's attributes."""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, StatusCode
from opentelemetry.util._once import Once

import anarchon
from anarchon import JobContext, MemoryBackend, MemoryStore, Scheduler
from anarchon.testing import FaultyBackend, VirtualClock
from anarchon_opentelemetry import Tracing
from anarchon_opentelemetry._plugin import tracing as default_tracing


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """A `Tracing` on a provider of its own, registered for the test; its spans land in the exporter."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing = Tracing(tracer_provider=provider)
    pm = anarchon.plugin_manager()
    pm.register(tracing)
    yield spans
    pm.unregister(tracing)
    assert tracing.open_spans == 0


def test_found_through_the_entry_point_group() -> None:
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group="anarchon")}
    assert eps["opentelemetry"].value == "anarchon_opentelemetry._plugin:tracing"
    dist = eps["opentelemetry"].dist
    assert dist is not None and dist.name == "anarchon-opentelemetry"
    assert anarchon.plugin_manager().get_plugin("opentelemetry") is default_tracing
    assert not [e for e in anarchon.plugin_errors() if e.plugin == "opentelemetry"]


def test_a_span_per_real_run_with_its_attributes(exporter: InMemorySpanExporter, tmp_path: Path) -> None:
    scheduler = Scheduler.from_url(f"sqlite:///{tmp_path}/jobs.db", namespace="traced", instance_id="web-1",
                                   lease="2s", heartbeat="500ms")
    ran: list[tuple[str, int]] = []
    both = asyncio.Event()
    tracer = trace.get_tracer("the-app", tracer_provider=exporter_provider(exporter))

    @scheduler.every("ok", "500ms", catch_up=0)
    async def ok(ctx: JobContext) -> None:
        with tracer.start_as_current_span("fetch"):  # the handler's own span: a child of the run's
            await asyncio.sleep(0.02)
        ran.append(("ok", ctx.slot))
        if {job for job, _ in ran} == {"ok", "broken"}:
            both.set()

    @scheduler.every("broken", "500ms", catch_up=0)
    def broken(ctx: JobContext) -> None:
        ran.append(("broken", ctx.slot))
        raise ValueError("no rows")

    async def main() -> None:
        async with scheduler:
            await asyncio.wait_for(both.wait(), 30)  # an "ok" run after a "broken" one

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if s.name.startswith("run ")]
    assert sorted((s.name, s.attributes["anarchon.slot"]) for s in runs) == sorted(  # type: ignore[index]
        (f"run {job}", slot) for job, slot in ran)
    for span in runs:
        attrs = dict(span.attributes or {})
        assert attrs["anarchon.namespace"] == "traced" and attrs["anarchon.instance"] == "web-1"
        assert attrs["anarchon.attempt"] == 1
        if span.name == "run ok":
            assert attrs["anarchon.outcome"] == "done" and span.status.status_code is StatusCode.UNSET
        else:
            assert attrs["anarchon.outcome"] == "failed" and span.status.status_code is StatusCode.ERROR
            assert span.status.description == "ValueError: no rows"
            assert [e.name for e in span.events] == ["exception"]
            assert span.events[0].attributes["exception.type"] == "ValueError"  # type: ignore[index]
    fetches = [s for s in spans if s.name == "fetch"]
    ok_runs = {s.context.span_id: s for s in runs if s.name == "run ok"}
    assert fetches and all(f.parent is not None and f.parent.span_id in ok_runs for f in fetches)
    assert all(f.context.trace_id == ok_runs[f.parent.span_id].context.trace_id  # type: ignore[union-attr]
               for f in fetches)


def exporter_provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def test_a_lost_lease_is_an_event_on_the_span(exporter: InMemorySpanExporter) -> None:
    clock = VirtualClock(datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
    store = MemoryStore(clock)
    schedulers = [Scheduler(FaultyBackend(MemoryBackend(store)), instance_id=f"i{k}", lease="6s",
                            heartbeat="1s", clock=clock) for k in range(2)]
    for s in schedulers:
        async def report(ctx: JobContext) -> None:
            await ctx.sleep(20)

        s.every("report", "1m", report, catch_up=0)

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(61)
        winner = next(s for s in schedulers if s.active_runs)
        assert isinstance(winner.backend, FaultyBackend)
        winner.backend.freeze(10)
        await asyncio.sleep(30)
        for s in schedulers:
            await s.stop()

    clock.run(main())
    spans = [dict(s.attributes or {}) for s in exporter.get_finished_spans()]
    assert sorted((a["anarchon.attempt"], a["anarchon.outcome"]) for a in spans) == [(1, "lost"), (2, "done")]
    lost = next(s for s in exporter.get_finished_spans()
                if (s.attributes or {})["anarchon.outcome"] == "lost")
    assert [e.name for e in lost.events] == ["lease lost"]
    assert dict(lost.events[0].attributes or {}) == {
        "reason": "the store did not answer the renewal before the lease ended"}


def test_runs_before_a_global_provider_is_set_go_untraced_and_later_runs_get_spans(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a global provider a run's current span is left as it was; once the app sets one (after
    the scheduler started), the next run gets its span, current in its handler."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())  # as if no provider was ever set
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    pm = anarchon.plugin_manager()
    pm.unregister(name="opentelemetry")  # the default plugin traces to the global provider too
    tracing = Tracing()
    pm.register(tracing)
    clock = VirtualClock(datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
    scheduler = Scheduler(MemoryBackend(MemoryStore(clock)), instance_id="i0", clock=clock)
    seen: list[tuple[int, Span, int]] = []

    @scheduler.every("report", "1m", catch_up=0)
    async def report(ctx: JobContext) -> None:
        seen.append((ctx.slot, trace.get_current_span(), tracing.open_spans))

    spans = InMemorySpanExporter()

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(61)
            assert len(seen) == 1
            trace.set_tracer_provider(exporter_provider(spans))
            await asyncio.sleep(60)

    try:
        clock.run(main())
    finally:
        pm.unregister(tracing)
        pm.register(default_tracing, name="opentelemetry")
    assert len(seen) == 2
    (_, untraced, open_before), (slot, current, open_after) = seen
    assert untraced is trace.INVALID_SPAN and open_before == 0
    [run] = spans.get_finished_spans()
    assert run.name == "run report" and (run.attributes or {})["anarchon.slot"] == slot
    assert current.get_span_context() == run.context and open_after == 1
    assert tracing.open_spans == 0


def test_a_stored_schedules_span_is_named_by_its_task(exporter: InMemorySpanExporter) -> None:
    clock = VirtualClock(datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock)

    @scheduler.task("send-report")
    async def send_report(ctx: JobContext, customer: int) -> None:
        """One customer's report."""

    async def main() -> None:
        async with scheduler:
            await scheduler.schedules.add("report-7", "send-report", every="10s", args={"customer": 7})
            await asyncio.sleep(12)

    clock.run(main())
    spans = exporter.get_finished_spans()
    assert spans and {s.name for s in spans} == {"run send-report"}
    attributes = dict(spans[0].attributes or {})
    assert (attributes["anarchon.job"], attributes["anarchon.task"]) == ("report-7", "send-report")
