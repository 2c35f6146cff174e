"""`Metrics`: the observer hooks, counted and timed in a Prometheus registry."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from anarchon import ClaimRequest, JobContext, ReleaseOutcome, hookimpl

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["CLAIM_BUCKETS", "RUN_BUCKETS", "Metrics"]

RUN_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""The run-duration histogram's buckets, seconds: from a quick job to an hour-long one."""
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""The claim-latency histogram's buckets, seconds: one round trip to the store, or a slow one."""


@dataclass(frozen=True, slots=True)
class _Made:
    runs: Counter
    takeovers: Counter
    leases_lost: Counter
    slots_skipped: Counter
    slots_missed: Counter
    last_success: Gauge
    run_duration: Histogram
    claim_latency: Histogram
    children: dict[tuple[object, ...], Any] = field(default_factory=dict)
    """Each metric's child by (the metric's id, *labels): `labels()` validates and locks on every call."""

    def child(self, metric: Counter | Gauge | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, looked up once per label set."""
        key = (id(metric), *labels)
        found = self.children.get(key)
        if found is None:
            found = self.children[key] = metric.labels(*labels)
        return found


class Metrics:
    """anarchon's metrics in one Prometheus registry (the default one unless given), fed by its hooks."""

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 run_buckets: tuple[float, ...] = RUN_BUCKETS,
                 claim_buckets: tuple[float, ...] = CLAIM_BUCKETS) -> None:
        self._registry = registry
        self._run_buckets = run_buckets
        self._claim_buckets = claim_buckets
        self._made: _Made | None = None
        self._lock = threading.Lock()
        # The children the per-claim and per-run hooks use, by their labels: one dict look-up each.
        self._latency: dict[str, Any] = {}
        """The claim-latency histogram's child by namespace."""
        self._ended: dict[tuple[str, str, ReleaseOutcome | None], tuple[Any, Any, Any]] = {}
        """(The runs counter's child, the run-duration histogram's child, the last-success gauge's child
        for a `done` run, else None) by (namespace, job, outcome)."""

    def __repr__(self) -> str:
        return f"Metrics(registry={self._registry!r})"

    @property
    def made(self) -> bool:
        """True once the metrics exist in the registry (on the first event)."""
        return self._made is not None

    def _metrics(self) -> _Made:
        made = self._made
        if made is None:
            with self._lock:
                made = self._made
                if made is None:
                    made = self._made = self._make()
        return made

    def _make(self) -> _Made:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        registry = REGISTRY if self._registry is None else self._registry
        job = ["namespace", "job_name"]
        return _Made(
            runs=Counter("anarchon_runs", "Runs that ended on this instance, by outcome.", [*job, "outcome"],
                         registry=registry),
            takeovers=Counter("anarchon_takeovers", "Slots this instance took over from a holder whose lease "
                              "ran out.", job, registry=registry),
            leases_lost=Counter("anarchon_leases_lost", "Runs on this instance that lost their lease.", job,
                                registry=registry),
            slots_skipped=Counter("anarchon_slots_skipped", "Slots skipped because an older run of the job "
                                  "still ran (overlap).", job, registry=registry),
            slots_missed=Counter("anarchon_slots_missed", "Slots that no replica ran, counted by the replica "
                                 "that found them at its start (it won the job's next slot).", job,
                                 registry=registry),
            last_success=Gauge("anarchon_last_success_timestamp_seconds", "When a run of the job last "
                               "ended done on this instance (Unix time).", job, registry=registry),
            run_duration=Histogram("anarchon_run_duration_seconds", "How long handlers ran.", job,
                                   buckets=self._run_buckets, registry=registry),
            claim_latency=Histogram("anarchon_claim_latency_seconds", "From sending a claim to the store's "
                                    "answer.", ["namespace"], buckets=self._claim_buckets, registry=registry),
        )

    @hookimpl
    def anarchon_claim(self, request: ClaimRequest, latency_ms: float) -> None:
        """Time the claim."""
        child = self._latency.get(request.namespace)
        if child is None:
            m = self._metrics()
            child = self._latency[request.namespace] = m.child(m.claim_latency, request.namespace)
        child.observe(latency_ms / 1000)

    @hookimpl
    def anarchon_run_finished(self, ctx: JobContext, outcome: ReleaseOutcome | None,
                              duration_ms: float | None) -> None:
        """Count the run by its outcome, and time it."""
        name = ctx.task or ctx.name  # (a stored schedule's runs count under its task)
        key = (ctx.namespace, name, outcome)
        children = self._ended.get(key)
        if children is None:
            m = self._metrics()
            children = self._ended[key] = (
                m.child(m.runs, ctx.namespace, name, "lost" if outcome is None else outcome.value),
                m.child(m.run_duration, ctx.namespace, name),
                m.child(m.last_success, ctx.namespace, name) if outcome is ReleaseOutcome.DONE else None)
        children[0].inc()
        if duration_ms is not None:
            children[1].observe(duration_ms / 1000)
        if children[2] is not None:
            children[2].set(time.time())

    @hookimpl
    def anarchon_lease_lost(self, ctx: JobContext) -> None:
        """Count the lost lease."""
        m = self._metrics()
        m.child(m.leases_lost, ctx.namespace, ctx.task or ctx.name).inc()

    @hookimpl
    def anarchon_takeover(self, request: ClaimRequest, task: str | None) -> None:
        """Count the takeover."""
        m = self._metrics()
        m.child(m.takeovers, request.namespace, task or request.job).inc()

    @hookimpl
    def anarchon_slot_skipped(self, request: ClaimRequest, task: str | None) -> None:
        """Count the skipped slot."""
        m = self._metrics()
        m.child(m.slots_skipped, request.namespace, task or request.job).inc()

    @hookimpl
    def anarchon_slots_missed(self, namespace: str, job: str, count: int, task: str | None) -> None:
        """Count the slots no replica ran."""
        m = self._metrics()
        m.child(m.slots_missed, namespace, task or job).inc(count)
