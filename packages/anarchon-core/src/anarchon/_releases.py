"""Releases: how does a run that ended get ended in the store?

On the scheduler's loop and connection, whichever keeper holds the lease: the releases of one loop
step go out in one `release_many`, each retried while its lease lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ._batch import StepBatcher
from ._logs import fmt_slot, short
from ._renewals import Held
from ._tasks import Tasks
from .backends import Lease, LeaseBackend, ReleaseOutcome

__all__ = ["Releases"]


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
