"""The job catalogue and the run history, written by schedulers over one in-memory store in virtual time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from anarchon import (
    DEFAULT_HISTORY,
    ERROR_LIMIT,
    CatalogueEntry,
    ConfigError,
    JobContext,
    MemoryBackend,
    MemoryClaimBackend,
    MemoryStore,
    OptionError,
    ReleaseOutcome,
    RunRecord,
    Scheduler,
    to_ms,
)
from anarchon._context import CancelSignal
from anarchon._history import (
    CATALOGUE_REFRESH_MS,
    CATALOGUE_TTL_MS,
    FLUSH_ROWS,
    HistoryWriter,
    fmt_ms,
    next_slot_of,
    schedule_of,
)
from anarchon._schedules import At, Cron, Every
from anarchon.testing import VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)
NS = "anarchon"


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


class CountingBackend(MemoryBackend):
    """Counts the history writes, and can be told to fail them."""

    def __init__(self, store: MemoryStore, *, fail: bool = False) -> None:
        super().__init__(store)
        self.record_calls: list[int] = []
        self.publish_calls = 0
        self.fail = fail

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        self.record_calls.append(len(runs))
        if self.fail:
            raise ConnectionError("history table is gone (injected)")
        await super().record_runs(namespace, runs, keep)

    async def publish_catalogue(self, namespace: str, entries: Sequence[CatalogueEntry], ttl_ms: int) -> None:
        self.publish_calls += 1
        if self.fail:
            raise ConnectionError("catalogue table is gone (injected)")
        await super().publish_catalogue(namespace, entries, ttl_ms)


def test_three_replicas_keep_the_newest_runs_each_slot_once_and_publish_every_job(
    clock: VirtualClock,
) -> None:
    store = MemoryStore(clock)
    backends = [CountingBackend(store) for _ in range(3)]
    reader = MemoryBackend(store)

    async def tick(ctx: JobContext) -> None:
        await asyncio.sleep(0.2)

    async def main() -> tuple[list[RunRecord], list[CatalogueEntry]]:
        schedulers = []
        for k, backend in enumerate(backends):
            s = Scheduler(backend, instance_id=f"i{k}", clock=clock, lease="6s", heartbeat="1s", history=3)
            s.every("tick", "1s", tick, catch_up=0)
            s.cron("never-run", "0 8 * * 1-5", lambda: None, timezone="Europe/Athens")
            await s.start()
            schedulers.append(s)
        await asyncio.sleep(8.5)
        for s in schedulers:
            await s.stop()
        return await reader.history(NS, "tick", 100), await reader.catalogue(NS)

    runs, catalogue = clock.run(main())
    assert 1 <= len(runs) <= 3, runs
    slots = [r.slot for r in runs]
    assert slots == sorted(set(slots), reverse=True), f"newest first, each slot once: {slots}"
    assert slots[0] == T0 + 8000, "the last slot before the stop is recorded"
    assert all(r.outcome == "done" and r.error == "" and r.attempt == 1 for r in runs), runs
    assert all(200 <= r.duration_ms <= 210 and r.slot <= r.started_at < r.slot + 1000 for r in runs), runs
    assert {(e.job, e.instance) for e in catalogue} == {(j, f"i{k}") for j in ("tick", "never-run")
                                                        for k in range(3)}
    cron = next(e for e in catalogue if e.job == "never-run")
    assert cron.kind == "cron" and cron.timezone == "Europe/Athens"
    assert cron.schedule == "cron '0 8 * * 1-5' (Europe/Athens)"
    assert cron.next_slot == to_ms(datetime(2026, 12, 2, 6, 0, tzinfo=UTC)), "08:00 in Athens, UTC+2"
    assert cron.options["lease"] == "6s" and cron.options["overlap"] == "skip"
    tick_entry = next(e for e in catalogue if e.job == "tick")
    assert tick_entry.schedule == "every 1s" and tick_entry.seen_at == T0
    # Ended runs are batched: about one write a second for three replicas' runs, never one per run
    # on every replica at once; and the catalogue is written once at start (no refresh within 8 s).
    assert all(b.publish_calls == 1 for b in backends), [b.publish_calls for b in backends]
    assert sum(sum(b.record_calls) for b in backends) == 8, "every ended run is written once"


def test_the_catalogue_is_refreshed_at_a_low_cadence_and_expires_without_its_scheduler(
    clock: VirtualClock,
) -> None:
    store = MemoryStore(clock)
    backend = CountingBackend(store)
    reader = MemoryBackend(store)

    async def main() -> tuple[int, int, int]:
        s = Scheduler(backend, instance_id="a", clock=clock)
        s.every("hourly", "1h", lambda: None)
        await s.start()
        await asyncio.sleep(CATALOGUE_REFRESH_MS * 5 / 1000 + 1)
        published = backend.publish_calls
        seen = (await reader.catalogue(NS))[0].seen_at
        await s.stop()
        await asyncio.sleep(CATALOGUE_TTL_MS / 1000 - 2)
        still = len(await reader.catalogue(NS))
        await asyncio.sleep(2)
        return published, seen, still + 10 * len(await reader.catalogue(NS))

    published, seen, left = clock.run(main())
    assert published == 6, "at start, then once a minute"
    assert seen == T0 + CATALOGUE_REFRESH_MS * 5
    assert left == 1, "the entry lives for its TTL after the last refresh, then is gone"


def test_a_job_registered_while_running_is_published_soon(clock: VirtualClock) -> None:
    store = MemoryStore(clock)

    async def main() -> list[str]:
        s = Scheduler(MemoryBackend(store), instance_id="a", clock=clock)
        s.every("first", "1h", lambda: None)
        await s.start()
        await asyncio.sleep(1)
        s.every("later", "1h", lambda: None)
        await asyncio.sleep(1)
        jobs = [e.job for e in await MemoryBackend(store).catalogue(NS)]
        await s.stop()
        return jobs

    assert clock.run(main()) == ["first", "later"]


def test_failures_timeouts_and_retries_are_recorded_with_their_error(clock: VirtualClock) -> None:
    store = MemoryStore(clock)

    async def boom(ctx: JobContext) -> None:
        raise ValueError("x" * (ERROR_LIMIT * 2))

    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(10)

    async def flaky(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    async def main() -> dict[str, list[RunRecord]]:
        s = Scheduler(MemoryBackend(store), instance_id="a", clock=clock, lease="6s", heartbeat="1s")
        s.every("boom", "1m", boom, catch_up=0)
        s.every("slow", "1m", slow, timeout="2s", catch_up=0)
        s.every("flaky", "1m", flaky, retry="1s", catch_up=0)
        await s.start()
        await asyncio.sleep(70)
        await s.stop()
        reader = MemoryBackend(store)
        return {job: await reader.history(NS, job, 10) for job in ("boom", "slow", "flaky")}

    got = clock.run(main())
    (boom_run,) = got["boom"]
    assert boom_run.outcome == "failed" and boom_run.error.startswith("ValueError: xxx")
    assert len(boom_run.error) == ERROR_LIMIT
    (slow_run,) = got["slow"]
    assert (slow_run.outcome, slow_run.error) == ("failed", "timeout after 2000 ms")
    assert slow_run.duration_ms == 2000
    assert [(r.attempt, r.outcome, r.error) for r in got["flaky"]] == [
        (2, "done", ""), (1, "handover", "RuntimeError: first attempt fails")]


def test_a_failing_history_write_is_warned_once_and_the_jobs_run_on(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "anarchon")
    store = MemoryStore(clock)
    backend = CountingBackend(store, fail=True)
    ran: list[int] = []

    async def tick(ctx: JobContext) -> None:
        ran.append(ctx.slot)

    async def main() -> None:
        s = Scheduler(backend, instance_id="a", clock=clock, lease="6s", heartbeat="1s")
        s.every("tick", "1s", tick, catch_up=0)
        await s.start()
        await asyncio.sleep(5.5)
        backend.fail = False
        await asyncio.sleep(2)
        await s.stop()

    clock.run(main())
    assert len(ran) >= 7, ran
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings  # one for the runs, one for the catalogue
    assert any("writing the runs" in w and "ConnectionError" in w and "dropped" in w for w in warnings)
    assert any("writing the catalogue" in w for w in warnings)
    infos = [r.getMessage() for r in caplog.records]
    assert any("writing the runs" in m and "works again" in m for m in infos)
    kept = clock.run(MemoryBackend(store).history(NS, "tick", 100))
    assert kept and len(kept) < len(ran), "the runs of failed writes are dropped, later ones are kept"


def test_history_zero_writes_nothing(clock: VirtualClock) -> None:
    store = MemoryStore(clock)

    async def main() -> tuple[list[RunRecord], list[CatalogueEntry]]:
        s = Scheduler(MemoryBackend(store), clock=clock, history=0)
        s.every("tick", "1s", lambda: None, catch_up=0)
        await s.start()
        await asyncio.sleep(3.5)
        await s.stop()
        reader = MemoryBackend(store)
        return await reader.history(NS, "tick", 10), await reader.catalogue(NS)

    assert clock.run(main()) == ([], [])


def test_history_option_defaults_and_refusals() -> None:
    assert Scheduler(MemoryBackend()).history == DEFAULT_HISTORY
    assert Scheduler(MemoryBackend(), history=3).history == 3
    assert Scheduler(MemoryClaimBackend()).history == 0, "nothing recorded on a store without history"
    assert Scheduler(MemoryClaimBackend(), history=0).history == 0
    with pytest.raises(ConfigError, match=r"'history' needs .*MemoryClaimBackend.*history=0"):
        Scheduler(MemoryClaimBackend(), history=5)
    for bad in (-1, 2.5, "100", True):
        with pytest.raises(OptionError, match=rf"invalid history {bad!r}: use a whole number"):
            Scheduler(MemoryBackend(), history=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("schedule", [
    Every(10_000), Every(3_600_000, 900_000), Cron("0 8 * * 1-5", "Europe/Athens"),
    Cron("30 2 * * *", "Europe/Berlin", "skip", "both"), At(T0 + 5000),
])
def test_a_reader_computes_later_slots_from_the_published_fingerprint(schedule: object) -> None:
    assert isinstance(schedule, Every | Cron | At)
    assert schedule_of(schedule.fingerprint) == schedule
    entry = CatalogueEntry(job="j", instance="a", schedule="", kind="", timezone="UTC", options={},
                           next_slot=schedule.next_slot(T0 - 1), fingerprint=schedule.fingerprint)
    later = T0 + 86_400_000 * 3
    assert next_slot_of(entry, later) == schedule.next_slot(later)
    assert next_slot_of(entry, T0 - 1) == entry.next_slot


def test_unknown_fingerprints_give_no_schedule() -> None:
    for fp in ("", "every:x", "cron:not cron@UTC", "at:", "weird:1", "cron:* * * * *@Nowhere/City"):
        assert schedule_of(fp) is None, fp
    assert [fmt_ms(ms) for ms in (250, 1000, 90_000, 60_000, 7_200_000, 86_400_000)] == [
        "250ms", "1s", "90s", "1m", "2h", "1d"]


class SlowHistoryBackend(CountingBackend):
    """Writes runs at `rows_per_s` after `latency_s` a write (in virtual time)."""

    def __init__(self, store: MemoryStore, *, latency_s: float, rows_per_s: float) -> None:
        super().__init__(store)
        self.latency_s, self.rows_per_s = latency_s, rows_per_s

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        await asyncio.sleep(self.latency_s + len(runs) / self.rows_per_s)
        await super().record_runs(namespace, runs, keep)


def _end_runs(clock: VirtualClock, backend: MemoryBackend, runs: int, per_s: int) -> None:
    """`runs` runs of as many one-off jobs end at `per_s` a second; the writer is then stopped."""
    writer = HistoryWriter(backend, namespace=NS, instance_id="a", keep=1, clock=clock,
                           log=logging.getLogger("anarchon.history-test"), jobs=list)

    async def main() -> None:
        task = asyncio.ensure_future(writer.run())
        for k in range(runs // 100):
            for n in range(k * 100, k * 100 + 100):
                ctx = JobContext(f"job-{n}", T0, 1, n, "a", NS, CancelSignal())
                writer.record(ctx, ReleaseOutcome.DONE, None, 1.0)
            await asyncio.sleep(100 / per_s)
        await asyncio.sleep(3)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await writer.close(2)

    clock.run(main())


def test_runs_ending_by_the_thousand_are_written_as_they_end_none_dropped(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    # 30,000 runs end within 3 s (a herd). Gathered for a second each, 10,000 waited at once, and the
    # oldest were dropped; written each time about FLUSH_ROWS wait, every one is kept.
    caplog.set_level(logging.WARNING, "anarchon")
    backend = SlowHistoryBackend(MemoryStore(clock), latency_s=0.05, rows_per_s=50_000)
    _end_runs(clock, backend, 30_000, 10_000)
    assert sum(backend.record_calls) == 30_000, backend.record_calls
    assert max(backend.record_calls) <= 2 * FLUSH_ROWS, backend.record_calls
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_runs_dropped_from_a_full_buffer_are_warned_about_once(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "anarchon")
    backend = SlowHistoryBackend(MemoryStore(clock), latency_s=2.0, rows_per_s=10_000)  # too slow
    _end_runs(clock, backend, 40_000, 20_000)
    written = sum(backend.record_calls)
    assert written < 40_000
    warnings = [r.getMessage() for r in caplog.records if "waited to be written" in r.getMessage()]
    assert len(warnings) == 1 and "dropped: more than 10000 waited to be written" in warnings[0], (
        [r.getMessage() for r in caplog.records])
    assert int(warnings[0].split("history: ")[1].split()[0]) <= 40_000 - written
