"""The LISTEN side of handover: one dedicated connection, outside the pool, that reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from anarchon.backends import ReleaseCallback, WinsCallback

__all__ = ["PROBE", "Listener"]

PROBE = "anarchon-probe-"
"""How the payload of a start-up check's NOTIFY begins (a release's payload is a JSON array, an
announcement of won claims a JSON object)."""

log = logging.getLogger("anarchon.postgres")

Connect = Callable[[], Awaitable[asyncpg.Connection]]
Disconnect = Callable[[asyncpg.Connection], Awaitable[None]]


class Listener:
    """LISTENs on one channel and calls back subscribers of the notified namespace, on the loop: of
    releases (`add`) and of won claims (`add_wins`).

    asyncpg's pool resets connections with `UNLISTEN *`, and PgBouncer in transaction mode drops
    LISTEN between transactions, so the listener holds one connection for as long as it listens.
    When it drops (server restart, `pg_terminate_backend`), the listener reconnects with backoff;
    releases pushed while it was away are missed, and backups fall back to the holder's lease expiry;
    wins announced meanwhile are missed too, and cost the other replicas a claim each.
    """

    def __init__(self, connect: Connect, disconnect: Disconnect, channel: str, where: str) -> None:
        self._connect = connect
        self._disconnect = disconnect
        self._channel = channel
        self._where = where
        self._subs: list[tuple[str, ReleaseCallback]] = []
        self._win_subs: list[tuple[str, WinsCallback]] = []
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.connected = asyncio.Event()
        """Set while the LISTEN connection is up (tests wait on it)."""
        self.reconnects = 0
        """How many times the connection was re-established after a drop."""
        self._probe: tuple[str, asyncio.Event] | None = None

    @property
    def server_pid(self) -> int | None:
        """The server process of the LISTEN connection, while connected."""
        conn = self._conn
        return None if conn is None or conn.is_closed() else int(conn.get_server_pid())

    def add(self, namespace: str, callback: ReleaseCallback) -> None:
        """Call `callback(job, slot)` for releases in `namespace`."""
        self._subs.append((namespace, callback))

    def add_wins(self, namespace: str, callback: WinsCallback) -> None:
        """Call `callback(owner, [(job, slot), ...])` for the claims won in `namespace`."""
        self._win_subs.append((namespace, callback))

    async def start(self) -> None:
        """Connect once (logging a failure) and keep the connection up in the background."""
        if self._task is not None:
            return
        try:
            await self._open()
        except Exception as exc:  # keep trying in the background; claims still work without push
            log.warning("LISTEN connection to %s failed: %s; retrying", self._where, _short(exc))
            self._lost.set()
        self._task = asyncio.create_task(self._supervise(), name="anarchon-postgres-listen")

    async def _open(self) -> None:
        conn = await self._connect()
        try:
            conn.add_termination_listener(self._on_terminated)
            await conn.add_listener(self._channel, self._on_notify)
        except BaseException:
            await self._drop(conn)
            raise
        self._conn = conn
        self._lost.clear()
        self.connected.set()

    def _on_terminated(self, conn: Any) -> None:
        if conn is self._conn or self._conn is None:
            self.connected.clear()
            self._lost.set()

    async def _supervise(self) -> None:
        delay = 0.05
        while not self._closed:
            await self._lost.wait()
            self.connected.clear()
            if self._conn is not None:
                conn, self._conn = self._conn, None
                await self._drop(conn)
            while not self._closed:
                try:
                    await self._open()
                except Exception as exc:
                    log.debug("LISTEN reconnect to %s failed: %s", self._where, _short(exc))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                self.reconnects += 1
                delay = 0.05
                log.info("LISTEN connection to %s re-established", self._where)
                break

    def expect(self, token: str | None) -> asyncio.Event:
        """An event set when a notification whose payload is `token` arrives (None: stop expecting)."""
        arrived = asyncio.Event()
        self._probe = None if token is None else (token, arrived)
        return arrived

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload.startswith(PROBE):  # a backend's start-up check, its own or another's
            if self._probe is not None and payload == self._probe[0]:
                self._probe[1].set()
            return
        try:
            message = json.loads(payload)
        except ValueError:
            message = None
        if isinstance(message, dict):
            self._dispatch_wins(message, payload)
            return
        try:
            namespace, job, slot = message
        except (ValueError, TypeError):
            log.warning("ignoring a malformed release notification: %r", payload[:200])
            return
        for ns, callback in list(self._subs):
            if ns == namespace:
                try:
                    callback(job, int(slot))
                except Exception:
                    log.exception("release callback for %s failed", job)

    def _dispatch_wins(self, message: dict[str, Any], payload: str) -> None:
        """Call the subscribers of an announcement's namespace with its owner and wins."""
        try:
            namespace, owner = message["namespace"], message["owner"]
            wins = [(str(job), int(slot)) for job, slot in message["wins"]]
            if not isinstance(namespace, str) or not isinstance(owner, str):
                raise TypeError(namespace, owner)
        except (KeyError, ValueError, TypeError):
            log.warning("ignoring a malformed notification of won claims: %r", payload[:200])
            return
        for ns, callback in list(self._win_subs):
            if ns == namespace:
                try:
                    callback(owner, wins)
                except Exception:
                    log.exception("wins callback failed for %d job(s) won by %s", len(wins), owner)

    async def close(self) -> None:
        """Stop listening and close the connection; idempotent."""
        self._closed = True
        self._lost.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        conn, self._conn = self._conn, None
        self.connected.clear()
        if conn is not None:
            await self._drop(conn)

    async def _drop(self, conn: asyncpg.Connection) -> None:
        """Stop listening on `conn` and hand it back (closed, or returned to its pool)."""
        with contextlib.suppress(Exception):
            conn.remove_termination_listener(self._on_terminated)
            if not conn.is_closed():
                await conn.remove_listener(self._channel, self._on_notify)
        with contextlib.suppress(Exception):
            await self._disconnect(conn)


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
