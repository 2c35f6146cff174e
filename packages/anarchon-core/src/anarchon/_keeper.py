"""The lease keeper: which leases does this process hold, and are they still its own?

The keeper holds every lease the process's runs hold: it renews them (`_renewals`), releases them when
their runs end, renewing until the store confirms the release, and watches the event loop's lag, so a
blocked loop is named in the log with the jobs that were running. There are three kinds:

- `LeaseKeeper` keeps the leases on the scheduler's own event loop;
- `_keeper_thread.KeeperThread` renews them in a thread of its own, on a second connection, so a
  handler that blocks the loop does not stop the renewals;
- `NullKeeper`, the keeper of a claim-only backend, holds nothing: the engine needs no lease branches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from ._batch import StepBatcher
from ._job import Job
from ._logs import fmt_slot, short
from ._renewals import Held, Renewals, hold
from ._tasks import Tasks
from .backends import Lease, LeaseBackend, ReleaseOutcome

__all__ = ["Held", "Keeper", "LeaseKeeper", "NullKeeper", "Releases", "job_names", "lag_threshold",
           "watch_lag"]


class Keeper(Protocol):
    """What the engine asks of a keeper, whichever kind it is."""

    where: str
    """Where it renews the leases, e.g. "on the scheduler's event loop" (for the log and the tests)."""

    def now(self) -> float:
        """The keeper's clock, seconds: the send time of a claim is read from it."""
        ...

    async def start(self, running: Callable[[], list[str]]) -> None:
        """Begin keeping leases; `running` names the running jobs, for lag warnings."""
        ...

    def hold(self, lease: Lease, job: Job, sent: float, on_lost: Callable[[str], None]) -> Held:
        """Keep `lease` from now on (a late one only once `confirm` renewed it)."""
        ...

    async def confirm(self, held: Held) -> bool:
        """Renew a late lease before its run starts; False (the lease lost) when that fails."""
        ...

    def release(self, held: Held, outcome: ReleaseOutcome) -> Awaitable[None]:
        """End the run in the store, renewing the lease until the release is confirmed."""
        ...

    def drop(self, held: Held) -> None:
        """Forget a lease without releasing it."""
        ...

    def hand_back(self, lease: Lease, outcome: ReleaseOutcome = ReleaseOutcome.HANDOVER) -> None:
        """Release a lease that never ran (a handover by default) at once, without waiting for the answer."""
        ...

    async def stop(self) -> None:
        """Stop keeping leases once every run has ended; send what is still queued."""
        ...

    async def crash(self) -> None:
        """Vanish like a killed process: renew and release nothing more."""
        ...


class Releases:
    """Ends runs in the store, on the scheduler's loop and connection: the releases of one loop step
    go out in one `release_many`."""

    def __init__(self, backend: LeaseBackend, log: logging.Logger, tasks: Tasks) -> None:
        self._log = log
        self._tasks = tasks
        self._batch: StepBatcher[tuple[Lease, ReleaseOutcome], bool] = StepBatcher(
            backend.release_many, lambda c: tasks.spawn(c, "send"), f"{backend!r}.release_many")

    async def release(self, held: Held, outcome: ReleaseOutcome, now: Callable[[], float],
                      then: Callable[[Held], None]) -> None:
        """Release `held`'s run, retrying while its lease lasts (by `now`, the keeper's clock); call
        `then(held)` at the end, however it ends (the keepers' own `release` is this coroutine, not one
        around it: it runs once per run)."""
        try:
            if held.lost:
                return
            held.releasing = True  # its renewals go on until the release lands
            attempt = 0
            while True:
                attempt += 1
                try:
                    await self._send(held.lease, outcome)
                    return
                except Exception as exc:
                    # Keep trying while the lease lasts: once it expires, a backup re-runs the slot,
                    # even one that completed.
                    delay = min(0.2 * attempt, 1.0)
                    give_up = attempt >= 3 and now() + delay >= held.deadline
                    self._log.warning(
                        "%s slot=%s release (%s) failed: %s%s", held.job, fmt_slot(held.lease.slot),
                        outcome.value, short(exc),
                        "; the lease will expire instead" if give_up else "; retrying",
                    )
                    if give_up:
                        return
                    await asyncio.sleep(delay)
        finally:
            then(held)

    def hand_back(self, lease: Lease, outcome: ReleaseOutcome = ReleaseOutcome.HANDOVER) -> None:
        """Release `lease` (as a handover by default) in the background; a failure is no news (it
        expires)."""
        self._tasks.spawn(self._hand_back(lease, outcome), "send")

    async def _hand_back(self, lease: Lease, outcome: ReleaseOutcome) -> None:
        with contextlib.suppress(Exception):
            await self._send(lease, outcome)

    def _send(self, lease: Lease, outcome: ReleaseOutcome) -> asyncio.Future[bool]:
        """Release one run in one `release_many` with the other runs ending in this loop step."""
        return self._batch.submit((lease, outcome))


class LeaseKeeper:
    """Keeps every lease of one process on the scheduler's own event loop."""

    where = "on the scheduler's event loop"

    def __init__(self, backend: LeaseBackend, log: logging.Logger, *, heartbeat_ms: int) -> None:
        self._log = log
        self._heartbeat_ms = heartbeat_ms
        self._tasks = Tasks(log)
        self._renewals = Renewals(backend, log, self._tasks)
        self._releases = Releases(backend, log, self._tasks)
        # Bound once: `release` passes them on for every run.
        self._now, self._forget = self.now, self._renewals.forget

    def now(self) -> float:
        """The loop's monotonic clock."""
        return asyncio.get_running_loop().time()

    async def start(self, running: Callable[[], list[str]]) -> None:
        """Start renewing, and the lag monitor."""
        self._renewals.start()
        self._tasks.spawn(watch_lag(self._log, running, self._heartbeat_ms), "keeper", name="anarchon-lag")

    def hold(self, lease: Lease, job: Job, sent: float, on_lost: Callable[[str], None]) -> Held:
        """Keep `lease` (see `Keeper.hold`)."""
        held = hold(lease, job, sent, self.now(), on_lost)
        self._renewals.keep(held)
        return held

    async def confirm(self, held: Held) -> bool:
        """Renew a late lease before its run starts (see `Keeper.confirm`)."""
        return await self._renewals.confirm(held)

    def release(self, held: Held, outcome: ReleaseOutcome) -> Awaitable[None]:
        """Release the run, renewing until confirmed (see `Keeper.release`)."""
        return self._releases.release(held, outcome, self._now, self._forget)

    def drop(self, held: Held) -> None:
        """Forget `held` without releasing it."""
        self._renewals.forget(held)

    def hand_back(self, lease: Lease, outcome: ReleaseOutcome = ReleaseOutcome.HANDOVER) -> None:
        """Release `lease` (as a handover by default), in the background."""
        self._releases.hand_back(lease, outcome)

    async def stop(self) -> None:
        """Send what is queued (hand-backs, the last batches), then stop renewing."""
        await self._tasks.wait("send", within=5)
        await self.crash()

    async def crash(self) -> None:
        """Stop at once, sending nothing more."""
        self._tasks.cancel()
        await self._tasks.wait(within=5)


class NullKeeper:
    """The keeper of a claim-only backend: it holds no lease, and watches the loop's lag."""

    where = "nowhere: a claim-only backend holds no lease"

    def __init__(self, log: logging.Logger, *, heartbeat_ms: int) -> None:
        self._log = log
        self._heartbeat_ms = heartbeat_ms
        self._tasks = Tasks(log)

    def now(self) -> float:
        """The running loop's clock."""
        return asyncio.get_running_loop().time()

    async def start(self, running: Callable[[], list[str]]) -> None:
        """Start the lag monitor."""
        self._tasks.spawn(watch_lag(self._log, running, self._heartbeat_ms), "keeper", name="anarchon-lag")

    def hold(self, lease: Lease, job: Job, sent: float, on_lost: Callable[[str], None]) -> Held:
        """A run on a claim-only backend has no lease to keep."""
        return Held(lease, job.name, 0, 0.0, sent, float("inf"), on_lost)

    async def confirm(self, held: Held) -> bool:
        """Nothing to renew."""
        return True

    async def release(self, held: Held, outcome: ReleaseOutcome) -> None:
        """A claim-only slot is not released: the store's horizon forgets it."""

    def drop(self, held: Held) -> None:
        """Nothing is held."""

    def hand_back(self, lease: Lease, outcome: ReleaseOutcome = ReleaseOutcome.HANDOVER) -> None:
        """Nothing is held."""

    async def stop(self) -> None:
        """Stop the lag monitor."""
        await self.crash()

    async def crash(self) -> None:
        """Stop the lag monitor."""
        self._tasks.cancel()
        await self._tasks.wait(within=5)


async def watch_lag(log: logging.Logger, running: Callable[[], list[str]], heartbeat_ms: int) -> None:
    """Measure the event loop's lag; name the running jobs when the loop was blocked."""
    loop = asyncio.get_running_loop()
    period = 0.5
    threshold = lag_threshold(heartbeat_ms)
    while True:
        start = loop.time()
        await asyncio.sleep(period)
        lag = loop.time() - start - period
        if lag > threshold:
            log.warning("event loop blocked for %d ms (running jobs: %s); renewals may be late",
                        int(lag * 1000), job_names(running()))


def lag_threshold(heartbeat_ms: int) -> float:
    """The lag, in seconds, worth a warning: half a heartbeat, between 0.1 s and 1 s."""
    return max(0.1, min(heartbeat_ms / 1000 / 2, 1.0))


def job_names(names: list[str]) -> str:
    """Up to ten names, sorted, for a log line."""
    names = sorted(names)
    text = ", ".join(names[:10]) or "none"
    if len(names) > 10:
        text += f" and {len(names) - 10} more"
    return text
