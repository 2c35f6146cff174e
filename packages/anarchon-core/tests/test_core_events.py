"""Listeners (`Scheduler.on`) and the observer hooks: one event path, and a failure never hurts a run."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from anarchon import (
    ConfigError,
    Event,
    JobContext,
    MemoryBackend,
    MemoryStore,
    ReleaseOutcome,
    Scheduler,
    hookimpl,
    plugin_manager,
    to_ms,
)
from anarchon.testing import FaultyBackend, VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


def test_listeners_see_a_run_from_claim_to_finish(clock: VirtualClock) -> None:
    scheduler = Scheduler(MemoryBackend(clock=clock), instance_id="i0", namespace="ops", clock=clock)
    seen: list[Event] = []
    awaited: list[Event] = []

    async def flaky(ctx: JobContext) -> None:
        await ctx.sleep(0.25)
        if ctx.slot == T0 + 2000:
            raise ValueError("no rows")

    scheduler.every("flaky", "1s", flaky, catch_up=0)
    scheduler.on("claim", seen.append)
    scheduler.on("started", seen.append)

    @scheduler.on("finished")
    async def finished(event: Event) -> None:
        await asyncio.sleep(0.1)  # a coroutine listener runs as a task of its own
        awaited.append(event)

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(2.5)

    clock.run(main())
    claims = [e for e in seen if e.name == "claim"]
    assert [(e.slot, e.outcome, e.attempt) for e in claims] == [(T0 + 1000, "won", 1), (T0 + 2000, "won", 1)]
    assert all(e.latency_ms is not None and e.latency_ms >= 0 for e in claims)
    assert all((e.namespace, e.instance, e.job) == ("ops", "i0", "flaky") for e in seen + awaited)
    started = [e for e in seen if e.name == "started"]
    assert [e.slot for e in started] == [T0 + 1000, T0 + 2000]
    assert all(isinstance(e.context, JobContext) and e.context.slot == e.slot for e in started)
    assert [(e.slot, e.outcome, type(e.error).__name__) for e in awaited] == [
        (T0 + 1000, "done", "NoneType"), (T0 + 2000, "failed", "ValueError")]
    assert all(e.duration_ms is not None and 250 <= e.duration_ms < 300 for e in awaited)


def test_takeover_and_lease_lost_events(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    schedulers = [Scheduler(FaultyBackend(MemoryBackend(store)), instance_id=f"i{k}", lease="6s",
                            heartbeat="1s", clock=clock) for k in range(2)]
    events: list[tuple[str, str, int, str | None]] = []
    for s in schedulers:
        async def long(ctx: JobContext) -> None:
            await ctx.sleep(20)

        s.every("report", "1m", long, catch_up=0)
        s.on("takeover", lambda e: events.append((e.name, e.instance, e.attempt, e.reason)))
        s.on("lease_lost", lambda e: events.append((e.name, e.instance, e.attempt, e.reason)))
    holders: list[str] = []

    async def main() -> None:
        for s in schedulers:
            await s.start()
        await asyncio.sleep(61)
        winner = next(s for s in schedulers if s.active_runs)
        holders.append(winner.instance_id)
        assert isinstance(winner.backend, FaultyBackend)
        winner.backend.freeze(10)
        await asyncio.sleep(12)
        for s in schedulers:
            await s.stop()

    clock.run(main())
    other = "i1" if holders == ["i0"] else "i0"
    # The frozen holder gives its run up when its lease ends by its own clock, before the takeover.
    assert [e[:3] for e in events] == [("lease_lost", holders[0], 1), ("takeover", other, 2)], events
    assert events[0][3] == "the store did not answer the renewal before the lease ended"


def test_skipped_event_for_an_overlap_skip_only(clock: VirtualClock) -> None:
    store = MemoryStore(clock)
    skipped: list[int] = []
    buffered: list[int] = []
    skip = Scheduler(MemoryBackend(store), clock=clock)
    buffer = Scheduler(MemoryBackend(store), clock=clock)

    async def long(ctx: JobContext) -> None:
        await ctx.sleep(25 if ctx.slot == T0 + 10_000 else 3)

    skip.every("skip", "10s", long, overlap="skip", catch_up=0)
    buffer.every("buffer", "10s", long, overlap="buffer_one", catch_up=0)
    skip.on("skipped", lambda e: skipped.append(e.slot) if e.reason == "overlap" else None)
    buffer.on("skipped", lambda e: buffered.append(e.slot))

    async def main() -> None:
        await asyncio.sleep(9)
        async with skip, buffer:
            await asyncio.sleep(33)

    clock.run(main())
    assert skipped == [T0 + 20_000, T0 + 30_000], (skipped, buffered)
    # buffer_one: slot 20's claims answer skipped every heartbeat until slot 10 ends, then it runs (and
    # slot 30 after it): a buffered slot is not a skipped one.
    assert buffered == [], (skipped, buffered)


def test_a_failing_listener_is_logged_and_the_scheduler_goes_on(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock)
    ran: list[int] = []
    after: list[str] = []

    @scheduler.every("tick", "1s", catch_up=0)
    async def tick(ctx: JobContext) -> None:
        ran.append(ctx.slot)


    def broken(event: Event) -> None:
        raise RuntimeError("listener bug")

    async def broken_async(event: Event) -> None:
        raise LookupError("async listener bug")

    scheduler.on("started", broken)
    scheduler.on("finished", broken_async)
    scheduler.on("finished", lambda e: after.append(e.outcome or ""))

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(3.5)

    with caplog.at_level(logging.ERROR, logger="anarchon"):
        clock.run(main())
    assert ran == [T0 + 1000, T0 + 2000, T0 + 3000]
    assert after == ["done"] * 3
    failures = [r for r in caplog.records if "listener" in r.getMessage()]
    assert any("broken" in r.getMessage() and "'started'" in r.getMessage() for r in failures)
    assert any(r.exc_info and isinstance(r.exc_info[1], LookupError) for r in failures)
    assert len(failures) == 6


def test_on_refuses_an_unknown_event_and_off_removes() -> None:
    scheduler = Scheduler(MemoryBackend())
    with pytest.raises(ConfigError, match=r"unknown event 'finish': use one of claim, finished, lease_lost"):
        scheduler.on("finish", print)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match="is not callable"):
        scheduler.on("finished", "print")  # type: ignore[call-overload]

    def fn(event: Event) -> None:
        pass

    assert scheduler.on("finished", fn) is fn
    assert scheduler.off("finished", fn) is True
    assert scheduler.off("finished", fn) is False


def test_plugins_and_listeners_share_one_path_and_fail_alone(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    class Broken:
        @hookimpl
        def anarchon_run_finished(self, ctx: JobContext) -> None:
            raise RuntimeError("plugin bug")

    class Partial:
        """Takes a subset of the hook's arguments, as pluggy allows."""

        @hookimpl
        def anarchon_run_finished(self, outcome: ReleaseOutcome | None, duration_ms: float | None) -> None:
            seen.append(f"plugin:{outcome}:{duration_ms}")

        @hookimpl
        def anarchon_claim(self, latency_ms: float) -> None:
            seen.append(f"claim:{latency_ms >= 0}")

    pm = plugin_manager()
    plugins = [Broken(), Partial()]
    for p in plugins:
        pm.register(p)
    try:
        scheduler = Scheduler(MemoryBackend(clock=clock), clock=clock)
        scheduler.every("x", "1s", lambda: None, catch_up=0)
        scheduler.on("finished", lambda e: seen.append(f"listener:{e.outcome}"))

        async def main() -> None:
            async with scheduler:
                await asyncio.sleep(1.5)

        with caplog.at_level(logging.ERROR, logger="anarchon"):
            clock.run(main())
    finally:
        for p in plugins:
            pm.unregister(p)
    assert seen == ["claim:True", "plugin:done:0.0", "listener:done"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("plugin" in m and "anarchon_run_finished" in m for m in messages), messages



def test_plugins_and_listeners_added_or_removed_later_are_seen_at_once() -> None:
    # Which hooks have a receiver is cached; registering or unregistering a plugin, and adding or
    # removing a listener, must each take effect from the next event.
    from anarchon._events import Listeners, Observers
    from anarchon.backends import ClaimOutcome, ClaimRequest, ClaimResult

    seen: list[str] = []

    class Late:
        @hookimpl
        def anarchon_takeover(self, request: ClaimRequest) -> None:
            seen.append(f"plugin:{request.slot}")

    def listener(event: Event) -> None:
        seen.append(f"listener:{event.slot}")

    pm = plugin_manager()
    before = [(impl.plugin, impl.plugin_name) for impl in pm.hook.anarchon_takeover.get_hookimpls()]
    for plugin, _ in before:  # e.g. anarchon-opentelemetry, when installed: not part of this test
        pm.unregister(plugin)
    listeners = Listeners(logging.getLogger("anarchon"))
    observers = Observers(pm, listeners, logging.getLogger("anarchon"))
    late = Late()

    def event(slot: int) -> None:
        request = ClaimRequest("ns", "job", slot, "me")
        result = ClaimResult(ClaimOutcome.WON, "job", slot)
        observers.emit("anarchon_takeover", request=request, result=result, task=None)

    try:
        assert not observers.wants("anarchon_takeover")
        event(1)
        pm.register(late)
        assert observers.wants("anarchon_takeover")
        event(2)
        listeners.add("takeover", listener)
        event(3)
        pm.unregister(late)
        assert observers.wants("anarchon_takeover")
        event(4)
        assert listeners.remove("takeover", listener)
        assert not observers.wants("anarchon_takeover")
        event(5)
    finally:
        if pm.is_registered(late):
            pm.unregister(late)
        for plugin, name in before:
            pm.register(plugin, name=name)
    assert seen == ["plugin:2", "plugin:3", "listener:3", "listener:4"]


def test_hooks_go_through_pluggy_so_its_order_and_wrappers_hold(caplog: pytest.LogCaptureFixture) -> None:
    # Each plugin is called through pluggy on its own: `tryfirst` orders the calls, a wrapper wraps
    # each plugin's call, and a plugin that raises is named while the others still run.
    from collections.abc import Generator

    from anarchon._events import Listeners, Observers
    from anarchon.backends import ClaimOutcome, ClaimRequest, ClaimResult

    seen: list[str] = []

    class First:
        @hookimpl(tryfirst=True)
        def anarchon_takeover(self, request: ClaimRequest) -> None:
            seen.append(f"first:{request.slot}")

    class Broken:
        @hookimpl
        def anarchon_takeover(self, result: ClaimResult) -> None:
            seen.append("broken")
            raise RuntimeError("plugin bug")

    class Last:
        @hookimpl(trylast=True)
        def anarchon_takeover(self, request: ClaimRequest, result: ClaimResult) -> None:
            seen.append(f"last:{result.outcome}")

    class Wrapper:
        @hookimpl(wrapper=True)
        def anarchon_takeover(self) -> Generator[None, list[object], list[object]]:
            seen.append("(")
            try:
                return (yield)
            finally:
                seen.append(")")

    pm = plugin_manager()
    before = [(impl.plugin, impl.plugin_name) for impl in pm.hook.anarchon_takeover.get_hookimpls()]
    for plugin, _ in before:  # e.g. anarchon-opentelemetry, when installed: not part of this test
        pm.unregister(plugin)
    plugins = {"last": Last(), "first": First(), "broken": Broken(), "wrapper": Wrapper()}
    observers = Observers(pm, Listeners(logging.getLogger("anarchon")), logging.getLogger("anarchon"))
    try:
        for name, plugin in plugins.items():  # the last registered is called first, tryfirst aside
            pm.register(plugin, name=name)
        with caplog.at_level(logging.ERROR, logger="anarchon"):
            observers.emit("anarchon_takeover", request=ClaimRequest("ns", "job", 7, "me"),
                           result=ClaimResult(ClaimOutcome.WON, "job", 7), task=None)
    finally:
        for plugin in plugins.values():
            pm.unregister(plugin)
        for plugin, name in before:
            pm.register(plugin, name=name)
    assert seen == ["(", "first:7", ")", "(", "broken", ")", "(", "last:won", ")"]
    assert [r.getMessage() for r in caplog.records] == ["plugin 'broken' failed in hook anarchon_takeover"]
