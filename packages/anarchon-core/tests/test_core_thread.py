"""`start_in_thread` / `stop_thread`: a scheduler on its own loop for sync apps, and fork refusal."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable

import pytest

from anarchon import BackendUnavailable, JobContext, JobStatus, MemoryBackend, MemoryStore, Scheduler


def wait_until(predicate: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_runs_from_sync_code_and_stops_gracefully() -> None:
    seen: list[int] = []
    scheduler = Scheduler(backend=MemoryBackend(), lease="2s", heartbeat="0.5s")
    scheduler.every("tick", "100ms", lambda ctx: seen.append(ctx.slot), jitter=0, catch_up=0)
    thread = scheduler.start_in_thread()
    assert thread.daemon and thread.is_alive() and scheduler.running
    with pytest.raises(RuntimeError, match="already running in thread"):
        scheduler.start_in_thread()
    assert wait_until(lambda: len(seen) >= 2)
    assert scheduler.stop_thread(timeout=5)
    assert not thread.is_alive() and not scheduler.running
    assert seen == sorted(set(seen))
    # And again: a stopped scheduler starts on a new thread.
    scheduler.start_in_thread()
    count = len(seen)
    assert wait_until(lambda: len(seen) > count)
    assert scheduler.stop_thread()


def test_a_stop_hands_an_unfinished_run_over() -> None:
    store = MemoryStore()
    started = threading.Event()

    async def long(ctx: JobContext) -> None:
        started.set()
        await ctx.sleep(30)  # returns early, raising RunCancelled, on stop

    scheduler = Scheduler(backend=MemoryBackend(store), lease="2s", heartbeat="0.5s", stop_timeout="2s")
    scheduler.every("long", "100ms", long, jitter=0, catch_up=0)
    scheduler.start_in_thread()
    assert started.wait(5)
    assert scheduler.stop_thread(timeout=5)
    state = asyncio.run(MemoryBackend(store).inspect("anarchon", "long"))
    assert state is not None and state.status is JobStatus.RELEASED


def test_a_start_error_is_raised_in_the_caller() -> None:
    class Down(MemoryBackend):
        async def open(self) -> None:
            raise BackendUnavailable("cannot reach memory://down")

    scheduler = Scheduler(backend=Down())
    with pytest.raises(BackendUnavailable, match="memory://down"):
        scheduler.start_in_thread()
    assert not scheduler.running
    assert scheduler.stop_thread()


def test_a_start_error_carries_its_chain_only_under_debug_logging() -> None:
    class Refused(MemoryBackend):
        async def open(self) -> None:
            try:
                raise ConnectionRefusedError(111, "Connect call failed")
            except OSError as exc:
                raise BackendUnavailable("cannot reach memory://down: Connect call failed") from exc

    log = logging.getLogger("anarchon.test.thread")
    scheduler = Scheduler(backend=Refused(), log=log)
    with pytest.raises(BackendUnavailable) as info:
        scheduler.start_in_thread()
    assert info.value.__cause__ is None and info.value.__suppress_context__
    log.setLevel(logging.DEBUG)
    try:
        with pytest.raises(BackendUnavailable) as info:
            scheduler.start_in_thread()
    finally:
        log.setLevel(logging.NOTSET)
    assert isinstance(info.value.__cause__, ConnectionRefusedError)


def _in_child(body: Callable[[], str]) -> str:
    """Run `body` in a forked child; return what it returned (or the exception it raised)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            text = body()
        except BaseException as exc:
            text = f"{type(exc).__name__}: {exc}"
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        out = f.read()
    assert os.waitstatus_to_exitcode(status) == 0
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_after_start_is_refused_with_the_post_fork_recipe() -> None:
    scheduler = Scheduler(backend=MemoryBackend())
    scheduler.every("tick", "1m", lambda: None)
    scheduler.start_in_thread()
    try:
        out = _in_child(lambda: str(scheduler.start_in_thread()))
        assert out.startswith("RuntimeError: ")
        assert f"forked from pid {os.getpid()}" in out and "post_fork" in out and "gunicorn" in out
        out = _in_child(lambda: str(scheduler.stop_thread()))
        assert out.startswith("RuntimeError: ") and "post_fork" in out
    finally:
        assert scheduler.stop_thread()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_scheduler_built_before_a_fork_gets_its_own_instance_id_in_the_child() -> None:
    scheduler = Scheduler(backend=MemoryBackend())
    scheduler.every("tick", "1m", lambda: None)
    parent_id = scheduler.instance_id

    def child() -> str:
        scheduler.start_in_thread()
        try:
            return scheduler.instance_id
        finally:
            scheduler.stop_thread()

    child_id = _in_child(child)
    assert child_id != parent_id and f":{os.getpid()}:" in parent_id and f":{os.getpid()}:" not in child_id


def test_a_handler_that_stops_its_scheduler_ends_the_thread() -> None:
    # A one-off job that shuts its scheduler down: the thread ends as well, instead of idling until
    # stop_thread(), and the run that asked is recorded done.
    store = MemoryStore()
    scheduler = Scheduler(backend=MemoryBackend(store), lease="2s", heartbeat="0.5s", stop_timeout="30s")

    async def last(ctx: JobContext) -> None:
        await scheduler.stop()

    scheduler.every("last", "100ms", last, jitter=0, catch_up=0)
    thread = scheduler.start_in_thread()
    assert wait_until(lambda: not thread.is_alive(), timeout=10), "the thread still runs"
    assert not scheduler.running
    state = asyncio.run(MemoryBackend(store).inspect("anarchon", "last"))
    assert state is not None and state.status is JobStatus.DONE and state.attempt == 1, state
