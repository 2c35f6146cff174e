"""Process-wide state: one object owns it, and a test can reset it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from anarchon import (
    MemoryBackend,
    Scheduler,
    backend_classes,
    backend_for_url,
    hookimpl,
    plugin_errors,
    plugin_manager,
)
from anarchon._options import handler_arity
from anarchon._plugins import url_of
from anarchon._process import PROCESS, ProcessState


def wait_until(predicate: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def keeper_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "anarchon-keeper"]


@pytest.fixture
def process() -> Iterator[ProcessState]:
    """`PROCESS` reset, with its plugins given back after the test as they were (the other tests use them)."""
    kept = ("plugin_manager", "plugin_errors", "plugin_dists", "backend_urls")
    saved = {name: getattr(PROCESS, name) for name in kept}
    PROCESS.reset()
    yield PROCESS
    PROCESS.reset()
    for name, value in saved.items():
        setattr(PROCESS, name, value)


def test_a_reset_forgets_the_plugins_and_the_urls_and_loads_the_plugins_again(process: ProcessState) -> None:
    class Broken:
        @hookimpl
        def anarchon_backends(self) -> list[type]:
            raise RuntimeError("plugin bug")

    pm = plugin_manager()
    assert process.plugin_manager is pm
    names = sorted(name for name, _ in pm.list_name_plugin())
    pm.register(Broken(), name="broken-for-reset")
    backend = backend_for_url("memory://")
    assert url_of(backend) == "memory://"
    assert MemoryBackend in backend_classes()
    assert [e.plugin for e in plugin_errors()] == ["broken-for-reset"]

    process.reset()

    assert process.plugin_manager is None
    assert url_of(backend) is None
    assert plugin_errors() == []
    fresh = plugin_manager()
    assert fresh is not pm and process.plugin_manager is fresh
    # The entry points are loaded again; the plugin registered by hand is not.
    assert sorted(name for name, _ in fresh.list_name_plugin()) == names


def test_a_reset_forgets_the_last_handler_read(process: ProcessState) -> None:
    def handler() -> None: ...

    assert handler_arity("job", handler) == (False, False)
    assert process.last_arity == (handler, (False, False))
    process.reset()
    assert process.last_arity is None


def test_a_reset_ends_the_keeper_threads_and_forgets_the_scheduler_threads(process: ProcessState) -> None:
    scheduler = Scheduler(MemoryBackend(), lease="2s", heartbeat="0.5s")
    scheduler.every("tick", "100ms", lambda: None, catch_up=0)
    scheduler.start_in_thread()
    try:
        assert len(keeper_threads()) == 1
        assert len(process.keeper_threads) == 1 and len(process.scheduler_threads) == 1
        process.reset()
        assert wait_until(lambda: keeper_threads() == [])
        assert len(process.keeper_threads) == 0 and len(process.scheduler_threads) == 0
    finally:
        assert scheduler.stop_thread(timeout=5)


def test_a_stopped_keeper_thread_is_forgotten(process: ProcessState) -> None:
    scheduler = Scheduler(MemoryBackend(), lease="2s", heartbeat="0.5s")
    scheduler.every("tick", "100ms", lambda: None, catch_up=0)
    scheduler.start_in_thread()
    assert len(process.keeper_threads) == 1
    assert scheduler.stop_thread(timeout=5)
    assert len(process.keeper_threads) == 0
