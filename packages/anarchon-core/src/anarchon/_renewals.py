"""Renewals: when is each held lease renewed, and is it still the holder's?

One deadline heap for every lease the process holds. Each lease is renewed every heartbeat, counted
from when the last renewal was *sent*, not from when it was answered, so a slow answer never delays
the next renewal; the renewals due together go out in one `renew_many`. A lease is the holder's until
(the send time of the last confirmed claim or renewal) + lease, on this loop's monotonic clock: a lease
whose deadline passes unconfirmed is lost, and its run is told.

`Renewals` runs on whichever event loop starts it: the scheduler's own, or the keeper's thread. From
another thread, leases are handed over through `post`, which wakes this loop only when neither its
renewal task nor its next `poke` (the keeper thread's half-second check) comes before the lease's first
renewal: with the default heartbeat, runs reach the thread without waking it at all.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from ._batch import StepBatcher
from ._job import Job
from ._logs import SlotText, fields, fmt_slot, short
from ._tasks import Tasks
from .backends import Lease, LeaseBackend, ReleaseOutcome

__all__ = ["Held", "Renewals", "hold"]

# Renewals due within this many seconds of each other go out in one batch.
_GROUP_S = 0.01
# A lease with less than this many heartbeats left when its handler would start is renewed first.
_START_MARGIN = 1.5


@dataclass(eq=False, slots=True)
class Held:
    """One lease the process holds. Times are seconds on the keeper's monotonic clock."""

    lease: Lease
    job: str
    lease_ms: int
    heartbeat_s: float
    sent: float
    """When the winning claim was sent."""
    deadline: float
    """Until when the lease is surely this process's: the last confirmed send time + lease."""
    on_lost: Callable[[str], None] = field(repr=False)
    """Called with the reason once the lease is lost (on the scheduler's loop)."""
    late: bool = False
    """Less than 1.5 heartbeats were left when the run was to start: `confirm` must renew it first."""
    next_renew: float = 0.0
    pending: int = 0
    """Renewals sent and not answered yet."""
    gen: int = 0
    """The generation of its live heap entry."""
    releasing: bool = False
    """The run is over and its release is on its way: a refused renewal is no loss then."""
    lost: bool = False
    gone: bool = False
    """Neither renewed nor watched any more: released, lost or dropped."""

    def log_fields(self) -> dict[str, object]:
        """The structured fields of a log line about this lease."""
        return fields(self.job, self.lease.slot, self.lease.owner, attempt=self.lease.attempt)


def hold(lease: Lease, job: Job, sent: float, now: float, on_lost: Callable[[str], None]) -> Held:
    """A new `Held` for `lease`, won by a claim sent at `sent`, its run about to start at `now`."""
    opts = job.options
    heartbeat_s = opts.heartbeat_ms / 1000
    deadline = sent + opts.lease_ms / 1000
    return Held(lease, job.name, opts.lease_ms, heartbeat_s, sent, deadline, on_lost,
                late=deadline - now < _START_MARGIN * heartbeat_s, next_renew=sent + heartbeat_s)


class Renewals:
    """Renews the leases it keeps, on the event loop that starts it, through `backend`."""

    def __init__(self, backend: LeaseBackend, log: logging.Logger, tasks: Tasks) -> None:
        self._backend = backend
        self._log = log
        self._tasks = tasks
        self._heap: list[tuple[float, int, int, Held]] = []
        self._seq = 0
        self._held: set[Held] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: collections.deque[tuple[Literal["keep", "forget"], Held]] = collections.deque()
        self._wake_at = math.inf
        """When this loop's renewal task wakes next (published for `post`)."""
        self._poke_at = math.inf
        """When `poke` is called next (published for `post`)."""
        self._batch: StepBatcher[tuple[Lease, int], Lease | None] = StepBatcher(
            self._renew_many, lambda c: tasks.spawn(c, "send"), f"{backend!r}.renew_many")

    def start(self) -> None:
        """Start the renewal task on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._tasks.spawn(self._tick(), "keeper", name="anarchon-renewals")

    def keep(self, held: Held) -> None:
        """Keep `held` (on this loop); a late one is renewed by `confirm` first."""
        self._held.add(held)
        if not held.late and not held.gone:
            self._schedule(held)

    def forget(self, held: Held) -> None:
        """Stop renewing `held` (on this loop)."""
        held.gone = True
        self._held.discard(held)

    def post(self, what: Literal["keep", "forget"], held: Held) -> None:
        """`keep` or `forget` from another thread. The renewal task is woken only when it would
        otherwise sleep past the lease's first renewal: a burst of runs costs one wake-up at most."""
        self._inbox.append((what, held))
        # (`_tick` publishes `_wake_at`, and `poke` `_poke_at`, after they last looked at the inbox.)
        due = min(self._wake_at, self._poke_at)
        if what == "keep" and not held.late and held.next_renew < due and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing is renewed any more
                self._loop.call_soon_threadsafe(self._wake.set)

    def poke(self, next_at: float) -> None:
        """Take in what was posted (on this loop); the next poke comes at `next_at` or sooner."""
        self._drain()
        self._poke_at = next_at
        heap = self._heap
        if heap and (heap[0][3].gone or heap[0][2] != heap[0][3].gen):
            self._wake.set()  # the renewal task would wake for a lease released since: let it sleep on

    async def confirm(self, held: Held) -> bool:
        """Renew a late lease before its run starts; False (the lease lost) when that fails."""
        loop = asyncio.get_running_loop()
        sent = loop.time()
        late = int((sent - held.sent) * 1000)
        renewed = None
        try:
            async with asyncio.timeout(held.lease_ms / 1000):
                renewed = await self._send(held.lease, held.lease_ms)
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
        self.keep(held)
        self._log.info("%s slot=%s renewed before start: the claim was %d ms old", held.job,
                       SlotText(held.lease.slot), late, extra=held.log_fields())
        return True

    def abandon(self, why: str) -> None:
        """Stop renewing every lease kept now but those being released: each is lost, for `why`."""
        self._drain()
        for held in list(self._held):
            if not held.releasing:
                self._lose(held, why)

    # -- the deadline heap ------------------------------------------------------------------------

    def _schedule(self, held: Held) -> None:
        """(Re)queue `held` for its next renewal, or its deadline if that comes first."""
        held.gen += 1
        self._seq += 1
        heapq.heappush(self._heap, (min(held.next_renew, held.deadline), self._seq, held.gen, held))
        if self._heap[0][1] == self._seq:
            self._wake.set()

    def _drain(self) -> None:
        inbox = self._inbox
        while inbox:
            what, held = inbox.popleft()
            if what == "keep":
                self.keep(held)
            else:
                self.forget(held)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        heap = self._heap
        while True:
            self._drain()
            while heap and (heap[0][3].gone or heap[0][2] != heap[0][3].gen):
                heapq.heappop(heap)  # a lease released or lost since: nothing to do at its time
            self._wake_at = heap[0][0] if heap else math.inf
            if self._inbox:
                continue  # posted after the drain: look again before sleeping
            now = loop.time()
            delay = self._wake_at - now
            if delay > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(None if math.isinf(delay) else delay):
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
            self._send(held.lease, held.lease_ms).add_done_callback(partial(self._renewed, held, now))
        self._schedule(held)

    def _expired(self, held: Held, when: float, now: float) -> None:
        """`held`'s deadline passed with no renewal confirmed since."""
        if held.releasing:
            self.forget(held)
            self._log.warning("%s slot=%s attempt=%d: the store confirmed neither the release nor a renewal "
                              "before the lease ended; a backup may run the slot again", held.job,
                              fmt_slot(held.lease.slot), held.lease.attempt, extra=held.log_fields())
            return
        if when < held.deadline:
            # A renewal was due before the deadline, but this loop only got here after it.
            why = f"renewal came {int((now - held.deadline) * 1000)} ms too late (event loop blocked?)"
        elif held.pending:
            why = "the store did not answer the renewal before the lease ended"
        else:
            why = "the store did not confirm a renewal before the lease ended"
        self._lose(held, why)
        if not held.pending:  # the store answers: hand the slot over at once rather than at expiry
            self._tasks.spawn(self._hand_back(held.lease), "send")

    def _renewed(self, held: Held, sent: float, future: asyncio.Future[Lease | None]) -> None:
        held.pending -= 1
        if held.gone or future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            self._log.warning("%s slot=%s renew failed: %s; retrying", held.job, fmt_slot(held.lease.slot),
                              short(exc), extra=held.log_fields())
            return
        renewed = future.result()
        if renewed is None:
            if held.releasing:
                self.forget(held)  # the release landed first
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
        self.forget(held)
        self._log.warning("%s slot=%s lease lost attempt=%d: %s", held.job, fmt_slot(held.lease.slot),
                          held.lease.attempt, why, extra=held.log_fields())
        held.on_lost(why)

    # -- the store --------------------------------------------------------------------------------

    def _send(self, lease: Lease, lease_ms: int) -> asyncio.Future[Lease | None]:
        """Renew one lease in one `renew_many` with the other renewals made in this loop step."""
        return self._batch.submit((lease, lease_ms))

    async def _renew_many(self, renewals: list[tuple[Lease, int]]) -> list[Lease | None]:
        # An answer after the leases ended is no use (the deadline judged them lost): bound the call.
        async with asyncio.timeout(max(ms for _, ms in renewals) / 1000):
            return await self._backend.renew_many(renewals)

    async def _hand_back(self, lease: Lease) -> None:
        with contextlib.suppress(Exception):
            await self._backend.release(lease, ReleaseOutcome.HANDOVER)
