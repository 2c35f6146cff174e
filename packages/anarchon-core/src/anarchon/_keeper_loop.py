"""The keeper on the scheduler's loop: renews and releases every lease of the process there.

The keeper of a lease backend when no second connection to the store can be opened (a client object
passed in that the backend does not own), or when the scheduler runs on an injected clock, which a
second event loop cannot follow. A handler that blocks the loop blocks the renewals too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ._job import Job
from ._lag import watch_lag
from ._releases import Releases
from ._renewals import Held, Renewals, hold
from ._tasks import Tasks
from .backends import Lease, LeaseBackend, ReleaseOutcome

__all__ = ["LeaseKeeper"]


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
