"""Renewals: when is each held lease renewed, and is it still the holder's?

One deadline heap for every lease the process holds. Each lease is renewed every heartbeat, counted
from when the last renewal was *sent*, not from when it was answered, so a slow answer never delays
the next renewal; the renewals due together go out in one `renew_many`. A lease is the holder's until
(the send time of the last confirmed claim or renewal) + lease, on this loop's monotonic clock: a lease
whose deadline passes unconfirmed is lost, and its run is told.

`Renewals` runs on whichever event loop starts it: the scheduler's own, or the keeper's thread. From
another thread, leases are handed over through `post`, which wakes this loop only when neither its
renewal task nor its next `poke` (the keeper thread's check) comes before the lease's first
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
from ._wakeup import Wakeup
from .backends import Lease, LeaseBackend, ReleaseOutcome

__all__ = ["Held", "Renewals", "hold"]

# Renewals due within this many seconds of each other go out in one batch.
_GROUP_S = 0.01
# A lease with less than this many heartbeats left when its handler would start is renewed first.
_START_MARGIN = 1.5
# A failed renewal is sent again after this long, doubling up to a heartbeat, not a heartbeat later:
# a connection reset costs one reconnection, not the lease.
_RETRY_S = 0.05
# The first renewal of a lease goes out half a heartbeat after its claim, not a whole one, when the
# renewal connection has not answered for this long: a connection dropped while idle (a NAT, a
# server's idle timeout) is re-established with more of the lease left. (A run over by then costs
# no renewal at all.)
_COLD_S = 10.0
# A lease lost while the store does not answer is handed back (released as a handover) until the store
# confirms it, for at most this long: a renewal held in the network and delivered later cannot revive it.
_HAND_BACK_S = 300.0


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
    failures: int = 0
    """Renewals that failed in a row (each is sent again at once, with backoff)."""
    entry: int = 0
    """The sequence number of its live heap entry (0: none)."""
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
    # (Positional: this runs once per run. After on_lost: late, next_renew.)
    return Held(lease, job.name, opts.lease_ms, heartbeat_s, sent, deadline, on_lost,
                deadline - now < _START_MARGIN * heartbeat_s, sent + heartbeat_s)


class Renewals:
    """Renews the leases it keeps, on the event loop that starts it, through `backend`."""

    def __init__(self, backend: LeaseBackend, log: logging.Logger, tasks: Tasks,
                 deliver: Callable[[Callable[[str], None], str], None] | None = None) -> None:
        """`deliver(on_lost, why)` tells a lost lease's holder, where that is not this loop's code
        (the keeper thread's leases: on the scheduler's loop); by default `on_lost` is called here."""
        self._backend = backend
        self._log = log
        self._tasks = tasks
        self._deliver = deliver
        # (due time, sequence): numbers only, so the garbage collector stops tracking the entries, and a
        # lease released or lost is let go at once, not kept alive by its entry until the entry's time.
        self._heap: list[tuple[float, int]] = []
        self._due: dict[int, Held] = {}
        """The live heap entries' leases, by sequence number."""
        self._seq = 0
        self._held: set[Held] = set()
        self._wake = Wakeup()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: collections.deque[tuple[Literal["keep", "forget"], Held]] = collections.deque()
        self._wake_at = math.inf
        """When this loop's renewal task wakes next (published for `post`)."""
        self._poke_at = math.inf
        """When `poke` is called next (published for `post`)."""
        self._answered_at = -math.inf
        """When the store last answered a renewal on this connection (this loop's clock)."""
        self._batch: StepBatcher[tuple[Lease, int], Lease | None] = StepBatcher(
            self._renew_many, lambda c: tasks.spawn(c, "send"), f"{backend!r}.renew_many")

    def start(self) -> None:
        """Start the renewal task on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._tasks.spawn(self._tick(), "keeper", name="anarchon-renewals")

    def keep(self, held: Held) -> None:
        """Keep `held` (on this loop); a late one is renewed by `confirm` first. On a connection idle
        for long, the first renewal goes out at once, so a reconnection has the whole lease to finish."""
        self._held.add(held)
        if not held.late and not held.gone:
            held.next_renew = self._first_renewal(held)
            self._schedule(held)

    def _first_renewal(self, held: Held) -> float:
        """When `held` is renewed next: a new lease a heartbeat after its claim, or half of one on a cold
        connection (until the store answers again, every new lease is: they go out together)."""
        if held.next_renew == held.sent + held.heartbeat_s and self._answered_at + _COLD_S < held.sent:
            return held.sent + held.heartbeat_s / 2
        return held.next_renew

    def forget(self, held: Held) -> None:
        """Stop renewing `held` (on this loop)."""
        held.gone = True
        self._held.discard(held)
        if held.entry:
            del self._due[held.entry]
            held.entry = 0

    def post(self, what: Literal["keep", "forget"], held: Held) -> None:
        """`keep` or `forget` from another thread. The renewal task is woken only when it would
        otherwise sleep past the lease's first renewal: a burst of runs costs one wake-up at most."""
        self._inbox.append((what, held))
        # (`_tick` publishes `_wake_at`, and `poke` `_poke_at`, after they last looked at the inbox.)
        due = min(self._wake_at, self._poke_at)
        first = self._first_renewal(held)
        if what == "keep" and not held.late and first < due and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing is renewed any more
                self._loop.call_soon_threadsafe(self._wake.set)

    def poke(self, next_at: float, idle_at: float | None = None) -> float:
        """Take in what was posted (on this loop); the next poke comes at `next_at` or sooner, or, when
        no lease is kept, at `idle_at` (if given) or sooner. Returns when it comes."""
        self._drain()
        if idle_at is not None and not self._held:
            next_at = idle_at
        self._poke_at = next_at
        heap = self._heap
        if heap and heap[0][1] not in self._due:
            self._wake.set()  # the renewal task would wake for a lease released since: let it sleep on
        return next_at

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
        self._answered_at = max(self._answered_at, sent)
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
        due = self._due
        if held.entry:
            del due[held.entry]
        self._seq += 1
        held.entry = seq = self._seq
        due[seq] = held
        heapq.heappush(self._heap, (min(held.next_renew, held.deadline), seq))
        if self._heap[0][1] == seq:
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
        heap, due = self._heap, self._due
        while True:
            self._drain()
            while heap and heap[0][1] not in due:
                heapq.heappop(heap)  # a lease released or lost since: nothing to do at its time
            self._wake_at = heap[0][0] if heap else math.inf
            if self._inbox:
                continue  # posted after the drain: look again before sleeping
            now = loop.time()
            delay = self._wake_at - now
            if delay > 0:
                self._wake.clear()
                await self._wake.wait(None if math.isinf(delay) else delay)
                continue
            limit = now + _GROUP_S
            while heap:
                when, seq = heap[0]
                held = due.get(seq)
                if held is None:
                    heapq.heappop(heap)  # a lease released or lost since
                    continue
                if when > now and not (when <= limit and held.next_renew <= limit):
                    break
                heapq.heappop(heap)
                del due[seq]
                held.entry = 0
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
        # Hand the slot over at once rather than at expiry; and should a renewal still be on its way
        # (a partition delivers it later), the release lands after it or makes it fail: it cannot
        # revive a lease its holder has given up.
        self._tasks.spawn(self._hand_back(held.lease), "send")

    def _renewed(self, held: Held, sent: float, future: asyncio.Future[Lease | None]) -> None:
        held.pending -= 1
        if future.cancelled():
            return
        exc = future.exception()  # (retrieved even for a lease gone since: no unretrieved futures)
        if held.gone:
            return
        if exc is not None:
            # Send it again at once (a reset connection is re-established on the way), backing off
            # while the store stays away, never later than the next heartbeat's renewal.
            retry = min(_RETRY_S * 2 ** held.failures, held.heartbeat_s)
            held.failures += 1
            level = logging.WARNING if held.failures == 1 else logging.DEBUG
            self._log.log(level, "%s slot=%s renew failed: %s; retrying in %d ms", held.job,
                          fmt_slot(held.lease.slot), short(exc), int(retry * 1000), extra=held.log_fields())
            now = asyncio.get_running_loop().time()
            if now + retry < held.next_renew:
                held.next_renew = now + retry
                self._schedule(held)
            return
        self._answered_at = max(self._answered_at, sent)
        if held.failures:
            self._log.info("%s slot=%s renewed again after %d failed renewal(s)", held.job,
                           fmt_slot(held.lease.slot), held.failures, extra=held.log_fields())
            held.failures = 0
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
        if self._deliver is None:
            held.on_lost(why)
        else:
            self._deliver(held.on_lost, why)

    # -- the store --------------------------------------------------------------------------------

    def _send(self, lease: Lease, lease_ms: int) -> asyncio.Future[Lease | None]:
        """Renew one lease in one `renew_many` with the other renewals made in this loop step."""
        return self._batch.submit((lease, lease_ms))

    async def _renew_many(self, renewals: list[tuple[Lease, int]]) -> list[Lease | None]:
        # An answer after the leases ended is no use (the deadline judged them lost): bound the call.
        async with asyncio.timeout(max(ms for _, ms in renewals) / 1000):
            return await self._backend.renew_many(renewals)

    async def _hand_back(self, lease: Lease) -> None:
        """Release `lease` as a handover, retrying while the store does not answer (for a while)."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + _HAND_BACK_S
        delay = _RETRY_S
        while True:
            try:
                await self._backend.release(lease, ReleaseOutcome.HANDOVER)
                return
            except Exception:
                if loop.time() + delay > give_up:
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
