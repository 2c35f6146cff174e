"""`SqliteBackend`: the lease state machine in one SQLite file, for processes on one host."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import logging
import os
import random
import re
import sqlite3
import stat
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from anarchon import BackendError, BackendUnavailable, Duration, parse_duration
from anarchon.backends import (
    ERROR_LIMIT,
    SCHEDULE_PARTITIONS,
    Capability,
    CatalogueEntry,
    ClaimRequest,
    ClaimResult,
    JobControl,
    JobState,
    JobStatus,
    Lease,
    LeaseBackendBase,
    LeaseRecord,
    ReleaseOutcome,
    RunRecord,
    ScheduleRecord,
    ScheduleWrite,
    ScheduleWriteResult,
    check_expect,
    check_schedule_batch,
    decide,
    decide_release,
    decide_renew,
    schedule_partition,
)

from ._schema import (
    SCHEMA_VERSION,
    catalogue_table,
    controls_table,
    ensure_controls,
    ensure_history,
    ensure_schedules,
    ensure_schema,
    fill_partitions,
    history_table,
    schedule_versions_table,
    schedules_table,
)

__all__ = ["SqliteBackend"]

T = TypeVar("T")
Conn = sqlite3.Connection

logger = logging.getLogger("anarchon.sqlite")

NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
"""The store's clock in epoch ms. (`unixepoch('now', 'subsec')` is NULL on SQLite 3.40.)"""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_URL_HINT = "use 'sqlite:///relative.db' or 'sqlite:////absolute/path.db'"
_ROW = "slot, attempt, token, owner, status, expires_at, fingerprint, updated_at, head, last_token"


_SCHEDULE = "id, task, spec, args, options, paused, next_due, version, created_at, updated_at"
"""A schedule's columns, in `ScheduleRecord`'s order."""
_PUT_CHUNK = 1_000
"""Writes per transaction of `put_schedules`: a few milliseconds of the database's one write lock."""
_GET_CHUNK = 500
"""Ids per statement of `get_schedules` (SQLite binds at most 32,766 parameters a statement)."""
_FILL_CHUNK = 1_000
"""Rows of an older release given their partition per transaction, at open."""
_ARMS = 250
"""Ranges of the due index per statement of a read by partitions (a compound SELECT has at most 500)."""


def _schedule(row: Sequence[Any]) -> ScheduleRecord:
    """The stored schedule in a row of `_SCHEDULE`."""
    schedule_id, task, spec, args, options, paused, next_due, version, created_at, updated_at = row
    return ScheduleRecord(schedule_id, task, spec, args, options, bool(paused), next_due, version, created_at,
                          updated_at)


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix`, in code point order (None: no
    bound), so that a prefix is a range of an index: `prefix <= id < prefix_end(prefix)`."""
    chars = list(prefix)
    while chars:
        last = ord(chars[-1]) + 1
        if last <= 0x10FFFF:
            chars[-1] = chr(0xE000 if 0xD800 <= last <= 0xDFFF else last)  # (no text holds a surrogate)
            return "".join(chars)
        chars.pop()
    return None


def _record(values: Sequence[Any]) -> LeaseRecord:
    """The record in a row's first eight columns."""
    slot, attempt, token, owner, status, expires_at, fingerprint, updated_at = values[:8]
    return LeaseRecord(slot, attempt, token, owner, JobStatus(status), expires_at, fingerprint, updated_at)


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


def _snapshot(body: Callable[[Conn], T]) -> Callable[[Conn], T]:
    """Wrap reads in one deferred transaction: one snapshot of the file for all of them (WAL readers
    never wait for the write lock)."""

    def run(conn: Conn) -> T:
        conn.execute("BEGIN")
        try:
            return body(conn)
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    return run


class _Connection:
    """A `sqlite3` connection and the one thread that uses it.

    Each call queues one function on the thread, which runs it to the end whatever happens to the
    awaiting task: a whole transaction cannot be cut between BEGIN and COMMIT.
    """

    def __init__(self, path: str, timeout_s: float,
                 connect: Callable[[str, float], Conn] | None = None) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="anarchon-sqlite")
        self._conn = self._thread.submit(connect or _sqlite3_connect, path, timeout_s)
        self._opened: Conn | None = None
        """The connection once it has opened: later calls need not wait for `_conn` again (waiting
        on a done future from another thread still costs the loop a wake-up through its self-pipe)."""

    async def run(self, fn: Callable[[Conn], T]) -> T:
        """Run `fn(connection)` on the connection's thread."""
        conn = self._opened
        if conn is None:
            conn = self._opened = await asyncio.wrap_future(self._conn)
        try:
            done = self._thread.submit(fn, conn)
        except RuntimeError as exc:  # the thread has ended: the backend was closed
            raise BackendUnavailable(f"the SQLite connection is closed ({exc})") from exc
        return await asyncio.wrap_future(done)

    async def close(self) -> None:
        """Close the connection on its thread (if it ever opened), then end the thread."""
        try:
            with contextlib.suppress(Exception):
                await self.run(lambda conn: conn.close())
        finally:
            self._thread.shutdown(wait=False)


def _sqlite3_connect(path: str, timeout_s: float) -> Conn:
    return sqlite3.connect(path, timeout=timeout_s, isolation_level=None)


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _parse_url(url: str, scheme: str = "sqlite") -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if parts.scheme.lower() != scheme:
        raise ValueError(f"invalid SQLite URL {url!r}: the scheme must be {scheme!r}; {_URL_HINT}")
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

    Every operation is one `BEGIN IMMEDIATE` transaction, or one read, that runs to COMMIT or
    ROLLBACK on the connection's own thread, even when the awaiting task is cancelled. The lease
    rules are the core's (`decide`, `decide_renew`, `decide_release`), applied inside it.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.CLAIM, Capability.LEASE, Capability.INSPECT, Capability.CONTROL, Capability.HISTORY,
         Capability.FORGET, Capability.SCHEDULES}
    )
    url_schemes: ClassVar[tuple[str, ...]] = ("sqlite",)
    host_clock: ClassVar[bool] = True
    """Store time is the host's clock, read by SQLite in each process: every process sharing the file
    runs on one host, so they share one clock (the conformance kit moves only Python's clock)."""

    def __init__(
        self, path_or_url: str | os.PathLike[str], *, table: str = "anarchon_jobs",
        busy_timeout: Duration = "5s",
    ) -> None:
        raw = os.fspath(path_or_url)
        if not isinstance(raw, str) or not raw:
            raise ValueError(f"invalid SQLite path {path_or_url!r}: use a file path or {_URL_HINT[4:]}")
        options: dict[str, str] = {}
        scheme = self.url_schemes[0]
        if raw.lower().startswith(f"{scheme}:"):
            raw, options = _parse_url(raw, scheme)
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
        self._use(raw, None, {"table": table, "busy_timeout": busy_timeout})
        t = f'"{table}"'
        where = "WHERE namespace = ? AND job = ?"
        self._sql_head = f"SELECT {_ROW} FROM {t} {where} AND head = 1"
        self._sql_slot = f"SELECT {_ROW} FROM {t} {where} AND slot = ?"
        self._sql_prune = f"DELETE FROM {t} {where} AND head = 0 AND status <> 'running'"
        self._sql_demote = f"UPDATE {t} SET head = 0 {where} AND slot = ?"
        self._sql_delete = f"DELETE FROM {t} {where} AND slot = ?"
        self._sql_insert = (
            f"INSERT INTO {t} (namespace, job, {_ROW}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)"
        )
        self._sql_write = (
            f"UPDATE {t} SET attempt = ?, token = ?, owner = ?, status = ?, expires_at = ?, "
            f"fingerprint = ?, updated_at = ? {where} AND slot = ?"
        )
        self._sql_counter = f"UPDATE {t} SET last_token = ? {where} AND head = 1"
        self._sql_inspect = f"SELECT {_ROW}, {NOW_MS} FROM {t} {where} AND head = 1"
        self._sql_jobs = (f"SELECT job, {_ROW}, {NOW_MS} FROM {t} WHERE namespace = ? AND head = 1 "
                          "ORDER BY job")
        ct = f'"{controls_table(self.table)}"'
        self._sql_control = f"SELECT paused, trigger_id FROM {ct} WHERE namespace = ? AND job = ?"
        self._sql_set_control = (f"INSERT OR REPLACE INTO {ct} (namespace, job, paused, trigger_id) "
                                 "VALUES (?, ?, ?, ?)")
        self._sql_controls = f"SELECT job, paused, trigger_id FROM {ct} WHERE namespace = ?"
        ht = f'"{history_table(self.table)}"'
        self._sql_record = (f"INSERT OR REPLACE INTO {ht} (namespace, job, slot, attempt, token, instance, "
                            "outcome, started_at, duration_ms, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        self._sql_oldest_kept = (f"SELECT slot, attempt FROM {ht} WHERE namespace = ? AND job = ? "
                                 "ORDER BY slot DESC, attempt DESC LIMIT 1 OFFSET ?")
        self._sql_trim = (f"DELETE FROM {ht} WHERE namespace = ? AND job = ? "
                          "AND (slot < ? OR (slot = ? AND attempt < ?))")
        self._sql_history = (f"SELECT job, slot, attempt, token, instance, outcome, started_at, duration_ms, "
                             f"error FROM {ht} WHERE namespace = ? AND job = ? "
                             "ORDER BY slot DESC, attempt DESC LIMIT ?")
        cat = f'"{catalogue_table(self.table)}"'
        self._sql_expire = f"DELETE FROM {cat} WHERE namespace = ? AND expires_at <= ?"
        self._sql_publish = (f"INSERT OR REPLACE INTO {cat} (namespace, job, instance, schedule, kind, "
                             "timezone, options, next_slot, fingerprint, seen_at, expires_at) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        self._sql_catalogue = (f"SELECT job, instance, schedule, kind, timezone, options, next_slot, "
                               f"seen_at, fingerprint FROM {cat} "
                               f"WHERE namespace = ? AND expires_at > {NOW_MS} "
                               "ORDER BY job, instance")
        self._sql_forget = [f"DELETE FROM {name} WHERE namespace = ? AND job = ?"
                            for name in (t, ct, ht, cat)]
        st, sv = f'"{schedules_table(self.table)}"', f'"{schedule_versions_table(self.table)}"'
        self._sql_namespaces = (f"SELECT namespace FROM {t} UNION SELECT namespace FROM {ct} UNION "
                                f"SELECT namespace FROM {ht} UNION SELECT namespace FROM {st} UNION "
                                f"SELECT namespace FROM {cat} "
                                f"WHERE expires_at > {NOW_MS} ORDER BY 1")
        self._sql_schedule = f"SELECT {_SCHEDULE} FROM {st} WHERE namespace = ? AND id = ?"
        self._sql_schedule_insert = (f'INSERT INTO {st} (namespace, {_SCHEDULE}, "partition") '
                                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        self._sql_schedule_update = (f"UPDATE {st} SET task = ?, spec = ?, args = ?, options = ?, "
                                     'paused = ?, next_due = ?, version = ?, updated_at = ?, "partition" = ? '
                                     "WHERE namespace = ? AND id = ?")
        self._sql_schedule_delete = f"DELETE FROM {st} WHERE namespace = ? AND id = ?"
        self._sql_schedule_bump = (f"INSERT INTO {sv} (namespace, version) VALUES (?, 1) "
                                   "ON CONFLICT (namespace) DO UPDATE SET version = version + 1 "
                                   "RETURNING version")
        self._sql_schedules_version = f"SELECT version FROM {sv} WHERE namespace = ?"
        self._sql_schedules_list = f"SELECT {_SCHEDULE} FROM {st} WHERE namespace = ? AND id > ?"
        # Row values: the due index's range starts at (next_due, id) > after, read in index order.
        self._sql_schedules_due = (f"SELECT {_SCHEDULE} FROM {st} WHERE namespace = ? {{task}} "
                                   "AND next_due IS NOT NULL AND next_due <= ? {after} "
                                   "ORDER BY next_due, id LIMIT ?")
        # One range of (namespace, task, partition, next_due, id) per arm ({part}: `= ?` or `IS NULL`);
        # the arms of a compound SELECT ordered as the index is are merged lazily, none of them sorted.
        # (Named: without statistics the planner reads an IS NULL arm through the task's index, every
        # due row of the task.)
        self._sql_schedules_due_arm = (f'SELECT {_SCHEDULE}, "partition" FROM {st} '
                                       f'INDEXED BY "{self.table}_sched_part_due" '
                                       'WHERE namespace = ? AND task = ? AND "partition" {part} '
                                       "AND next_due IS NOT NULL AND next_due <= ? {after}")
        # The tasks that have a due schedule: one seek of that index per task (a loose index scan).
        self._sql_schedules_due_tasks = (
            f"WITH RECURSIVE due(task) AS (SELECT min(task) FROM {st} "
            "WHERE namespace = ?1 AND next_due IS NOT NULL UNION ALL "
            f"SELECT (SELECT min(task) FROM {st} WHERE namespace = ?1 AND next_due IS NOT NULL "
            "AND task > due.task) FROM due WHERE due.task IS NOT NULL) "
            "SELECT task FROM due WHERE task IS NOT NULL")
        self._sql_schedules_get = f"SELECT {_SCHEDULE} FROM {st} WHERE namespace = ? AND id IN ({{marks}})"
        self._sql_schedule_advance = (f"UPDATE {st} SET next_due = ?1 WHERE namespace = ?2 AND id = ?3 "
                                      "AND version = ?4 AND next_due IS NOT NULL "
                                      "AND (?1 IS NULL OR ?1 > next_due)")

    @classmethod
    def from_url(cls, url: str) -> SqliteBackend:
        """`sqlite:///relative.db` or `sqlite:////abs/path.db`, optionally `?table=…&busy_timeout=…`."""
        return cls(url)

    @property
    def url(self) -> str:
        """The file as a `sqlite:///` URL (a SQLite file has no password to redact)."""
        return f"{self.url_schemes[0]}:///{self.path}"

    def _driver_connect(self) -> Callable[[str, float], Conn] | None:
        """How to open the file: None for the standard library's sqlite3."""
        return None

    # -- connection --------------------------------------------------------------------------------

    async def _connect(self) -> _Connection:
        """Open the file on a thread of its own (checked first: SQLite never creates a file it cannot use)."""
        self._check_file()
        db = _Connection(self.path, self.busy_timeout_ms / 1000, self._driver_connect())
        try:
            await db.run(lambda conn: None)
        except BaseException:
            await db.close()
            raise
        return db

    async def _disconnect(self, client: _Connection) -> None:
        await client.close()

    async def _prepare(self) -> None:
        """WAL mode, and the schema created or checked."""
        try:
            await self._call("open", self._setup)
        except BackendError as exc:
            if "not a database" in str(exc.__cause__ or exc).lower():
                self._refuse_foreign_file()
            raise
        logger.debug("opened %s (table %r, schema version %d)", self.url, self.table, SCHEMA_VERSION)

    def _check_file(self) -> None:
        """Refuse, before SQLite touches anything, a missing directory or a read-only file."""
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
        # The header is not read here: closing any file descriptor of the database would drop every
        # lock this process's other connections hold on it (POSIX), and another process could then
        # delete the WAL under them. SQLite reads it first (and `_refuse_foreign_file` words it).
        mode = path.stat().st_mode
        if not os.access(path, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise BackendUnavailable(
                f"cannot use {self.url}: the file is read-only (mode {stat.filemode(mode)}); anarchon "
                "writes a lease on every claim. Make it writable (chmod u+w) or use another file"
            )

    def _refuse_foreign_file(self) -> None:
        """SQLite said the file is no database: name what it starts with. (Only then is the file read
        here: a foreign file has no connection of this process whose locks the read could drop.)"""
        try:
            with Path(self.path).open("rb") as f:
                header = f.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise BackendUnavailable(f"cannot read {self.url}: {exc}") from exc
        if header and header != _SQLITE_MAGIC:
            raise BackendError(
                f"{self.path!r} is not a SQLite database (it starts with {header[:8]!r}); it was left "
                "untouched. Point the URL at a new file or at an anarchon SQLite database"
            )

    def _setup(self, conn: Conn) -> None:
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

        def schema(c: Conn) -> None:
            ensure_schema(c, self.table, self.url)
            ensure_controls(c, self.table)
            ensure_history(c, self.table)
            ensure_schedules(c, self.table)

        _transaction(schema)(conn)
        # The partitions of an older release's rows, a chunk per transaction: other processes wait
        # for the write lock no longer than a chunk.
        while _transaction(lambda c: fill_partitions(c, self.table, _FILL_CHUNK))(conn):
            pass

    # -- running one operation -----------------------------------------------------------------

    async def _call(self, what: str, fn: Callable[[Conn], T]) -> T:
        """Run `fn(connection)` on the connection's thread; retry 'database is locked' with backoff."""
        db: _Connection = self.client
        delay, slept = 0.05, 0.0
        budget = max(self.busy_timeout_ms / 1000, 1.0)
        while True:
            try:
                return await db.run(fn)
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    raise self._error(exc, what) from exc
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

    def _translate(self, exc: Exception, doing: str) -> BackendError | None:
        """sqlite3's errors as anarchon's."""
        return self._error(exc, doing) if isinstance(exc, sqlite3.Error) else None

    def _error(self, exc: sqlite3.Error, what: str) -> BackendError:
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

    # -- the lease rules, applied inside BEGIN IMMEDIATE on the connection's thread ------------------

    def _now(self, conn: Conn) -> int:
        return int(conn.execute(f"SELECT {NOW_MS}").fetchone()[0])

    def _write(self, conn: Conn, namespace: str, job: str, w: LeaseRecord) -> None:
        conn.execute(self._sql_write, (w.attempt, w.token, w.owner, w.status.value, w.expires_at,
                                       w.fingerprint, w.updated_at, namespace, job, w.slot))

    def _claim_one(self, conn: Conn, r: ClaimRequest, now: int) -> ClaimResult:
        key = (r.namespace, r.job)
        found = conn.execute(self._sql_head, key).fetchone()
        head = None if found is None else _record(found)
        kept = None
        if head is not None and r.slot < head.slot:  # only older slots can have a kept row
            other = conn.execute(self._sql_slot, (*key, r.slot)).fetchone()
            kept = None if other is None else _record(other)
        decision = decide(head, r, now, token=0 if found is None else found[9], kept=kept)
        w = decision.write
        if w is None:
            return decision.result
        if decision.new_slot:
            conn.execute(self._sql_prune, key)
            if head is not None:
                conn.execute(self._sql_demote if decision.keep_previous else self._sql_delete,
                             (*key, head.slot))
            conn.execute(self._sql_insert, (*key, w.slot, w.attempt, w.token, w.owner, w.status.value,
                                            w.expires_at, w.fingerprint, w.updated_at, w.token))
        else:
            self._write(conn, r.namespace, r.job, w)
            conn.execute(self._sql_counter, (w.token, *key))
        return decision.result

    def _renew_one(self, conn: Conn, lease: Lease, lease_ms: int, now: int) -> Lease | None:
        found = conn.execute(self._sql_slot, (lease.namespace, lease.job, lease.slot)).fetchone()
        decision = decide_renew(None if found is None else _record(found), lease, lease_ms, now)
        if decision.write is not None:
            self._write(conn, lease.namespace, lease.job, decision.write)
        return decision.lease

    def _release_one(self, conn: Conn, lease: Lease, outcome: ReleaseOutcome, now: int) -> bool:
        key = (lease.namespace, lease.job, lease.slot)
        found = conn.execute(self._sql_slot, key).fetchone()
        rec = None if found is None else _record(found)
        decision = decide_release(rec, lease, outcome, now, newest=found is not None and bool(found[8]))
        if decision.forget:
            conn.execute(self._sql_delete, key)
        elif decision.write is not None:
            self._write(conn, lease.namespace, lease.job, decision.write)
        return decision.released

    # -- the protocol ----------------------------------------------------------------------------

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch in one `BEGIN IMMEDIATE` transaction (see `LeaseBackend.claim`)."""
        if not requests:
            return []
        batch = list(requests)

        def body(conn: Conn) -> list[ClaimResult]:
            now = self._now(conn)
            return [self._claim_one(conn, r, now) for r in batch]

        return await self._call("claim", _transaction(body))

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew a batch of leases in one `BEGIN IMMEDIATE` transaction (see `LeaseBackend.renew`)."""
        if not renewals:
            return []
        batch = list(renewals)

        def body(conn: Conn) -> list[Lease | None]:
            now = self._now(conn)
            return [self._renew_one(conn, lease, lease_ms, now) for lease, lease_ms in batch]

        return await self._call("renew", _transaction(body))

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End a batch of runs in one `BEGIN IMMEDIATE` transaction (see `LeaseBackend.release`)."""
        if not releases:
            return []
        batch = list(releases)

        def body(conn: Conn) -> list[bool]:
            now = self._now(conn)
            return [self._release_one(conn, lease, outcome, now) for lease, outcome in batch]

        return await self._call("release", _transaction(body))

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Read one job's newest record."""

        def read(conn: Conn) -> JobState | None:
            found = conn.execute(self._sql_inspect, (namespace, job)).fetchone()
            return None if found is None else JobState.of(_record(found), namespace=namespace, job=job,
                                                          now=int(found[-1]))

        return await self._call("inspect", read)

    async def jobs(self, namespace: str) -> list[JobState]:
        """Read every job's newest record in a namespace, sorted by job name."""

        def read(conn: Conn) -> list[JobState]:
            rows = conn.execute(self._sql_jobs, (namespace,)).fetchall()
            return [JobState.of(_record(v[1:]), namespace=namespace, job=v[0], now=int(v[-1])) for v in rows]

        return await self._call("jobs", read)

    async def set_control(self, namespace: str, job: str, *, paused: bool | None = None,
                          trigger: bool = False) -> JobControl:
        """Set a job's paused flag and/or issue a trigger, in one transaction (see `ControlBackend`)."""

        def body(conn: Conn) -> JobControl:
            found = conn.execute(self._sql_control, (namespace, job)).fetchone()
            old = JobControl() if found is None else JobControl(bool(found[0]), int(found[1]))
            new = JobControl(
                paused=old.paused if paused is None else paused,
                trigger=max(self._now(conn), old.trigger + 1) if trigger else old.trigger,
            )
            if new != old or found is None:
                conn.execute(self._sql_set_control, (namespace, job, int(new.paused), new.trigger))
            return new

        return await self._call("set_control", _transaction(body))

    async def controls(self, namespace: str) -> dict[str, JobControl]:
        """Read every controlled job's controls in a namespace."""

        def read(conn: Conn) -> dict[str, JobControl]:
            rows = conn.execute(self._sql_controls, (namespace,)).fetchall()
            return {str(job): JobControl(bool(paused), int(trigger)) for job, paused, trigger in rows}

        return await self._call("controls", read)

    async def forget(self, namespace: str, job: str) -> bool:
        """Delete a job's records, controls, runs and catalogue entries in one transaction (see
        `ForgetBackend`)."""

        def body(conn: Conn) -> bool:
            return sum(conn.execute(sql, (namespace, job)).rowcount for sql in self._sql_forget) > 0

        return await self._call("forget", _transaction(body))

    async def namespaces(self) -> list[str]:
        """Every namespace that holds anything, sorted."""

        def read(conn: Conn) -> list[str]:
            return [str(r[0]) for r in conn.execute(self._sql_namespaces).fetchall()]

        return await self._call("namespaces", read)

    async def publish_catalogue(self, namespace: str, entries: Sequence[CatalogueEntry], ttl_ms: int) -> None:
        """Upsert one entry per (job, instance) in one transaction, dropping expired ones
        (see `HistoryBackend`)."""
        batch = list(entries)

        def body(conn: Conn) -> None:
            now = self._now(conn)
            conn.execute(self._sql_expire, (namespace, now))
            for e in batch:
                conn.execute(self._sql_publish, (
                    namespace, e.job, e.instance, e.schedule, e.kind, e.timezone,
                    json.dumps(e.options, sort_keys=True), e.next_slot, e.fingerprint, now, now + ttl_ms))

        await self._call("publish_catalogue", _transaction(body))

    async def catalogue(self, namespace: str) -> list[CatalogueEntry]:
        """Every live catalogue entry in a namespace, by job then instance."""

        def read(conn: Conn) -> list[CatalogueEntry]:
            rows = conn.execute(self._sql_catalogue, (namespace,)).fetchall()
            return [CatalogueEntry(job=r[0], instance=r[1], schedule=r[2], kind=r[3], timezone=r[4],
                                   options=json.loads(r[5]), next_slot=r[6], seen_at=int(r[7]),
                                   fingerprint=r[8]) for r in rows]

        return await self._call("catalogue", read)

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        """Append ended runs in one transaction; each job keeps its newest `keep` (see `HistoryBackend`)."""
        batch = list(runs)
        if not batch:
            return

        def body(conn: Conn) -> None:
            for r in batch:
                conn.execute(self._sql_record, (
                    namespace, r.job, r.slot, r.attempt, r.token, r.instance, r.outcome, r.started_at,
                    r.duration_ms, r.error[:ERROR_LIMIT]))
            for job in dict.fromkeys(r.job for r in batch):
                oldest = conn.execute(self._sql_oldest_kept, (namespace, job, keep - 1)).fetchone()
                if oldest is not None:
                    conn.execute(self._sql_trim, (namespace, job, oldest[0], oldest[0], oldest[1]))

        await self._call("record_runs", _transaction(body))

    async def history(self, namespace: str, job: str, limit: int) -> list[RunRecord]:
        """A job's newest runs, newest first, at most `limit`."""

        def read(conn: Conn) -> list[RunRecord]:
            rows = conn.execute(self._sql_history, (namespace, job, max(limit, 0))).fetchall()
            return [RunRecord(*r) for r in rows]

        return await self._call("history", read)

    # -- schedules as data ---------------------------------------------------------------------

    async def put_schedule(self, namespace: str, write: ScheduleWrite, *,
                           expect: int | Literal["absent", "any"]) -> ScheduleWriteResult:
        """Write a schedule by `expect`, and bump the change counter, in one transaction (see
        `ScheduleBackend.put_schedule`)."""
        check_expect(expect)

        def body(conn: Conn) -> ScheduleWriteResult:
            return self._put_schedule(conn, namespace, write, expect, None)

        return await self._call("put_schedule", _transaction(body))

    async def put_schedules(self, namespace: str, writes: Sequence[ScheduleWrite], *,
                            expect: Literal["absent", "any"]) -> list[ScheduleWriteResult]:
        """Write many schedules, each judged alone, in order: one transaction per chunk of
        `_PUT_CHUNK`, so that other writers wait at most one chunk (see `ScheduleBackend.put_schedules`)."""
        check_schedule_batch(writes, expect)
        out: list[ScheduleWriteResult] = []
        for start in range(0, len(writes), _PUT_CHUNK):
            chunk = writes[start:start + _PUT_CHUNK]

            def body(conn: Conn, chunk: Sequence[ScheduleWrite] = chunk) -> list[ScheduleWriteResult]:
                now = self._now(conn)
                return [self._put_schedule(conn, namespace, w, expect, now) for w in chunk]

            out += await self._call("put_schedules", _transaction(body))
        return out

    def _put_schedule(self, conn: Conn, namespace: str, w: ScheduleWrite,
                      expect: int | Literal["absent", "any"], now: int | None) -> ScheduleWriteResult:
        """One write by `expect`, in the caller's transaction (`now`: the store's, read by the caller
        once per batch, else here)."""
        found = conn.execute(self._sql_schedule, (namespace, w.id)).fetchone()
        current = None if found is None else _schedule(found)
        if (expect == "absent" and current is not None) or (
                isinstance(expect, int) and (current is None or current.version != expect)):
            return ScheduleWriteResult(False, current)
        if now is None:
            now = self._now(conn)
        version = int(conn.execute(self._sql_schedule_bump, (namespace,)).fetchone()[0])
        record = ScheduleRecord(w.id, w.task, w.spec, w.args, w.options, w.paused, w.next_due, version,
                                now if current is None else current.created_at, now)
        part = schedule_partition(w.id)
        if current is None:
            conn.execute(self._sql_schedule_insert, (namespace, w.id, w.task, w.spec, w.args, w.options,
                                                     int(w.paused), w.next_due, version, now, now, part))
        else:
            conn.execute(self._sql_schedule_update, (w.task, w.spec, w.args, w.options, int(w.paused),
                                                     w.next_due, version, now, part, namespace, w.id))
        return ScheduleWriteResult(True, record)

    async def remove_schedule(self, namespace: str, schedule_id: str, *, expect: int | None = None
                              ) -> ScheduleWriteResult:
        """Remove a schedule (if its version is `expect`, when given), and bump the change counter, in one
        transaction (see `ScheduleBackend.remove_schedule`)."""

        def body(conn: Conn) -> ScheduleWriteResult:
            found = conn.execute(self._sql_schedule, (namespace, schedule_id)).fetchone()
            current = None if found is None else _schedule(found)
            if current is None or (expect is not None and current.version != expect):
                return ScheduleWriteResult(False, current)
            conn.execute(self._sql_schedule_delete, (namespace, schedule_id))
            conn.execute(self._sql_schedule_bump, (namespace,)).fetchone()
            return ScheduleWriteResult(True, current)

        return await self._call("remove_schedule", _transaction(body))

    async def get_schedules(self, namespace: str, ids: Sequence[str]) -> list[ScheduleRecord | None]:
        """The schedules with these ids, in order, read in one transaction."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []

        def read(conn: Conn) -> dict[str, ScheduleRecord]:
            found: dict[str, ScheduleRecord] = {}
            for start in range(0, len(wanted), _GET_CHUNK):
                chunk = wanted[start:start + _GET_CHUNK]
                marks = ", ".join("?" * len(chunk))
                sql = self._sql_schedules_get.format(marks=marks)
                rows = conn.execute(sql, (namespace, *chunk)).fetchall()
                found.update((r[0], _schedule(r)) for r in rows)
            return found

        found = await self._call("get_schedules", _snapshot(read))
        return [found.get(i) for i in ids]

    async def list_schedules(self, namespace: str, *, after: str = "", limit: int, task: str | None = None,
                             prefix: str = "") -> list[ScheduleRecord]:
        """A page of schedules by id, from the primary key (or the task index), in one statement."""
        if limit <= 0:
            return []
        sql, args = self._sql_schedules_list, list[Any]([namespace, after])
        if prefix:
            sql += " AND id >= ?"
            args.append(prefix)
            end = prefix_end(prefix)
            if end is not None:
                sql += " AND id < ?"
                args.append(end)
        if task is not None:
            sql += " AND task = ?"
            args.append(task)
        sql += " ORDER BY id LIMIT ?"
        args.append(limit)

        def read(conn: Conn) -> list[ScheduleRecord]:
            return [_schedule(r) for r in conn.execute(sql, args).fetchall()]

        return await self._call("list_schedules", read)

    async def due_schedules(self, namespace: str, *, until: int, tasks: Sequence[str] | None = None,
                            partitions: Sequence[int] | None = None, after: tuple[int, str] | None = None,
                            limit: int) -> list[ScheduleRecord]:
        """A page of the due index, in one snapshot: the index on (namespace, next_due, id), or for each
        task asked the one on (namespace, task, next_due, id), each read in order from the cursor for at
        most `limit` rows and merged; for partitions, a range of (namespace, task, partition, next_due, id)
        per task and partition (see `_due_by_partitions`)."""
        wanted = None if tasks is None else list(dict.fromkeys(tasks))
        if limit <= 0 or wanted == []:
            return []
        if partitions is not None:
            parts = sorted({p for p in partitions if 0 <= p < SCHEDULE_PARTITIONS})
            if not parts:
                return []
            return await self._call("due_schedules", _snapshot(
                lambda conn: self._due_by_partitions(conn, namespace, until, wanted, parts, after, limit)))
        cursor = "" if after is None else "AND (next_due, id) > (?, ?)"
        sql = self._sql_schedules_due.format(task="" if wanted is None else "AND task = ?", after=cursor)
        tail = (until, *(after or ()), limit)

        def read(conn: Conn) -> list[ScheduleRecord]:
            if wanted is None:
                return [_schedule(r) for r in conn.execute(sql, (namespace, *tail)).fetchall()]
            pages = [conn.execute(sql, (namespace, task, *tail)).fetchall() for task in wanted]
            merged = heapq.merge(*pages, key=lambda r: (r[6], r[0]))  # (next_due, id)
            return [_schedule(r) for r in itertools.islice(merged, limit)]

        return await self._call("due_schedules", _snapshot(read))

    def _due_by_partitions(self, conn: Conn, namespace: str, until: int, tasks: list[str] | None,
                           parts: list[int], after: tuple[int, str] | None, limit: int
                           ) -> list[ScheduleRecord]:
        """The due page of `parts`: a range of (namespace, task, partition, next_due, id) per task (every
        task that has a due schedule, when none is given) and partition, merged in (next_due, id) order
        by SQLite, `_ARMS` ranges a statement. Each task's range of NULL partitions (rows of an older
        release) is read too, and its rows of other partitions are dropped here, reading on until the
        page is full or the index ends."""
        if tasks is None:
            tasks = [str(r[0]) for r in conn.execute(self._sql_schedules_due_tasks, (namespace,)).fetchall()]
        arms = [(task, part) for task in tasks for part in (*parts, None)]
        wanted = set(parts)
        page: list[Sequence[Any]] = []
        while True:
            rows = self._due_arms(conn, namespace, arms, until, after, limit)
            page += [r for r in rows if (schedule_partition(r[0]) if r[10] is None else r[10]) in wanted]
            if len(rows) < limit or len(page) >= limit:
                return [_schedule(r[:10]) for r in page[:limit]]
            after = (rows[-1][6], rows[-1][0])

    def _sql_due_arms(self, parts: Sequence[int | None], after: bool) -> str:
        """The statement of `_due_arms`: one range per partition (None: the rows that have none), each
        bound to (namespace, task, [partition,] until, [after]), then the limit."""
        cursor = "AND (next_due, id) > (?, ?)" if after else ""
        return " UNION ALL ".join(
            self._sql_schedules_due_arm.format(part="IS NULL" if part is None else "= ?", after=cursor)
            for part in parts) + " ORDER BY next_due, id LIMIT ?"

    def _due_arms(self, conn: Conn, namespace: str, arms: Sequence[tuple[str, int | None]], until: int,
                  after: tuple[int, str] | None, limit: int) -> list[Sequence[Any]]:
        """The first `limit` rows, by (next_due, id), of the union of these (task, partition) ranges of
        the due index (partition None: the rows that have none)."""
        pages: list[list[Sequence[Any]]] = []
        for start in range(0, len(arms), _ARMS):
            chunk = arms[start:start + _ARMS]
            sql = self._sql_due_arms([part for _task, part in chunk], after is not None)
            args: list[Any] = []
            for task, part in chunk:
                args += [namespace, task, *(() if part is None else (part,)), until, *(after or ())]
            pages.append(conn.execute(sql, (*args, limit)).fetchall())
        if len(pages) == 1:
            return pages[0]
        return list(itertools.islice(heapq.merge(*pages, key=lambda r: (r[6], r[0])), limit))

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        """Move schedules forward in the due index, each only while it has the version given, in one
        transaction; the change counter is left alone (see `ScheduleBackend.advance_schedules`)."""
        rows = [(next_due, namespace, schedule_id, version) for schedule_id, version, next_due in moves]
        if not rows:
            return

        def body(conn: Conn) -> None:
            for row in rows:
                conn.execute(self._sql_schedule_advance, row)

        await self._call("advance_schedules", _transaction(body))

    async def schedules_version(self, namespace: str) -> int:
        """The namespace's change counter: 0 before any write."""

        def read(conn: Conn) -> int:
            found = conn.execute(self._sql_schedules_version, (namespace,)).fetchone()
            return 0 if found is None else int(found[0])

        return await self._call("schedules_version", read)
