"""The keeper of a claim-only backend: it holds no lease, and watches the loop's lag."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ._job import Job
from ._lag import watch_lag
from ._renewals import Held
from ._tasks import Tasks
from .backends import Lease, ReleaseOutcome

__all__ = ["NullKeeper"]


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
