"""`@every`, `@cron`, `@at` and `Scheduler.register`: the same checks as `scheduler.every`."""

from __future__ import annotations

import importlib
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from anarchon import (
    ConfigError,
    Cron,
    DuplicateJobError,
    Every,
    JobContext,
    MemoryBackend,
    MemoryClaimBackend,
    OptionError,
    ScheduleError,
    Scheduler,
    at,
    cron,
    every,
)
from anarchon._decorators import declarations


class ReportsService:
    def __init__(self, label: str = "reports") -> None:
        self.label = label
        self.synced: list[str] = []

    def __repr__(self) -> str:
        return f"ReportsService({self.label!r})"

    @cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
    async def digest(self, ctx: JobContext) -> None:
        """Async: runs on the loop."""

    @every("sync-customers", "100ms", timeout="8s", jitter=0, catch_up=0)
    def sync(self) -> None:
        """Sync: runs in a worker thread."""
        self.synced.append(threading.current_thread().name)

    @property
    def boom(self) -> int:
        raise AssertionError("register() must not evaluate properties")


def test_the_issue_example_registers_and_runs_a_sync_method_in_a_worker_thread() -> None:
    scheduler = Scheduler(backend=MemoryBackend(), lease="2s", heartbeat="0.5s")
    service = ReportsService()
    assert scheduler.register(service) is scheduler
    assert set(scheduler.jobs) == {"weekday-digest", "sync-customers"}
    digest = scheduler.jobs["weekday-digest"]
    assert digest.schedule == Cron("0 8 * * 1-5", "Europe/Athens")
    assert digest.takes_ctx and digest.is_async
    sync = scheduler.jobs["sync-customers"]
    assert sync.schedule == Every(100)
    assert not sync.takes_ctx and not sync.is_async
    assert sync.options.timeout_ms == 8000

    scheduler.start_in_thread()
    try:
        deadline = time.monotonic() + 5
        while len(service.synced) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        assert scheduler.stop_thread(timeout=5)
    assert len(service.synced) >= 2
    assert all(name not in ("MainThread", "anarchon-scheduler") for name in service.synced)


def test_a_decorator_returns_the_function_unchanged() -> None:
    def job() -> None: ...

    assert every("x", "1m")(job) is job
    assert [d.name for d in declarations(job)] == ["x"]


def test_unknown_options_fail_at_the_decorator() -> None:
    with pytest.raises(ConfigError, match="unknown option 'overlpa'"):
        every("x", "10s", overlpa="skip")  # type: ignore[call-arg]


def test_bad_schedules_fail_at_the_decorator() -> None:
    with pytest.raises(ScheduleError, match="invalid cron expression"):
        cron("x", "0 8 * *")
    with pytest.raises(ScheduleError, match="unknown timezone"):
        cron("x", "0 8 * * *", timezone="Mars/Olympus")
    with pytest.raises(ScheduleError):
        at("x", datetime(2030, 1, 1))  # naive


def test_lease_only_options_are_rejected_at_register_on_a_claim_only_backend() -> None:
    class Jobs:
        @every("fine", "10s", timeout="5s")
        def fine(self) -> None: ...

        @every("lease-only", "10s", overlap="replace")
        def needs_lease(self) -> None: ...

    scheduler = Scheduler(backend=MemoryClaimBackend())
    with pytest.raises(ConfigError) as info:
        scheduler.register(Jobs())
    text = str(info.value)
    assert "'overlap' needs a lease backend" in text and "MemoryClaimBackend" in text
    assert "Jobs.needs_lease" in text
    assert scheduler.jobs == {}  # all or nothing: 'fine' was not added either


def test_option_values_are_checked_at_register_like_scheduler_every() -> None:
    class Jobs:
        @every("x", "10s", heartbeat="10s")
        def x(self) -> None: ...

    scheduler = Scheduler(backend=MemoryBackend(), lease="6s", heartbeat="1s")
    with pytest.raises(OptionError, match="heartbeat of 10000 ms must be less than half the lease"):
        scheduler.register(Jobs())
    with pytest.raises(OptionError, match="heartbeat of 10000 ms must be less than half the lease"):
        scheduler.every("x", "10s", lambda: None, heartbeat="10s")


def test_two_objects_declaring_one_name_are_named_both() -> None:
    scheduler = Scheduler(backend=MemoryBackend())
    scheduler.register(ReportsService("eu"))
    with pytest.raises(DuplicateJobError) as info:
        scheduler.register(ReportsService("us"))
    text = str(info.value)
    assert "ReportsService('eu')" in text and "ReportsService('us')" in text
    assert "weekday-digest" in text or "sync-customers" in text


def test_one_object_declaring_a_name_twice_is_named() -> None:
    class Twice:
        @every("same", "10s")
        def a(self) -> None: ...

        @every("same", "20s")
        def b(self) -> None: ...

    with pytest.raises(DuplicateJobError, match=r"Twice.a of .* and by Twice.b of "):
        Scheduler(backend=MemoryBackend()).register(Twice())


def test_a_name_taken_by_scheduler_every_is_named() -> None:
    def other() -> None: ...

    scheduler = Scheduler(backend=MemoryBackend()).every("sync-customers", "1m", other)
    with pytest.raises(DuplicateJobError, match=r"registered by .*other; ReportsService.sync of"):
        scheduler.register(ReportsService())


def test_a_class_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"pass an instance, e.g. scheduler.register\(ReportsService\(\)\)"):
        Scheduler(backend=MemoryBackend()).register(ReportsService)


def test_an_object_without_jobs_is_refused() -> None:
    with pytest.raises(ConfigError, match="declares no job"):
        Scheduler(backend=MemoryBackend()).register(object())


def test_static_methods_functions_and_handler_arity() -> None:
    class Static:
        @staticmethod
        @every("static", "1m")
        def tick(ctx: JobContext) -> None: ...

    @at("once", datetime(2030, 1, 1, tzinfo=UTC))
    async def once() -> None: ...

    scheduler = Scheduler(backend=MemoryBackend()).register(Static()).register(once)
    assert scheduler.jobs["static"].takes_ctx
    assert scheduler.jobs["once"].is_async and not scheduler.jobs["once"].takes_ctx

    class BadArity:
        @every("bad", "1m")
        def bad(self, a: int, b: int) -> None: ...

    with pytest.raises(ConfigError, match="takes 2 arguments"):
        scheduler.register(BadArity())


def test_a_module_registers_the_functions_it_defines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "deco_other_jobs.py").write_text(
        "from anarchon import every\n\n@every('imported', '1m')\ndef imported() -> None: ...\n"
    )
    (tmp_path / "deco_jobs.py").write_text(
        "from anarchon import cron, every\n"
        "from deco_other_jobs import imported\n\n"
        "@cron('nightly', '0 3 * * *', timezone='Europe/Athens', dst_gap='skip')\n"
        "def nightly() -> None: ...\n\n"
        "@every('hourly', '1h', offset='15m', overlap='buffer_one')\n"
        "async def hourly(ctx) -> None: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("deco_jobs")
        scheduler = Scheduler(backend=MemoryBackend()).register(module)
    finally:
        sys.modules.pop("deco_jobs", None)
        sys.modules.pop("deco_other_jobs", None)
    assert set(scheduler.jobs) == {"nightly", "hourly"}
    assert scheduler.jobs["nightly"].schedule == Cron("0 3 * * *", "Europe/Athens", "skip")
    assert scheduler.jobs["hourly"].schedule == Every(3_600_000, 900_000)
    assert scheduler.jobs["hourly"].options.overlap == "buffer_one"
