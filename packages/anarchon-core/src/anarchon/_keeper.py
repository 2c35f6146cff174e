"""The lease keeper: which leases does this process hold, and are they still its own?

One deadline heap for every lease the process holds. Each lease is renewed every heartbeat, counted
from when the last renewal was *sent*, not from when it was answered, so a slow answer never delays
the next renewal; the renewals due together go out in one `renew_many`. A lease is the holder's until
(the send time of the last confirmed claim or renewal) + lease, on the keeper's monotonic clock: a lease
whose deadline passes unconfirmed is lost, and its run's signal is set. A finished run's lease is renewed
until the store confirms its release.

`LeaseKeeper` runs on whichever event loop starts it: the scheduler's own, or a thread of its own
(`_keeper_thread.KeeperThread`). `NullKeeper` is the keeper of a claim-only backend: it holds nothing.
Both watch the loop's lag, so a blocked loop is named in the log with the jobs that were running.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, cast

from ._batch import StepBatcher
from ._job import Job
from ._logs import SlotText, fmt_slot, short
from ._tasks import Tasks
from .backends import Capability, Lease, LeaseBackend, ReleaseManyBackend, ReleaseOutcome, RenewManyBackend

__all__ = ["Held", "Keeper", "LeaseKeeper", "NullKeeper", "hold", "watch_lag"]

# Renewals due within this many seconds of each other go out in one batch.
_GROUP_S = 0.01
# A lease with less than this many heartbeats left when its handler would start is renewed first.
_START_MARGIN = 1.5


@dataclass(eq=False, slots=True)
class Held:
    """One lease the process holds, as its keeper sees it. Times are on the keeper's clock (seconds)."""

    lease: Lease
    job: str
    lease_ms: int
    heartbeat_s: float
    sent: float
    """When the winning claim was sent."""
    deadline: float
    """Until when the lease is surely this process's: the last confirmed send time + lease."""
    on_lost: Callable[[str], None] = field(repr=False)
    """Called (on the scheduler's loop) with the reason, once the lease is lost."""
    late: bool = False
    """Less than 1.5 heartbeats were left when the run was to start: `confirm` must renew it first."""
    next_renew: float = 0.0
    pending: int = 0
    """Renewals sent and not answered yet."""
    gen: int = 0
    """The generation of its live heap entry."""
    releasing: bool = False
    lost: bool = False
    gone: bool = False
    """Neither renewed nor watched any more: released, lost or dropped."""


def hold(lease: Lease, job: Job, sent: float, now: float, on_lost: Callable[[str], None]) -> Held:
    """A new `Held` for `lease`, won by a claim sent at `sent`, its run about to start at `now`."""
    opts = job.options
    heartbeat_s = opts.heartbeat_ms / 1000
    deadline = sent + opts.lease_ms / 1000
    return Held(lease, job.name, opts.lease_ms, heartbeat_s, sent, deadline, on_lost,
                late=deadline - now < _START_MARGIN * heartbeat_s, next_renew=sent + heartbeat_s)


class Keeper(Protocol):
    """What the engine asks of a keeper, whichever kind it is."""

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

    async def release(self, held: Held, outcome: ReleaseOutcome) -> None:
        """End the run in the store, renewing the lease until the release is confirmed."""
        ...

    def drop(self, held: Held) -> None:
        """Forget a lease without releasing it."""
        ...

    def hand_back(self, lease: Lease) -> None:
        """Release a lease as a handover at once, without waiting for the answer."""
        ...

    async def stop(self) -> None:
        """Stop keeping leases once every run has ended; send what is still queued."""
        ...

    async def crash(self) -> None:
        """Vanish like a killed process: renew and release nothing more."""
        ...


class LeaseKeeper:
    """Keeps every lease of one process alive on the event loop that starts it."""

    def __init__(self, backend: LeaseBackend, log: logging.Logger, *, heartbeat_ms: int,
                 watch_loop: bool = True) -> None:
        self._backend = backend
        self._log = log
        self._heartbeat_ms = heartbeat_ms
        self._watch_loop = watch_loop
        self.tasks = Tasks(log)
        self._heap: list[tuple[float, int, int, Held]] = []
        self._seq = 0
        self._held: set[Held] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        caps = backend.capabilities

        def spawn(coro: Any) -> None:
            self.tasks.spawn(coro, "send")

        # Releases and renewals made in one loop step go out together where the backend batches them.
        self._releases: StepBatcher[tuple[Lease, ReleaseOutcome], bool] | None = None
        if Capability.RELEASE_MANY in caps:
            self._releases = StepBatcher(cast(ReleaseManyBackend, backend).release_many, spawn,
                                         f"{backend!r}.release_many")
        self._renewals: StepBatcher[tuple[Lease, int], Lease | None] | None = None
        if Capability.RENEW_MANY in caps:
            self._renewals = StepBatcher(self._renew_many, spawn, f"{backend!r}.renew_many")

    def now(self) -> float:
        """The loop's monotonic clock."""
        assert self._loop is not None, "not started"
        return self._loop.time()

    async def start(self, running: Callable[[], list[str]]) -> None:
        """Start the renewal loop, and the lag monitor when keeping the scheduler's own loop."""
        self._loop = asyncio.get_running_loop()
        self.tasks.spawn(self._tick(), "keeper", name="anarchon-keeper")
        if self._watch_loop:
            self.tasks.spawn(watch_lag(self._log, running, self._heartbeat_ms), "keeper", name="anarchon-lag")

    def hold(self, lease: Lease, job: Job, sent: float, on_lost: Callable[[str], None]) -> Held:
        """Keep `lease` (see `Keeper.hold`)."""
        held = hold(lease, job, sent, self.now(), on_lost)
        self.keep(held)
        return held

    def keep(self, held: Held) -> None:
        """Keep a lease made by `hold`; a late one waits for `confirm`."""
        self._held.add(held)
        if not held.late:
            self._schedule(held)

    async def confirm(self, held: Held) -> bool:
        """Renew a late lease before its run starts (see `Keeper.confirm`)."""
        sent = self.now()
        late = int((sent - held.sent) * 1000)
        renewed = None
        try:
            async with asyncio.timeout(held.lease_ms / 1000):
                renewed = await self._send_renew(held.lease, held.lease_ms)
        except TimeoutError:
            pass
        except Exception as exc:
            self._lose(held, f"not started: the claim is {late} ms old and renewing it failed: {short(exc)}")
            return False
        if renewed is None:
            self._lose(held, f"not started: the claim is {late} ms old (event loop blocked?) and the lease "
                             "could not be renewed; another instance may have taken the slot over")
            return False
        self._extend(held, sent, renewed)
        held.late = False
        held.next_renew = sent + held.heartbeat_s
        self._schedule(held)
        self._log.info("%s slot=%s renewed before start: the claim was %d ms old", held.job,
                       SlotText(held.lease.slot), late)
        return True

    async def release(self, held: Held, outcome: ReleaseOutcome) -> None:
        """Release the run, retrying while the lease lasts (see `Keeper.release`)."""
        if held.lost or held.gone:
            return
        held.releasing = True
        attempt = 0
        try:
            while True:
                attempt += 1
                try:
                    await self._send_release(held.lease, outcome)
                    return
                except Exception as exc:
                    # Keep trying while the lease lasts: once it expires, a backup re-runs the slot,
                    # even one that completed.
                    delay = min(0.2 * attempt, 1.0)
                    give_up = attempt >= 3 and self.now() + delay >= held.deadline
                    self._log.warning(
                        "%s slot=%s release (%s) failed: %s%s", held.job, fmt_slot(held.lease.slot),
                        outcome.value, short(exc),
                        "; the lease will expire instead" if give_up else "; retrying",
                    )
                    if give_up:
                        return
                    await asyncio.sleep(delay)
        finally:
            self._forget(held)

    def drop(self, held: Held) -> None:
        """Forget `held` without releasing it."""
        self._forget(held)

    def hand_back(self, lease: Lease) -> None:
        """Release `lease` as a handover, in the background (see `Keeper.hand_back`)."""
        self.tasks.spawn(self._hand_back(lease), "send")

    def abandon(self, why: str) -> None:
        """Stop renewing every lease held now: each is lost, for `why`."""
        for held in list(self._held):
            if not held.releasing:
                self._lose(held, why)

    async def stop(self) -> None:
        """Send what is queued (hand-backs, the last batches), then stop renewing."""
        await self.tasks.wait("send", "call", within=5)
        self.tasks.cancel()
        await self.tasks.wait(within=5)

    async def crash(self) -> None:
        """Stop at once, sending nothing more."""
        self.tasks.cancel()
        await self.tasks.wait(within=5)

    # -- the deadline heap ------------------------------------------------------------------------

    def _schedule(self, held: Held) -> None:
        """(Re)queue `held` for its next renewal, or its deadline if that comes first."""
        held.gen += 1
        self._seq += 1
        heapq.heappush(self._heap, (min(held.next_renew, held.deadline), self._seq, held.gen, held))
        if self._heap[0][1] == self._seq:
            self._wake.set()

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        heap = self._heap
        while True:
            while heap and (heap[0][3].gone or heap[0][2] != heap[0][3].gen):
                heapq.heappop(heap)  # a lease released or lost since: nothing to do at its time
            if not heap:
                self._wake.clear()
                await self._wake.wait()
                continue
            now = loop.time()
            delay = heap[0][0] - now
            if delay > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                continue
            limit = now + _GROUP_S
            while heap:
                when, _, gen, held = heap[0]
                if when > now and not (when <= limit and held.next_renew <= limit):
                    break
                heapq.heappop(heap)
                if gen == held.gen and not held.gone:
                    self._attend(held, when, now)

    def _attend(self, held: Held, when: float, now: float) -> None:
        if now >= held.deadline:
            self._expired(held, when, now)
            return
        if held.next_renew <= now + _GROUP_S:
            held.next_renew = now + held.heartbeat_s
            held.pending += 1
            self._send_renew(held.lease, held.lease_ms).add_done_callback(partial(self._renewed, held, now))
        self._schedule(held)

    def _expired(self, held: Held, when: float, now: float) -> None:
        """`held`'s deadline passed with no renewal confirmed since."""
        if held.releasing:
            self._forget(held)
            self._log.warning("%s slot=%s attempt=%d: the store confirmed neither the release nor a renewal "
                              "before the lease ended; a backup may run the slot again", held.job,
                              fmt_slot(held.lease.slot), held.lease.attempt)
            return
        if when < held.deadline:
            # A renewal was due before the deadline, but this loop only got here after it.
            why = f"renewal came {int((now - held.deadline) * 1000)} ms too late (event loop blocked?)"
        elif held.pending:
            why = "the store did not answer the renewal before the lease ended"
        else:
            why = "the store did not confirm a renewal before the lease ended"
        self._lose(held, why)
        if not held.pending:
            self.hand_back(held.lease)

    def _renewed(self, held: Held, sent: float, future: asyncio.Future[Lease | None]) -> None:
        held.pending -= 1
        if held.gone or future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self._log.warning("%s slot=%s renew failed: %s; retrying", held.job, fmt_slot(held.lease.slot),
                              short(exc))
            return
        renewed = future.result()
        if renewed is None:
            if held.releasing:
                self._forget(held)  # the release landed first
            else:
                self._lose(held, "another instance took the slot over, or the record changed")
            return
        self._extend(held, sent, renewed)

    @staticmethod
    def _extend(held: Held, sent: float, renewed: Lease) -> None:
        if renewed.expires_at >= held.lease.expires_at:
            held.lease = renewed
        held.deadline = max(held.deadline, sent + held.lease_ms / 1000)

    def _lose(self, held: Held, why: str) -> None:
        if held.lost:
            return
        held.lost = True
        self._forget(held)
        self._log.warning("%s slot=%s lease lost attempt=%d: %s", held.job, fmt_slot(held.lease.slot),
                          held.lease.attempt, why)
        held.on_lost(why)

    def _forget(self, held: Held) -> None:
        held.gone = True
        self._held.discard(held)

    # -- the store --------------------------------------------------------------------------------

    def _send_renew(self, lease: Lease, lease_ms: int) -> asyncio.Future[Lease | None]:
        """Renew one lease; with `renew_many`, together with the other renewals made now."""
        if self._renewals is not None:
            return self._renewals.submit((lease, lease_ms))
        return self.tasks.spawn(self._renew_one(lease, lease_ms), "send")

    async def _renew_one(self, lease: Lease, lease_ms: int) -> Lease | None:
        # An answer after the lease ended is no use (the deadline judged it lost): bound the call.
        async with asyncio.timeout(lease_ms / 1000):
            return await self._backend.renew(lease, lease_ms)

    async def _renew_many(self, renewals: list[tuple[Lease, int]]) -> list[Lease | None]:
        async with asyncio.timeout(max(ms for _, ms in renewals) / 1000):
            return await cast(RenewManyBackend, self._backend).renew_many(renewals)

    def _send_release(self, lease: Lease, outcome: ReleaseOutcome) -> asyncio.Future[bool]:
        """Release one run; with `release_many`, together with the other runs ending now."""
        if self._releases is not None:
            return self._releases.submit((lease, outcome))
        return self.tasks.spawn(self._backend.release(lease, outcome), "send")

    async def _hand_back(self, lease: Lease) -> None:
        with contextlib.suppress(Exception):
            await self._send_release(lease, ReleaseOutcome.HANDOVER)


class NullKeeper:
    """The keeper of a claim-only backend: it holds no lease, and watches the loop's lag."""

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

    def hand_back(self, lease: Lease) -> None:
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
    threshold = max(0.1, min(heartbeat_ms / 1000 / 2, 1.0))
    while True:
        start = loop.time()
        await asyncio.sleep(period)
        lag = loop.time() - start - period
        if lag > threshold:
            log.warning("event loop blocked for %d ms (running jobs: %s); renewals may be late",
                        int(lag * 1000), job_names(running()))


def job_names(names: list[str]) -> str:
    """Up to ten names, sorted, for a log line."""
    names = sorted(names)
    text = ", ".join(names[:10]) or "none"
    if len(names) > 10:
        text += f" and {len(names) - 10} more"
    return text
