"""The lease keeper: which leases does this process hold, and are they still its own?

The keeper holds every lease the process's runs hold: it renews them (`_renewals`), releases them when
their runs end, renewing until the store confirms the release, and watches the event loop's lag, so a
blocked loop is named in the log with the jobs that were running. This module is the family's one
place: what the engine asks of a keeper (`Keeper`), and which keeper a backend gets (`open_keeper`).
Each kind lives in a module of its own:

- `_keeper_thread.KeeperThread` renews the leases in a thread of its own, on a second connection, so
  a handler that blocks the loop does not stop the renewals (the usual keeper of a lease backend);
- `_keeper_loop.LeaseKeeper` keeps them on the scheduler's own event loop, when no second connection
  can be opened (and under a virtual clock);
- `_keeper_null.NullKeeper`, the keeper of a claim-only backend, holds nothing: the engine needs no
  lease branches.

Their shared parts: `_releases.Releases` ends runs in the store, `_lag` measures the loop's lag.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

from ._job import Job
from ._keeper_loop import LeaseKeeper
from ._keeper_null import NullKeeper
from ._keeper_thread import KeeperThread
from ._logs import short
from ._renewals import Held
from .backends import Capability, ClaimBackend, Lease, LeaseBackend, ReleaseOutcome

__all__ = ["Held", "Keeper", "Sibling", "open_keeper"]

Sibling = Callable[[], tuple[LeaseBackend | None, str]]
"""Returns a new, unopened backend on the same store with a connection of its own and where it came
from ("its sibling()"), or None and why not."""


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


async def open_keeper(backend: ClaimBackend, sibling: Sibling, log: logging.Logger, *, heartbeat_ms: int,
                      block_limit_ms: int, running: Callable[[], list[str]]) -> Keeper:
    """Start the keeper `backend` calls for: none for a claim-only backend; in a thread of its own when
    a second connection can be opened; otherwise on the scheduler's loop, saying why once."""
    keeper: Keeper
    if Capability.LEASE not in backend.capabilities:
        keeper = NullKeeper(log, heartbeat_ms=heartbeat_ms)
    else:
        second, why = sibling()
        level = logging.INFO
        if second is not None:
            thread = KeeperThread(cast(LeaseBackend, backend), second, log, heartbeat_ms=heartbeat_ms,
                                  block_limit_ms=block_limit_ms, source=why)
            try:
                await thread.start(running)
                log.debug("leases on %s are renewed %s", backend.url, thread.where)
                return thread
            except Exception as exc:
                level, why = logging.WARNING, f"its second connection did not open: {short(exc)}"
        log.log(level, "leases on %s are renewed on the scheduler's event loop, not beside it: %s; a handler "
                "that blocks the loop for longer than the lease loses its lease", backend.url, why)
        keeper = LeaseKeeper(cast(LeaseBackend, backend), log, heartbeat_ms=heartbeat_ms)
    await keeper.start(running)
    return keeper
