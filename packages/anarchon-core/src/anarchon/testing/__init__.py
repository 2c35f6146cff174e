"""Virtual time and fault injection, for testing schedulers without sleeping in real time.

    clock = VirtualClock(start=datetime(2026, 1, 1, tzinfo=UTC))
    clock.run(main())          # asyncio sleeps and timeouts inside `main` take no real time

The event loop's own clock is virtual: when every task is waiting, the loop jumps to the next
timer at once. Handlers that run in worker threads still take real time; use async handlers in
virtual-time tests.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, cast
from urllib.parse import urlsplit

from .._schedules import to_ms
from ..backends import (
    AnnounceBackend,
    Capability,
    CatalogueEntry,
    ClaimBackend,
    ClaimRequest,
    ClaimResult,
    ControlBackend,
    ForgetBackend,
    HistoryBackend,
    InspectBackend,
    JobControl,
    JobState,
    Lease,
    LeaseBackend,
    ReleaseCallback,
    ReleaseOutcome,
    RunRecord,
    ScheduleBackend,
    ScheduleRecord,
    ScheduleWrite,
    ScheduleWriteResult,
    WinsCallback,
)

if TYPE_CHECKING:
    from .._scheduler import Scheduler

__all__ = [
    "LEASE_ONLY_OPTIONS",
    "EngineProbe",
    "FaultyBackend",
    "ManualClock",
    "SkewedClock",
    "VirtualClock",
    "VirtualTimeLoop",
    "check_lease_only_options_refused",
    "check_start_fails_clearly",
    "claim_race",
    "crash",
    "probe",
    "require_service",
    "unused_port",
]

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real I/O without blocking; a wait for timers advances the virtual clock instead."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            # Nothing scheduled: only another thread can wake the loop.
            return super().select(None)
        self._clock.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is a `VirtualClock`."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(_VirtualSelector(clock))
        self._vclock = clock

    def time(self) -> float:
        return self._vclock.seconds


class VirtualClock:
    """A wall clock that starts at `start` and advances only as the virtual loop waits."""

    def __init__(self, start: datetime | int = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self.start_ms = to_ms(start) if isinstance(start, datetime) else start
        self.seconds = 0.0
        """Virtual seconds since start: the loop's `time()`."""

    def now_ms(self) -> int:
        """The virtual wall time, epoch ms."""
        return self.start_ms + round(self.seconds * 1000)

    def advance(self, seconds: float) -> None:
        """Move time forward (the loop does this itself while it waits)."""
        if seconds > 0:
            self.seconds += seconds

    def new_loop(self) -> VirtualTimeLoop:
        """Create an event loop driven by this clock."""
        return VirtualTimeLoop(self)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` to completion on a virtual-time loop, like `asyncio.run`."""
        with asyncio.Runner(loop_factory=self.new_loop) as runner:
            return runner.run(coro)


class ManualClock:
    """A wall clock that moves only when told: for stepping a backend through lease expiry."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:
        self.now = start_ms

    def now_ms(self) -> int:
        """The current manual time, epoch ms."""
        return self.now

    def advance(self, ms: int) -> None:
        """Move time forward by `ms` milliseconds."""
        self.now += ms


class SkewedClock:
    """Another clock's reading plus a fixed offset: an instance whose clock runs fast or slow."""

    def __init__(self, base: VirtualClock, offset_ms: int) -> None:
        self.base = base
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        """The base clock's time plus the offset."""
        return self.base.now_ms() + self.offset_ms


def unused_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for a server that is down, or a test server)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_service(name: str, url: str, default_port: int) -> None:
    """In a pytest test: skip when `url`'s server is unreachable, or fail when
    `ANARCHON_REQUIRE_SERVICES=1` (as in CI) says every service must be there."""
    import os
    import socket
    from urllib.parse import urlsplit

    import pytest

    from ..backends import redact_url

    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or default_port
    try:
        with socket.create_connection((host, port), timeout=2):
            return
    except OSError as exc:
        reason = f"{name} unreachable at {redact_url(url)} ({exc})"
    if os.environ.get("ANARCHON_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; ANARCHON_REQUIRE_SERVICES=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


LEASE_ONLY_OPTIONS: dict[str, Any] = {
    "overlap": "skip", "max_attempts": 2, "catch_up": "1m", "lease": "30s", "heartbeat": "1s", "retry": True,
}
"""Job options that need a lease backend (claim-only backends refuse them), each with a valid value."""


def check_lease_only_options_refused(backend: Any) -> None:
    """Assert that a scheduler on claim-only `backend` refuses each lease-only option with a
    `TypeError` naming the option and the backend, in `every()` and in the `Scheduler` defaults."""
    import pytest

    from .._scheduler import Scheduler

    name = type(backend).__name__
    scheduler = Scheduler(backend=backend)
    for option, value in LEASE_ONLY_OPTIONS.items():
        with pytest.raises(TypeError, match=rf"'{option}' needs a lease backend.*{name}"):
            scheduler.every("job", "10s", lambda: None, **{option: value})
    with pytest.raises(TypeError, match="'lease' needs a lease backend"):
        Scheduler(backend=backend, lease="30s")


async def check_start_fails_clearly(backend: Any, service: str, secret: str) -> None:
    """Assert that starting a scheduler on `backend`, whose server is down, fails with
    `BackendUnavailable` naming `service` and the host, and that its message hides `secret`."""
    import pytest

    from .._errors import BackendUnavailable
    from .._scheduler import Scheduler

    scheduler = Scheduler(backend=backend)
    with pytest.raises(BackendUnavailable) as info:
        await scheduler.start()
    message = str(info.value)
    assert service in message, message
    host = urlsplit(backend.url).hostname or ""
    assert host and host in message, f"the host {host!r} is not named: {message}"
    assert secret not in message, f"the message shows the password: {message}"
    assert not scheduler.running


async def claim_race(
    backends: Sequence[ClaimBackend], slots: Sequence[int], *, job: str = "race", namespace: str = "ns"
) -> dict[int, list[ClaimResult]]:
    """Open `backends` (one connection each), let backend `n` claim every slot at once as owner
    `i{n}`, close them, and return each slot's results in backend order."""
    await asyncio.gather(*(b.open() for b in backends))
    try:
        results = await asyncio.gather(*(
            b.claim(ClaimRequest(namespace, job, slot, f"i{n}"))
            for slot in slots
            for n, b in enumerate(backends)
        ))
    finally:
        await asyncio.gather(*(b.close() for b in backends))
    return {slot: [r for r in results if r.slot == slot] for slot in slots}


class FaultyBackend:
    """Wraps a lease backend to inject faults: a crash (every call fails) or a freeze (calls wait)."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(Capability)
    """Each instance declares the wrapped backend's capabilities instead."""
    url_schemes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, inner: LeaseBackend) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities  # type: ignore[misc]
        self.crashed = False
        self._frozen_until: float | None = None

    @property
    def horizon_ms(self) -> int | None:
        """The wrapped backend's horizon."""
        return self.inner.horizon_ms

    @property
    def url(self) -> str:
        """The wrapped backend's URL."""
        return self.inner.url

    def crash(self) -> None:
        """From now on every call fails, as if the process had died."""
        self.crashed = True

    def freeze(self, seconds: float) -> None:
        """Calls made in the next `seconds` wait until the freeze ends (a paused process)."""
        self._frozen_until = asyncio.get_running_loop().time() + seconds

    async def _gate(self) -> None:
        if self.crashed:
            raise ConnectionError("backend crashed (injected)")
        if self._frozen_until is not None:
            delay = self._frozen_until - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)
        if self.crashed:
            raise ConnectionError("backend crashed (injected)")

    async def open(self) -> None:
        """Open the wrapped backend."""
        await self.inner.open()

    async def close(self) -> None:
        """Close the wrapped backend."""
        await self.inner.close()

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Claim, unless crashed or frozen."""
        await self._gate()
        return await self.inner.claim(request)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch, unless crashed or frozen."""
        await self._gate()
        return await self.inner.claim_many(requests)

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        """Renew, unless crashed or frozen."""
        await self._gate()
        return await self.inner.renew(lease, lease_ms)

    async def release(self, lease: Lease, outcome: ReleaseOutcome) -> bool:
        """Release, unless crashed or frozen."""
        await self._gate()
        return await self.inner.release(lease, outcome)

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """Release a batch, unless crashed or frozen."""
        await self._gate()
        return await self.inner.release_many(releases)

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew a batch, unless crashed or frozen."""
        await self._gate()
        return await self.inner.renew_many(renewals)

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Inspect through the wrapped backend (when it declares `inspect`)."""
        return await cast(InspectBackend, self.inner).inspect(namespace, job)

    async def jobs(self, namespace: str) -> list[JobState]:
        """List records through the wrapped backend (when it declares `inspect`)."""
        return await cast(InspectBackend, self.inner).jobs(namespace)

    async def set_control(self, namespace: str, job: str, *, paused: bool | None = None,
                          trigger: bool = False) -> JobControl:
        """Set a job's controls (when the wrapped backend declares `control`), unless crashed or frozen."""
        await self._gate()
        return await cast(ControlBackend, self.inner).set_control(namespace, job, paused=paused,
                                                                  trigger=trigger)

    async def controls(self, namespace: str) -> dict[str, JobControl]:
        """Read a namespace's controls (when the wrapped backend declares `control`), unless crashed or
        frozen."""
        await self._gate()
        return await cast(ControlBackend, self.inner).controls(namespace)

    async def publish_catalogue(self, namespace: str, entries: Sequence[CatalogueEntry], ttl_ms: int) -> None:
        """Publish jobs (when the wrapped backend declares `history`), unless crashed or frozen."""
        await self._gate()
        await cast(HistoryBackend, self.inner).publish_catalogue(namespace, entries, ttl_ms)

    async def catalogue(self, namespace: str) -> list[CatalogueEntry]:
        """Read the catalogue (when the wrapped backend declares `history`)."""
        return await cast(HistoryBackend, self.inner).catalogue(namespace)

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        """Record ended runs (when the wrapped backend declares `history`), unless crashed or frozen."""
        await self._gate()
        await cast(HistoryBackend, self.inner).record_runs(namespace, runs, keep)

    async def history(self, namespace: str, job: str, limit: int) -> list[RunRecord]:
        """Read a job's history (when the wrapped backend declares `history`)."""
        return await cast(HistoryBackend, self.inner).history(namespace, job, limit)

    async def forget(self, namespace: str, job: str) -> bool:
        """Forget a job (when the wrapped backend declares `forget`), unless crashed or frozen."""
        await self._gate()
        return await cast(ForgetBackend, self.inner).forget(namespace, job)

    async def namespaces(self) -> list[str]:
        """List the namespaces (when the wrapped backend declares `forget`)."""
        return await cast(ForgetBackend, self.inner).namespaces()

    async def put_schedule(self, namespace: str, write: ScheduleWrite, *,
                           expect: int | Literal["absent", "any"]) -> ScheduleWriteResult:
        """Write a stored schedule (the wrapped backend declares `schedules`), unless crashed or frozen."""
        await self._gate()
        return await cast(ScheduleBackend, self.inner).put_schedule(namespace, write, expect=expect)

    async def put_schedules(self, namespace: str, writes: Sequence[ScheduleWrite], *,
                            expect: Literal["absent", "any"]) -> list[ScheduleWriteResult]:
        """Write stored schedules in a batch, unless crashed or frozen."""
        await self._gate()
        return await cast(ScheduleBackend, self.inner).put_schedules(namespace, writes, expect=expect)

    async def remove_schedule(self, namespace: str, schedule_id: str, *, expect: int | None = None
                              ) -> ScheduleWriteResult:
        """Remove a stored schedule, unless crashed or frozen."""
        await self._gate()
        return await cast(ScheduleBackend, self.inner).remove_schedule(namespace, schedule_id, expect=expect)

    async def get_schedules(self, namespace: str, ids: Sequence[str]) -> list[ScheduleRecord | None]:
        """Read stored schedules by id, unless crashed or frozen."""
        await self._gate()
        return await cast(ScheduleBackend, self.inner).get_schedules(namespace, ids)

    async def list_schedules(self, namespace: str, *, after: str = "", limit: int, task: str | None = None,
                             prefix: str = "") -> list[ScheduleRecord]:
        """List stored schedules, unless crashed or frozen."""
        await self._gate()
        return await cast(ScheduleBackend, self.inner).list_schedules(namespace, after=after, limit=limit,
                                                                      task=task, prefix=prefix)

    async def due_schedules(self, namespace: str, *, until: int, tasks: Sequence[str] | None = None,
                            partitions: Sequence[int] | None = None, after: tuple[int, str] | None = None,
                            limit: int) -> list[ScheduleRecord]:
        """Read the due index, unless crashed or frozen."""
        await self._gate()
        return await cast(ScheduleBackend, self.inner).due_schedules(
            namespace, until=until, tasks=tasks, partitions=partitions, after=after, limit=limit)

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        """Move the due index on, unless crashed or frozen."""
        await self._gate()
        await cast(ScheduleBackend, self.inner).advance_schedules(namespace, moves)

    async def schedules_version(self, namespace: str) -> int:
        """Read the change counter, unless crashed or frozen."""
        await self._gate()
        return await cast(ScheduleBackend, self.inner).schedules_version(namespace)

    async def subscribe(self, namespace: str, callback: ReleaseCallback) -> None:
        """Subscribe; a crashed instance hears nothing more."""

        def relay(job: str, slot: int) -> None:
            if not self.crashed:
                callback(job, slot)

        await self.inner.subscribe(namespace, relay)

    async def subscribe_wins(self, namespace: str, callback: WinsCallback) -> None:
        """Subscribe to won claims (when the wrapped backend declares `announce`); a crashed instance
        hears nothing more."""

        def relay(owner: str, wins: Sequence[tuple[str, int]]) -> None:
            if not self.crashed:
                callback(owner, wins)

        await cast(AnnounceBackend, self.inner).subscribe_wins(namespace, relay)


class EngineProbe:
    """The test hook into a running scheduler's engine: what the project's tests, test replicas and
    benchmarks may see and do of it, in one place. Not an API for applications: it follows the engine.

    Get one with `probe(scheduler)` after `start()`; it reads the engine of that start.
    """

    def __init__(self, scheduler: Scheduler[Any]) -> None:
        self._scheduler = scheduler

    def _engine(self) -> Any:
        engine = self._scheduler._engine
        if engine is None:
            raise RuntimeError(f"{self._scheduler!r} is not running: probe it between start() and stop()")
        return engine

    @property
    def running(self) -> bool:
        """True while the scheduler has an engine (between `start()` and the end of `stop()`)."""
        return self._scheduler._engine is not None

    @property
    def settings(self) -> Any:
        """The settings object the engine runs with (the scheduler's own, handed on whole)."""
        return self._engine()._config

    @property
    def keeper(self) -> str:
        """Where the lease keeper renews leases: in its own thread, on the scheduler's loop, or nowhere."""
        return str(self._engine().keeper.where)

    def busy(self, *roles: str) -> list[asyncio.Task[Any]]:
        """The engine's tasks still running in these roles ("claim", "run", "send", ...); [] when stopped."""
        engine = self._scheduler._engine
        return [] if engine is None else list(engine.tasks.of(*roles))

    def wake(self) -> None:
        """Make the planner look at its clock now (after a test moved a stepped clock on)."""
        self._engine().planner._wake.set()

    async def crash(self) -> None:
        """Vanish like a killed process: every task ends, nothing is released."""
        engine, self._scheduler._engine = self._scheduler._engine, None
        if engine is not None:
            await engine.crash()


def probe(scheduler: Scheduler[Any]) -> EngineProbe:
    """The test hook into `scheduler`'s engine (see `EngineProbe`)."""
    return EngineProbe(scheduler)


async def crash(scheduler: Scheduler[Any]) -> None:
    """Make `scheduler` vanish like a killed process: its tasks stop and nothing is released.

    Its backend must be a `FaultyBackend`.
    """
    backend = scheduler.backend
    if not isinstance(backend, FaultyBackend):
        raise TypeError("crash() needs a scheduler whose backend is a FaultyBackend")
    backend.crash()
    await probe(scheduler).crash()
