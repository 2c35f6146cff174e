"""`SqliteBackend`: the DESIGN §3 lease state machine in one SQLite file, for processes on one host."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import sqlite3
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import aiosqlite

from anarchon import BackendError, BackendUnavailable, Duration, parse_duration
from anarchon.backends import (
    Capability,
    ClaimRequest,
    ClaimResult,
    JobState,
    JobStatus,
    Lease,
    LeaseBackendBase,
    LeaseRecord,
    ReleaseOutcome,
    decide,
)

from ._schema import SCHEMA_VERSION, ensure_schema

__all__ = ["SqliteBackend"]

T = TypeVar("T")
Conn = sqlite3.Connection

logger = logging.getLogger("anarchon.sqlite")

NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
"""The store's clock in epoch ms. (`unixepoch('now', 'subsec')` is NULL on SQLite 3.40.)"""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_ENDED = {
    ReleaseOutcome.DONE: JobStatus.DONE,
    ReleaseOutcome.FAILED: JobStatus.FAILED,
    ReleaseOutcome.HANDOVER: JobStatus.RELEASED,
}
_URL_HINT = "use 'sqlite:///relative.db' or 'sqlite:////absolute/path.db'"
_ROW = "slot, attempt, token, owner, status, expires_at, fingerprint, updated_at, head, last_token"


@dataclass(slots=True)
class _Row:
    """One stored record. `head` marks the job's newest slot; `last_token` (kept on the head row) is
    the job's token counter, which a takeover of an older slot under overlap=allow also advances."""

    slot: int
    attempt: int
    token: int
    owner: str
    status: JobStatus
    expires_at: int
    fingerprint: str
    updated_at: int
    head: bool
    last_token: int

    @classmethod
    def of(cls, values: Sequence[Any]) -> _Row:
        slot, attempt, token, owner, status, expires_at, fingerprint, updated_at, head, last_token = values
        return cls(slot, attempt, token, owner, JobStatus(status), expires_at, fingerprint, updated_at,
                   bool(head), last_token)

    def record(self) -> LeaseRecord:
        return LeaseRecord(self.slot, self.attempt, self.token, self.owner, self.status, self.expires_at,
                           self.fingerprint, self.updated_at)


def _transaction(body: Callable[[Conn], T]) -> Callable[[Conn], T]:
    """Wrap `body` in BEGIN IMMEDIATE … COMMIT, rolled back on any error (a failed COMMIT included)."""

    def run(conn: Conn) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body(conn)
            conn.execute("COMMIT")
            return result
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    return run


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _parse_url(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise ValueError(f"invalid SQLite URL {url!r}: the scheme must be 'sqlite'; {_URL_HINT}")
    if parts.netloc:
        raise ValueError(
            f"invalid SQLite URL {url!r}: a SQLite file has no host ({parts.netloc!r}); {_URL_HINT}"
        )
    if not parts.path.startswith("/") or len(parts.path) < 2:
        raise ValueError(f"invalid SQLite URL {url!r}: no file path; {_URL_HINT}")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - {"table", "busy_timeout"})
    if unknown:
        raise ValueError(
            f"invalid SQLite URL {url!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
            "the URL accepts 'table' and 'busy_timeout'"
        )
    return unquote(parts.path[1:]), options


class SqliteBackend(LeaseBackendBase):
    """Leases in a SQLite file shared by processes on one host (WAL, `BEGIN IMMEDIATE`, store time).

    Every operation is one statement or one `BEGIN IMMEDIATE` transaction that runs to COMMIT or
    ROLLBACK on the connection's thread, even when the awaiting task is cancelled.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.CLAIM, Capability.LEASE, Capability.INSPECT,
         Capability.RELEASE_MANY, Capability.RENEW_MANY}
    )
    url_schemes: ClassVar[tuple[str, ...]] = ("sqlite",)

    def __init__(
        self, path_or_url: str | os.PathLike[str], *, table: str = "anarchon_jobs",
        busy_timeout: Duration = "5s",
    ) -> None:
        raw = os.fspath(path_or_url)
        if not isinstance(raw, str) or not raw:
            raise ValueError(f"invalid SQLite path {path_or_url!r}: use a file path or {_URL_HINT[4:]}")
        options: dict[str, str] = {}
        if raw.lower().startswith("sqlite:"):
            raw, options = _parse_url(raw)
        if "table" in options:
            if table != "anarchon_jobs" and table != options["table"]:
                raise ValueError(
                    f"table given twice: {table!r} and {options['table']!r} in the URL; keep one"
                )
            table = options["table"]
        if "busy_timeout" in options:
            busy_timeout = options["busy_timeout"]
        if raw == ":memory:" or raw.startswith("file:"):
            raise ValueError(
                f"invalid SQLite path {raw!r}: anarchon shares one file between processes; give a file "
                "path (for a single process, use anarchon.MemoryBackend)"
            )
        if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
            raise ValueError(
                f"invalid table name {table!r}: use letters, digits and underscores, starting with a "
                "letter or underscore (at most 63 characters)"
            )
        self.path = raw
        """The database file, as given (relative paths resolve against the working directory)."""
        self.table = table
        """The table that holds the records."""
        self.busy_timeout_ms = parse_duration(busy_timeout, name="busy_timeout", allow_zero=True)
        """How long SQLite waits for another connection's write lock before answering 'locked'."""
        self._db: aiosqlite.Connection | None = None
        self._ready_lock = asyncio.Lock()
        t = f'"{table}"'
        self._sql_head = f"SELECT {_ROW} FROM {t} WHERE namespace = ? AND job = ? AND head = 1"
        self._sql_other = f"SELECT {_ROW} FROM {t} WHERE namespace = ? AND job = ? AND slot = ? AND head = 0"
        self._sql_prune = (f"DELETE FROM {t} WHERE namespace = ? AND job = ? AND head = 0 "
                           "AND status <> 'running'")
        self._sql_demote = f"UPDATE {t} SET head = 0 WHERE namespace = ? AND job = ? AND slot = ?"
        self._sql_delete = f"DELETE FROM {t} WHERE namespace = ? AND job = ? AND slot = ?"
        self._sql_insert = (
            f"INSERT INTO {t} (namespace, job, {_ROW}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)"
        )
        self._sql_takeover = (
            f"UPDATE {t} SET attempt = ?, token = ?, owner = ?, status = ?, expires_at = ?, "
            "fingerprint = ?, updated_at = ? WHERE namespace = ? AND job = ? AND slot = ?"
        )
        self._sql_counter = f"UPDATE {t} SET last_token = ? WHERE namespace = ? AND job = ? AND head = 1"
        self._sql_renew = (
            f"UPDATE {t} SET expires_at = {NOW_MS} + ?, updated_at = {NOW_MS} WHERE namespace = ? "
            "AND job = ? AND slot = ? AND token = ? AND owner = ? AND status = 'running' RETURNING expires_at"
        )
        self._sql_release = (
            f"UPDATE {t} SET status = ?, updated_at = {NOW_MS} WHERE namespace = ? AND job = ? "
            "AND slot = ? AND token = ? AND owner = ? AND status = 'running' RETURNING head"
        )
        self._sql_inspect = f"SELECT {_ROW}, {NOW_MS} FROM {t} WHERE namespace = ? AND job = ? AND head = 1"
        self._sql_jobs = (f"SELECT job, {_ROW}, {NOW_MS} FROM {t} WHERE namespace = ? AND head = 1 "
                          "ORDER BY job")

    @classmethod
    def from_url(cls, url: str) -> SqliteBackend:
        """`sqlite:///relative.db` or `sqlite:////abs/path.db`, optionally `?table=…&busy_timeout=…`."""
        return cls(url)

    @property
    def url(self) -> str:
        """The file as a `sqlite:///` URL (a SQLite file has no password to redact)."""
        return f"sqlite:///{self.path}"

    # -- connection --------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (WAL mode) and create or check the schema; idempotent."""
        async with self._ready_lock:
            if self._db is not None:
                return
            self._check_file()
            try:
                db = await aiosqlite.connect(
                    self.path, isolation_level=None, timeout=self.busy_timeout_ms / 1000
                )
            except sqlite3.Error as exc:
                raise self._sqlite_error(exc, "open") from exc
            try:
                await self._call(db, "open", self._prepare_conn)
            except BaseException:
                await db.close()
                raise
            self._db = db
            logger.debug("opened %s (table %r, schema version %d)", self.url, self.table, SCHEMA_VERSION)

    async def close(self) -> None:
        """Close the connection; idempotent."""
        async with self._ready_lock:
            db, self._db = self._db, None
            if db is not None:
                await db.close()

    def _check_file(self) -> None:
        """Refuse, before SQLite touches anything, a missing directory, a foreign or a read-only file."""
        path = Path(self.path)
        parent = path.parent
        if not parent.is_dir():
            raise BackendUnavailable(
                f"cannot open {self.url}: the directory {str(parent)!r} does not exist; create it, "
                "or point the URL at an existing directory"
            )
        if not path.exists():
            if not os.access(parent, os.W_OK | os.X_OK):
                raise BackendUnavailable(
                    f"cannot create {self.url}: the directory {str(parent)!r} is not writable; "
                    "fix its permissions or choose another path"
                )
            return
        if not path.is_file():
            raise BackendError(f"cannot open {self.url}: {self.path!r} is not a regular file")
        try:
            with path.open("rb") as f:
                header = f.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise BackendUnavailable(f"cannot read {self.url}: {exc}") from exc
        if header and header != _SQLITE_MAGIC:
            raise BackendError(
                f"{self.path!r} is not a SQLite database (it starts with {header[:8]!r}); it was left "
                "untouched. Point the URL at a new file or at an anarchon SQLite database"
            )
        mode = path.stat().st_mode
        if not os.access(path, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise BackendUnavailable(
                f"cannot use {self.url}: the file is read-only (mode {stat.filemode(mode)}); anarchon "
                "writes a lease on every claim. Make it writable (chmod u+w) or use another file"
            )

    def _prepare_conn(self, conn: Conn) -> None:
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the header: is it SQLite?
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise BackendUnavailable(
                f"cannot use {self.url}: SQLite refused WAL mode (journal_mode is {mode!r}); "
                "put the file on a local disk the process can write"
            )
        # In WAL mode NORMAL never corrupts the file; a power loss may undo the last commits (see docs).
        conn.execute("PRAGMA synchronous = NORMAL")
        _transaction(lambda c: ensure_schema(c, self.table, self.url))(conn)

    # -- running one operation -----------------------------------------------------------------

    def _connection(self, what: str) -> aiosqlite.Connection:
        if self._db is None:
            raise BackendUnavailable(
                f"{what} on {self.url}: the backend is not open; call `await open()` first"
            )
        return self._db

    async def _call(self, db: aiosqlite.Connection, what: str, fn: Callable[[Conn], T]) -> T:
        """Run `fn(connection)` on the connection's thread; retry 'database is locked' with backoff.

        aiosqlite queues one function per call on its thread and runs it to the end whatever happens to
        the awaiting task, so `fn` (a whole transaction) cannot be cut between BEGIN and COMMIT.
        """
        delay, slept = 0.05, 0.0
        budget = max(self.busy_timeout_ms / 1000, 1.0)
        while True:
            try:
                return cast(T, await cast(Any, db)._execute(lambda: fn(cast(Any, db)._conn)))
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    raise self._sqlite_error(exc, what) from exc
                if slept >= budget:
                    raise BackendUnavailable(
                        f"{what} on {self.url}: the database stayed locked for more than "
                        f"busy_timeout={self.busy_timeout_ms} ms plus {slept:.1f} s of retries; another "
                        "connection holds a long write transaction"
                    ) from exc
                pause = delay * (0.5 + random.random())
                logger.warning(
                    "%s on %s: %s beyond busy_timeout=%d ms; retrying in %d ms",
                    what, self.url, exc, self.busy_timeout_ms, pause * 1000,
                )
                await asyncio.sleep(pause)
                slept += pause
                delay = min(delay * 2, 1.0)
            except ValueError as exc:  # aiosqlite: "Connection closed"
                raise BackendUnavailable(f"{what} on {self.url}: {exc}") from exc

    def _sqlite_error(self, exc: sqlite3.Error, what: str) -> BackendError:
        """The one place where sqlite3's exceptions become anarchon's."""
        text = str(exc)
        lower = text.lower()
        if "not a database" in lower:
            return BackendError(
                f"{self.path!r} is not a SQLite database ({text}); point the URL at a new file or at an "
                "anarchon SQLite database"
            )
        if "readonly" in lower or "read-only" in lower:
            return BackendUnavailable(
                f"{what} on {self.url}: the database is read-only ({text}); make the file and its "
                "directory writable"
            )
        if "unable to open" in lower:
            return BackendUnavailable(
                f"cannot open {self.url} ({text}); check that the directory exists and is writable"
            )
        if isinstance(exc, sqlite3.OperationalError):
            return BackendUnavailable(f"{what} on {self.url} failed: {text}")
        return BackendError(f"{what} on {self.url} failed: {type(exc).__name__}: {text}")

    # -- the state machine (runs on the connection's thread, inside BEGIN IMMEDIATE) -------------

    def _claim_all(self, conn: Conn, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        now = int(conn.execute(f"SELECT {NOW_MS}").fetchone()[0])
        return [self._claim_one(conn, r, now) for r in requests]

    def _claim_one(self, conn: Conn, r: ClaimRequest, now: int) -> ClaimResult:
        key = (r.namespace, r.job)
        found = conn.execute(self._sql_head, key).fetchone()
        head = None if found is None else _Row.of(found)
        kept = None
        if head is not None and r.slot < head.slot:  # only older slots can have a kept row
            other = conn.execute(self._sql_other, (*key, r.slot)).fetchone()
            kept = None if other is None else _Row.of(other).record()
        decision = decide(
            None if head is None else head.record(), r, now, token=0 if head is None else head.last_token,
            kept=kept,
        )
        w = decision.write
        if w is None:
            return decision.result
        fields = (w.attempt, w.token, w.owner, w.status.value, w.expires_at, w.fingerprint, w.updated_at)
        if decision.new_slot:
            conn.execute(self._sql_prune, key)
            if head is not None:
                conn.execute(self._sql_demote if decision.keep_previous else self._sql_delete,
                             (*key, head.slot))
            conn.execute(self._sql_insert, (*key, w.slot, *fields, w.token))
        else:
            conn.execute(self._sql_takeover, (*fields, *key, w.slot))
            conn.execute(self._sql_counter, (w.token, *key))
        return decision.result

    def _release_tx(self, conn: Conn, lease: Lease, status: JobStatus) -> bool:
        key = (lease.namespace, lease.job, lease.slot)
        found = conn.execute(self._sql_release, (status.value, *key, lease.token, lease.owner)).fetchone()
        if found is None:
            return False
        if not found[0] and status is not JobStatus.RELEASED:
            # An older slot kept under overlap=allow that is over: forget it. One handed over stays
            # (released) for a backup to take over, until a newer slot starts (`_sql_prune`).
            conn.execute(self._sql_delete, key)
        return True

    def _state(self, namespace: str, job: str, values: Sequence[Any]) -> JobState:
        row = _Row.of(values[:-1])
        return JobState.of(row.record(), namespace=namespace, job=job, now=int(values[-1]))

    # -- the protocol ----------------------------------------------------------------------------

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Claim one slot in one `BEGIN IMMEDIATE` transaction (see `LeaseBackend.claim`)."""
        return (await self.claim_many([request]))[0]

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch in one `BEGIN IMMEDIATE` transaction; results in request order."""
        if not requests:
            return []
        batch = list(requests)
        db = self._connection("claim")
        return await self._call(db, "claim", _transaction(lambda c: self._claim_all(c, batch)))

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        """Extend a lease still held by its owner, in one UPDATE (see `LeaseBackend.renew`)."""
        db = self._connection("renew")
        return await self._call(db, "renew", lambda conn: self._renew_one(conn, lease, lease_ms))

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Extend a batch of leases in one `BEGIN IMMEDIATE` transaction; results in order."""
        if not renewals:
            return []
        db = self._connection("renew")

        def body(conn: Conn) -> list[Lease | None]:
            return [self._renew_one(conn, lease, lease_ms) for lease, lease_ms in renewals]

        return await self._call(db, "renew", _transaction(body))

    def _renew_one(self, conn: Conn, lease: Lease, lease_ms: int) -> Lease | None:
        params = (lease_ms, lease.namespace, lease.job, lease.slot, lease.token, lease.owner)
        found = conn.execute(self._sql_renew, params).fetchone()
        if found is None:
            return None
        return Lease(lease.namespace, lease.job, lease.slot, lease.attempt, lease.token, lease.owner,
                     int(found[0]))

    async def release(self, lease: Lease, outcome: ReleaseOutcome) -> bool:
        """End a run: done, failed or released for handover (see `LeaseBackend.release`)."""
        db = self._connection("release")
        status = _ENDED[outcome]
        return await self._call(db, "release", _transaction(lambda c: self._release_tx(c, lease, status)))

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End a batch of runs in one `BEGIN IMMEDIATE` transaction; results in order."""
        if not releases:
            return []
        db = self._connection("release")

        def body(conn: Conn) -> list[bool]:
            return [self._release_tx(conn, lease, _ENDED[outcome]) for lease, outcome in releases]

        return await self._call(db, "release", _transaction(body))

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Read one job's newest record."""
        db = self._connection("inspect")

        def read(conn: Conn) -> JobState | None:
            found = conn.execute(self._sql_inspect, (namespace, job)).fetchone()
            return None if found is None else self._state(namespace, job, found)

        return await self._call(db, "inspect", read)

    async def jobs(self, namespace: str) -> list[JobState]:
        """Read every job's newest record in a namespace, sorted by job name."""
        db = self._connection("jobs")

        def read(conn: Conn) -> list[JobState]:
            rows = conn.execute(self._sql_jobs, (namespace,)).fetchall()
            return [self._state(namespace, values[0], values[1:]) for values in rows]

        return await self._call(db, "jobs", read)
