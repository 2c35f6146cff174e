"""The public surface: `__all__` is honest, plugins are found, URLs pick backends."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

import anarchon
from anarchon import BackendNotFound, MemoryBackend, MemoryClaimBackend, Scheduler, backend_classes
from anarchon.backends import redact_url

PUBLIC_MODULES = ["anarchon", "anarchon.backends", "anarchon.inspect", "anarchon.testing",
                  "anarchon.hookspecs"]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_honest(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__), "duplicates in __all__"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ lists {attr!r}, which does not exist"
    # Names defined in the module itself, or in its private submodules, are its public surface.
    public = {
        n for n, v in vars(module).items()
        if not n.startswith("_") and isinstance(v, type | type(test_all_is_honest))
        and (v.__module__ == name or v.__module__.startswith(name + "._"))
    }
    missing = public - exported
    assert not missing, f"{name} defines public names missing from __all__: {sorted(missing)}"


def test_public_names_have_docstrings() -> None:
    for attr in anarchon.__all__:
        value = getattr(anarchon, attr)
        if callable(value) and not isinstance(value, type(anarchon.Duration)):
            assert getattr(value, "__doc__", None), f"anarchon.{attr} has no docstring"


def test_from_url_finds_builtin_backends() -> None:
    assert isinstance(Scheduler.from_url("memory://").backend, MemoryBackend)
    assert isinstance(Scheduler.from_url("memory-claim://").backend, MemoryClaimBackend)
    assert MemoryBackend in backend_classes()


def test_unknown_scheme_names_it_and_lists_installed_ones() -> None:
    with pytest.raises(BackendNotFound) as info:
        Scheduler.from_url("cassandra://user:hunter2@db:9042/ks")
    message = str(info.value)
    assert "'cassandra'" in message and "memory" in message
    assert "hunter2" not in message
    assert isinstance(info.value, LookupError)


def test_plugin_autoload_can_be_turned_off() -> None:
    code = "import anarchon; print(sorted(s for c in anarchon.backend_classes() for s in c.url_schemes))"
    env = {**os.environ, "ANARCHON_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['memory', 'memory-claim']"


def test_observer_hooks_see_claims_and_runs() -> None:
    from anarchon import hookimpl, plugin_manager
    from anarchon.testing import VirtualClock

    seen: list[str] = []

    class Recorder:
        @hookimpl
        def anarchon_claim(self, request: object, result: anarchon.ClaimResult) -> None:
            seen.append(f"claim:{result.outcome}")

        @hookimpl
        def anarchon_run_started(self, ctx: anarchon.JobContext) -> None:
            seen.append("started")

        @hookimpl
        def anarchon_run_finished(self, ctx: anarchon.JobContext, outcome: object, error: object) -> None:
            seen.append(f"finished:{outcome}")

    pm = plugin_manager()
    recorder = Recorder()
    pm.register(recorder)
    try:
        clock = VirtualClock()
        scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock)

        async def job() -> None:
            pass

        scheduler.every("x", "1s", job, catch_up=0)

        async def main() -> None:
            async with scheduler:
                await __import__("asyncio").sleep(1.5)

        clock.run(main())
    finally:
        pm.unregister(recorder)
    assert seen == ["claim:won", "started", "finished:done"]


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
    ("postgresql://app:s3cret@db/test?sslmode=require", "postgresql://app:***@db/test?sslmode=require"),
    ("amqp://guest@host/", "amqp://guest@host/"),
    ("nats://host:4222?password=s3cret", "nats://host:4222?password=***"),
    # Nothing to hide: shown exactly as given (no normalising of an empty host away).
    ("sqlite:///relative/jobs.db", "sqlite:///relative/jobs.db"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


async def test_claim_only_helpers_in_anarchon_testing() -> None:
    from anarchon import ClaimOutcome, MemoryStore
    from anarchon.testing import check_lease_only_options_refused, claim_race

    store = MemoryStore()
    results = await claim_race([MemoryClaimBackend(store) for _ in range(4)], [1_000, 2_000])
    assert {slot: [r.outcome for r in rs] for slot, rs in results.items()} == {
        1_000: [ClaimOutcome.WON] + [ClaimOutcome.TAKEN] * 3,
        2_000: [ClaimOutcome.WON] + [ClaimOutcome.TAKEN] * 3,
    }
    check_lease_only_options_refused(MemoryClaimBackend())
