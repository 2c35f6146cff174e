"""`MariaDBBackend`: leases in one InnoDB table, decided in Python by the core's lease rules."""

from __future__ import annotations

import asyncio
import random
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import aiomysql
import pymysql.err

from anarchon import BackendError, BackendUnavailable, ConfigError
from anarchon.backends import (
    Capability,
    ClaimRequest,
    ClaimResult,
    JobState,
    JobStatus,
    Lease,
    LeaseBackendBase,
    LeaseRecord,
    Overlap,
    ReleaseOutcome,
    decide,
    decide_release,
    decide_renew,
    redact_url,
)

__all__ = ["MariaDBBackend"]

T = TypeVar("T")
Key = tuple[str, str]
Records = dict[Key, LeaseRecord | None]

_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_COLUMNS = "slot, attempt, token, owner, status, expires_at, fingerprint, updated_at"
_NOW_MS = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
"""The server's clock in epoch ms; a transaction reads it in its own statement, after its row locks."""
_NOW = f"SELECT {_NOW_MS}"
# Deadlock victim, lock wait timeout, and a lost race to insert a job's first row: run it again.
_RETRY = {1213, 1205, 1062}
_UNAVAILABLE = {1040, 1053, 2002, 2003, 2006, 2013, 2055}
_ATTEMPTS = 8


def _key(namespace: str, job: str) -> Key:
    # Sorted as Python sorts str (code points), which is UTF-8 byte order: the order rows are locked in.
    return namespace, job


def _record(row: Sequence[Any]) -> LeaseRecord:
    slot, attempt, token, owner, status, expires_at, fingerprint, updated_at = row
    return LeaseRecord(int(slot), int(attempt), int(token), owner.decode(), JobStatus(status),
                       int(expires_at), fingerprint.decode(), int(updated_at))


class MariaDBBackend(LeaseBackendBase):
    """A lease backend on MariaDB or MySQL: one row per job, locked with `SELECT … FOR UPDATE`."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.CLAIM, Capability.LEASE, Capability.INSPECT}
    )
    url_schemes: ClassVar[tuple[str, ...]] = ("mariadb", "mysql")

    def __init__(self, url_or_pool: str | aiomysql.Pool, *, table: str = "anarchon_leases") -> None:
        if isinstance(url_or_pool, str):
            parts = urlsplit(url_or_pool)
            if parts.scheme.lower() not in self.url_schemes or not parts.path.strip("/"):
                raise ValueError(
                    f"invalid MariaDB URL {redact_url(url_or_pool)!r}: use mariadb://user:password@host:3306/db"
                )
            table = dict(parse_qsl(parts.query)).get("table", table)
        elif not isinstance(url_or_pool, aiomysql.Pool):
            raise TypeError(f"give a mariadb:// URL or an aiomysql.Pool, not {type(url_or_pool).__name__}")
        if not _TABLE.fullmatch(table):
            raise ValueError(f"invalid table name {table!r}: use letters, digits and underscores")
        self.table = table
        self._use(url_or_pool, aiomysql.Pool, {"table": table})
        t = f"`{table}`"
        self._sql_create = f"""CREATE TABLE IF NOT EXISTS {t} (
            namespace   VARBINARY(255)  NOT NULL,  -- VARBINARY: names compare byte-wise, no PAD SPACE
            job         VARBINARY(1024) NOT NULL,
            slot        BIGINT          NOT NULL,  -- epoch ms, UTC
            attempt     INT             NOT NULL,
            token       BIGINT          NOT NULL,
            owner       VARBINARY(255)  NOT NULL,
            status      VARCHAR(8)      NOT NULL,
            expires_at  BIGINT          NOT NULL,  -- the server's clock, epoch ms
            fingerprint VARBINARY(1024) NOT NULL,
            updated_at  BIGINT          NOT NULL,
            PRIMARY KEY (namespace, job)
        ) ENGINE=InnoDB"""
        self._sql_lock = f"SELECT {_COLUMNS} FROM {t} WHERE namespace = %s AND job = %s FOR UPDATE"
        # A job's first row is a plain INSERT: when two transactions both found no row, the second
        # fails with a duplicate key (1062) and is run again, and then finds the winner's row locked.
        self._sql_insert = f"INSERT INTO {t} (namespace, job, {_COLUMNS}) VALUES ({', '.join(['%s'] * 10)})"
        self._sql_update = (
            f"UPDATE {t} SET slot = %s, attempt = %s, token = %s, owner = %s, status = %s, expires_at = %s, "
            "fingerprint = %s, updated_at = %s WHERE namespace = %s AND job = %s"
        )
        self._sql_inspect = f"SELECT {_COLUMNS}, {_NOW_MS} FROM {t} WHERE namespace = %s AND job = %s"
        self._sql_jobs = f"SELECT job, {_COLUMNS}, {_NOW_MS} FROM {t} WHERE namespace = %s ORDER BY job"

    @classmethod
    def from_url(cls, url: str) -> MariaDBBackend:
        """`mariadb://user:password@host:3306/db?table=anarchon_leases` (`mysql://` too)."""
        return cls(url)

    # -- connection: BackendBase calls these from open() and close() ---------------------------------

    async def _connect(self) -> aiomysql.Pool:
        parts = urlsplit(self._target)
        return await aiomysql.create_pool(
            host=parts.hostname or "127.0.0.1", port=parts.port or 3306, db=parts.path.strip("/"),
            user=unquote(parts.username or "root"), password=unquote(parts.password or ""),
            charset="utf8mb4", autocommit=False, minsize=1, maxsize=10, connect_timeout=5,
            # REPEATABLE READ would gap-lock a missing row on `FOR UPDATE`, and then many clients racing
            # to insert one job's first row deadlock on each other's gap locks.
            init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        )

    async def _disconnect(self, client: aiomysql.Pool) -> None:
        client.close()
        await client.wait_closed()

    async def _prepare(self) -> None:
        async with self.client.acquire() as conn, conn.cursor() as cur:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", pymysql.Warning)  # "table already exists"
                await cur.execute(self._sql_create)

    def _translate(self, exc: Exception, doing: str) -> BackendError | None:
        """The one place where the client library's errors become anarchon's."""
        code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
        if isinstance(exc, OSError) or code in _UNAVAILABLE:
            return BackendUnavailable(f"{doing} on {self.url} failed: {exc}; is the server up?")
        if isinstance(exc, pymysql.err.MySQLError):
            return BackendError(f"{doing} on {self.url} failed: {exc}")
        return None

    # -- one transaction: lock the rows, read the clock, decide, write -------------------------------

    async def _atomically(self, doing: str, keys: Sequence[Key], body: Callable[[Records, int], T]) -> T:
        """Lock the rows of `keys` (in byte order, so two batches cannot deadlock on each other), read
        the server's clock after the locks are held, let `body` decide on the records (replacing the
        ones to write), write them and commit. Deadlock victims and lost inserts are retried."""
        for attempt in range(_ATTEMPTS):
            try:
                with self._errors(doing):
                    return await self._transaction(keys, body)
            except BackendError as exc:
                code = getattr(exc.__cause__, "args", (None,))[0]
                if code not in _RETRY or attempt == _ATTEMPTS - 1:
                    raise
            await asyncio.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
        raise AssertionError("unreachable")

    async def _transaction(self, keys: Sequence[Key], body: Callable[[Records, int], T]) -> T:
        async with self.client.acquire() as conn:
            try:
                async with conn.cursor() as cur:
                    records: Records = {}
                    for key in sorted(set(keys)):
                        await cur.execute(self._sql_lock, key)
                        row = await cur.fetchone()
                        records[key] = None if row is None else _record(row)
                    await cur.execute(_NOW)
                    (now,) = await cur.fetchone()
                    read = dict(records)
                    result = body(records, int(now))
                    for key, rec in records.items():
                        if rec is None or rec is read[key]:
                            continue
                        values = (rec.slot, rec.attempt, rec.token, rec.owner, rec.status.value,
                                  rec.expires_at, rec.fingerprint, rec.updated_at)
                        if read[key] is None:
                            await cur.execute(self._sql_insert, (*key, *values))
                        else:
                            await cur.execute(self._sql_update, (*values, *key))
                await conn.commit()
                return result
            except BaseException:
                conn.close()  # drops the transaction; the pool replaces the connection
                raise

    # -- the operations: LeaseBackendBase makes claim, renew and release of these ------------------------

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch in one transaction (see `anarchon.LeaseBackend.claim`)."""
        for r in requests:
            if r.overlap is Overlap.ALLOW:
                raise ConfigError(
                    f"MariaDBBackend keeps one row per job, so it cannot run slots of {r.job!r} side by "
                    "side: overlap='allow' is not supported; use 'skip', 'buffer_one' or 'replace'"
                )

        def body(records: Records, now: int) -> list[ClaimResult]:
            results = []
            for r in requests:
                key = _key(r.namespace, r.job)
                head = records[key]
                decision = decide(head, r, now, token=0 if head is None else head.token)
                if decision.write is not None:
                    records[key] = decision.write
                results.append(decision.result)
            return results

        return await self._atomically("claim", [_key(r.namespace, r.job) for r in requests], body)

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew a batch in one transaction (see `anarchon.LeaseBackend.renew`)."""

        def body(records: Records, now: int) -> list[Lease | None]:
            results = []
            for lease, lease_ms in renewals:
                key = _key(lease.namespace, lease.job)
                decision = decide_renew(records[key], lease, lease_ms, now)
                if decision.write is not None:
                    records[key] = decision.write
                results.append(decision.lease)
            return results

        return await self._atomically("renew", [_key(x.namespace, x.job) for x, _ in renewals], body)

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End a batch of runs in one transaction (see `anarchon.LeaseBackend.release`)."""

        def body(records: Records, now: int) -> list[bool]:
            results = []
            for lease, outcome in releases:
                key = _key(lease.namespace, lease.job)
                decision = decide_release(records[key], lease, outcome, now, newest=True)
                if decision.write is not None:
                    records[key] = decision.write
                results.append(decision.released)
            return results

        return await self._atomically("release", [_key(x.namespace, x.job) for x, _ in releases], body)

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Read one job's record."""
        with self._errors("inspect"):
            async with self.client.acquire() as conn, conn.cursor() as cur:
                await cur.execute(self._sql_inspect, _key(namespace, job))
                row = await cur.fetchone()
                await conn.commit()
        return None if row is None else JobState.of(_record(row[:-1]), namespace=namespace, job=job,
                                                    now=int(row[-1]))

    async def jobs(self, namespace: str) -> list[JobState]:
        """Read every job's record in a namespace, sorted by name (byte order is code point order)."""
        with self._errors("jobs"):
            async with self.client.acquire() as conn, conn.cursor() as cur:
                await cur.execute(self._sql_jobs, (namespace,))
                rows = await cur.fetchall()
                await conn.commit()
        return [JobState.of(_record(row[1:-1]), namespace=namespace, job=row[0].decode(), now=int(row[-1]))
                for row in rows]
