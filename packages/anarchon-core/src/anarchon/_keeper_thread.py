"""The keeper beside the loop: who renews the leases while a handler blocks the event loop?

An `async def` handler that blocks the loop (`time.sleep`, a CPU loop, a synchronous driver call) would
stop every renewal of its process, and a backup would start attempt 2 beside it. When the store can be
opened a second time, the lease keeper runs in a thread of its own, with its own event loop and its own
connection, and renews every held lease whether or not the scheduler's loop answers. It asks that loop
for a sign of life every half second while it keeps a lease, and every half heartbeat (at most 2.5 s)
while it keeps none; once the loop has not answered for `block_limit`, the process counts as hung: its
leases are no longer renewed, so another instance takes the runs over.

A run's lease is handed to the thread at once (its handler may block the loop right after), yet it
wakes the thread only when the thread would not look before the lease's first renewal anyway: with
the default heartbeat, never. Releases stay on the scheduler's loop and connection, batched there with
the other runs that end in the same step; the thread renews a lease until its release lands.
"""


from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from ._job import Job
from ._lag import job_names, lag_threshold
from ._process import PROCESS
from ._releases import Releases
from ._renewals import Held, Renewals, hold
from ._tasks import Tasks
from .backends import Lease, LeaseBackend, ReleaseOutcome

__all__ = ["KeeperThread"]

_PING_S = 0.5
"""How often the thread asks the scheduler's loop for a sign of life while it keeps a lease."""
_IDLE_PING_MAX_S = 2.5
"""How often it asks at most while it keeps none (half a heartbeat, at least `_PING_S`): each ask wakes
both loops, which twice a second would cost a replica at rest about a fifth of its CPU."""


class KeeperThread:
    """Renews the leases in a thread of its own, on a second connection to the store; releases stay
    on the scheduler's loop and connection, batched with the other runs ending there."""

    def __init__(self, backend: LeaseBackend, second: LeaseBackend, log: logging.Logger, *,
                 heartbeat_ms: int, block_limit_ms: int, source: str) -> None:
        self.where = f"beside the scheduler's event loop, on a second connection from {source}"
        self._second = second
        self._log = log
        self._heartbeat_ms = heartbeat_ms
        self._block_limit_s = block_limit_ms / 1000
        # (No more than half a heartbeat: a lease posted meanwhile is then mostly taken in before its
        # first renewal without waking the thread, as at `_PING_S`.)
        self._idle_ping_s = max(_PING_S, min(heartbeat_ms / 2000, _IDLE_PING_MAX_S))
        self._tasks = Tasks(log)
        """The tasks on the scheduler's loop: release sends."""
        self._releases = Releases(backend, log, self._tasks)
        self._thread_tasks = Tasks(log)
        self._renewals = Renewals(second, log, self._thread_tasks, self._to_main)
        self._thread: threading.Thread | None = None
        self._main: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._crashed = False
        self._running: Callable[[], list[str]] = list
        self._asked: float | None = None
        """When the unanswered sign-of-life request was sent (None: answered)."""
        self._given_up = False

    def now(self) -> float:
        """The thread loop's clock: the monotonic clock."""
        return time.monotonic()

    async def start(self, running: Callable[[], list[str]]) -> None:
        """Start the thread, open the second connection there; raise what opening it raised."""
        self._main = asyncio.get_running_loop()
        self._running = running
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._serve_in_thread, args=(ready,), name="anarchon-keeper",
                                        daemon=True)
        self._thread.start()
        try:
            await asyncio.wrap_future(ready)
        except BaseException:
            await asyncio.wrap_future(self._ended)
            self._thread.join()
            raise
        PROCESS.add_keeper_thread(self)

    def hold(self, lease: Lease, job: Job, sent: float, on_lost: Callable[[str], None]) -> Held:
        """Hand `lease` to the thread at once: the handler may block this loop right after."""
        assert self._main is not None, "not started"
        # (`on_lost` itself, no closure around it: objects made per run cost garbage collections. The
        # thread's renewals hand it to the scheduler's loop: `_to_main`.)
        held = hold(lease, job, sent, self.now(), on_lost)
        self._renewals.post("keep", held)
        return held

    def _to_main(self, callback: Callable[[str], None], why: str) -> None:
        """Call `callback(why)` on the scheduler's loop (from the thread: a lost lease's run)."""
        main = self._main
        if main is not None:
            with contextlib.suppress(RuntimeError):  # the scheduler's loop has closed
                main.call_soon_threadsafe(callback, why)

    async def confirm(self, held: Held) -> bool:
        """Renew a late lease from the thread (see `Keeper.confirm`)."""
        assert self._loop is not None, "not started"
        future = asyncio.run_coroutine_threadsafe(self._renewals.confirm(held), self._loop)
        return await asyncio.wrap_future(future)

    def release(self, held: Held, outcome: ReleaseOutcome) -> Awaitable[None]:
        """Release on this loop's connection; the thread renews until the release lands."""
        return self._releases.release(held, outcome, self.now, self._forget)

    def _forget(self, held: Held) -> None:
        self._renewals.post("forget", held)

    def drop(self, held: Held) -> None:
        """Have the thread forget `held`."""
        self._renewals.post("forget", held)

    def hand_back(self, lease: Lease, outcome: ReleaseOutcome = ReleaseOutcome.HANDOVER) -> None:
        """Release `lease` (as a handover by default), in the background."""
        self._releases.hand_back(lease, outcome)

    async def stop(self) -> None:
        """Send the queued releases, then let the thread close its connection and end; wait for that."""
        await self._tasks.wait("send", within=5)
        await self._end()

    async def crash(self) -> None:
        """End the thread at once, sending nothing more."""
        self._crashed = True
        self._tasks.cancel()
        await self._end()

    def end_at_exit(self) -> None:
        """Have the thread end at once, sending nothing more (at interpreter exit: the process is going
        away, so its leases expire for the backups); `join` waits for that."""
        self._crashed = True
        self._shut()

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the thread to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the scheduler's side ---------------------------------------------------------------------

    async def _end(self) -> None:
        self._shut()
        await asyncio.wrap_future(self._ended)
        if self._thread is not None:
            self._thread.join()
        PROCESS.forget_keeper_thread(self)
        await self._tasks.wait(within=5)

    def _shut(self) -> None:
        loop, closing = self._loop, self._closing
        if loop is not None and closing is not None:
            with contextlib.suppress(RuntimeError):  # the thread's loop has ended already
                loop.call_soon_threadsafe(closing.set)

    def _answer(self, asked: float) -> None:
        """On the scheduler's loop: the sign of life the thread asked for."""
        lag = time.monotonic() - asked
        given_up, self._given_up = self._given_up, False
        self._asked = None
        if given_up:
            self._log.warning("event loop blocked for %d ms (running jobs: %s), beyond block_limit (%d ms): "
                              "their leases were let go", int(lag * 1000), job_names(self._running()),
                              int(self._block_limit_s * 1000))
        elif lag > lag_threshold(self._heartbeat_ms):
            self._log.warning("event loop blocked for %d ms (running jobs: %s); their leases were renewed "
                              "beside it", int(lag * 1000), job_names(self._running()))

    # -- the thread's side ------------------------------------------------------------------------

    def _serve_in_thread(self, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve(ready))
        finally:
            loop.close()
            self._ended.set_result(None)

    async def _serve(self, ready: concurrent.futures.Future[None]) -> None:
        try:
            await self._second.open()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        self._loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        self._renewals.start()
        self._thread_tasks.spawn(self._watch_main(), "keeper", name="anarchon-keeper-watch")
        ready.set_result(None)
        try:
            await self._closing.wait()
        finally:
            if not self._crashed:
                await self._thread_tasks.wait("send", within=5)
            self._thread_tasks.cancel()
            await self._thread_tasks.wait(within=5)
            with contextlib.suppress(Exception):
                await self._second.close()

    async def _watch_main(self) -> None:
        """Ask the scheduler's loop for a sign of life (less often while no lease is kept); give the
        leases up once it has been silent for `block_limit`."""
        assert self._main is not None
        while True:
            now = time.monotonic()
            next_at = self._renewals.poke(now + _PING_S, now + self._idle_ping_s)
            await asyncio.sleep(next_at - now)
            now = time.monotonic()
            asked = self._asked
            if asked is None:
                self._asked = now
                try:
                    self._main.call_soon_threadsafe(self._answer, now)
                except RuntimeError:  # the scheduler's loop has closed: nothing is left to keep
                    self._renewals.abandon("the scheduler's event loop has closed")
                    return
            elif now - asked >= self._block_limit_s and not self._given_up:
                self._given_up = True
                self._renewals.abandon(
                    f"the event loop has not answered for {int((now - asked) * 1000)} ms, beyond "
                    f"block_limit ({int(self._block_limit_s * 1000)} ms): renewals stop, so that another "
                    "instance takes the run over"
                )
