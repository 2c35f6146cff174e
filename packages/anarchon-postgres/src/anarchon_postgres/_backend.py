"""`PostgresBackend`: the lease state machine in one table, over asyncpg."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, Protocol, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from anarchon import (
    BackendError,
    BackendUnavailable,
    Capability,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobState,
    JobStatus,
    Lease,
    LeaseLost,
    ReleaseOutcome,
)
from anarchon.backends import (
    ERROR_LIMIT,
    SCHEDULE_PARTITIONS,
    CatalogueEntry,
    JobControl,
    LeaseBackendBase,
    LeaseRecord,
    ReleaseCallback,
    RunRecord,
    ScheduleRecord,
    ScheduleWrite,
    ScheduleWriteResult,
    WinsCallback,
    check_expect,
    check_schedule_batch,
    redact_url,
)

from ._errors import translate
from ._listener import PROBE, Listener
from ._migrations import migrate
from ._sql import Statements, validate_identifier
from ._sql import array_literal as texts
from ._sql import numbers_literal as numbers

__all__ = ["PostgresBackend"]

log = logging.getLogger("anarchon.postgres")

_PUSH_CHECK_S = 2.0
"""How long the start-up check waits for its own NOTIFY on the LISTEN connection."""
JIT_FREE_ROWS = 256
"""Batches of at least this many items run with JIT compilation and nested loops off (see `_fetch`)."""
# A loser whose snapshot predates a concurrently inserted row asks again this often before answering
# TAKEN. (A row that existed is locked and judged in the statement itself.)
_RECHECKS = 3
_PUT_CHUNK = 1_000
"""Schedules per statement of `put_schedules`: a few milliseconds with the namespace's counter locked."""
MERGED_RANGES = 128
"""The most (task, partition) ranges that a read of the due index merges in one statement of a range
each (`Statements.due_ranges`); more are read as one statement over arrays, a page per range."""
_OUTCOMES = {o.value: o for o in ClaimOutcome}
"""An outcome's string to the member, without an Enum call per claim."""
_STATUSES = {s.value: s for s in JobStatus}
"""A status's string to the member, likewise."""
_RELEASE_STATUS = {o: o.status.value for o in ReleaseOutcome}
"""The status a release with each outcome writes, without a property call per release."""

def _first_of_each_job(keys: Sequence[tuple[str, str]], pending: list[int]) -> tuple[list[int], list[int]]:
    """Split the items `pending` (indices into `keys`, each a (namespace, job)) into those that go in
    this statement, the first of each job, and those left for a later one."""
    if len(set(map(keys.__getitem__, pending))) == len(pending):
        return pending, []  # every job once: the usual batch
    batch: list[int] = []
    later: list[int] = []
    seen: set[tuple[str, str]] = set()
    for i in pending:
        key = keys[i]
        (later if key in seen else batch).append(i)
        seen.add(key)
    return batch, later


@functools.lru_cache(maxsize=64)
def _due_ranges(sql: Statements, ranges: int, after: bool) -> str:
    """`sql.due_ranges(ranges, after=after)`, built once per shape (a replica asks for few shapes)."""
    return sql.due_ranges(ranges, after=after)


def _schedule(row: Any) -> ScheduleRecord:
    """A stored schedule from a row that ends with its columns (`_sql._SCHEDULE`, by position)."""
    values = tuple(row)[-10:]
    schedule_id, task, spec, args, options, paused, next_due, version, created_at, updated_at = values
    return ScheduleRecord(schedule_id, task, spec, args, options, paused, next_due, version, created_at,
                          updated_at)


def _write_result(row: Any, first: int = 1) -> ScheduleWriteResult:
    """A schedule write's answer from its row: `written`, and the schedule's columns from column
    `first` on (NULL when there is none)."""
    record = None if row["id"] is None else _schedule(tuple(row)[first:first + 10])
    return ScheduleWriteResult(bool(row["written"]), record)


def _refused_unread(result: ScheduleWriteResult) -> bool:
    """Whether an add was refused with no record: by a row committed after the statement's snapshot,
    which it could not read (the add is asked again)."""
    return not result.written and result.record is None


class _Write:
    """A schedule write waiting to be sent: its kind (`Statements.write_schedules`), what it writes,
    the version it expects, and the caller's future."""

    __slots__ = ("expect", "future", "kind", "rechecks", "schedule_id", "write")

    def __init__(self, kind: str, schedule_id: str, write: ScheduleWrite | None, expect: int | None) -> None:
        self.kind, self.schedule_id, self.write, self.expect = kind, schedule_id, write, expect
        self.future: asyncio.Future[ScheduleWriteResult] = asyncio.get_running_loop().create_future()
        self.rechecks = 0

    def answer(self, result: ScheduleWriteResult | BaseException) -> None:
        """Give the caller its result or error (unless it stopped waiting)."""
        if self.future.done():
            return
        if isinstance(result, BaseException):
            self.future.set_exception(result)
        else:
            self.future.set_result(result)


def _stopped(exc: BaseException) -> BackendError:
    """The error of a schedule write whose statement was stopped (the backend closing, say)."""
    return BackendError(f"the schedule write was stopped before its answer ({type(exc).__name__}): it may or "
                        "may not have been made; read the schedule to know")


def _texts_or_null(values: Sequence[str | None]) -> str:
    """Texts (None: NULL) as one array literal, for a `$n::text::text[]`."""
    if None not in values:
        return texts(cast(Sequence[str], values))
    return "{" + ",".join("NULL" if v is None else texts([v])[1:-1] for v in values) + "}"


def _refused_by_data(exc: BaseException) -> bool:
    """Whether a statement failed on the data it was given (SQLSTATE classes 22 and 23: a value the
    server cannot store), not on the store: its writes are then sent one by one, each answered alone."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc.__context__
    state = getattr(cause, "sqlstate", None)
    return isinstance(state, str) and state[:2] in ("22", "23")


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


OP_TIMEOUT_S = 10.0
"""How long one store call (a claim batch, a renewal, a release batch, a connection) may take."""
_BATCH_SETTINGS = (f"SET jit = off; SET enable_nestloop = off; "
                   f"SET statement_timeout = {int(OP_TIMEOUT_S * 1000)}")
"""The session settings of a large batch's statement (see `_fetch`)."""


class _QuietFloor(logging.Filter):
    """asyncpg's pool logs a warning with a traceback each time it fails to reconnect its idle
    connections while the server is away; the scheduler says once that the store is unreachable, so
    these go only to a debug log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Failed to restore the pool connection floor"):
            return log.isEnabledFor(logging.DEBUG)
        return True


logging.getLogger("asyncpg.pool").addFilter(_QuietFloor())


class _QuietTlsProbe(logging.Filter):
    """asyncpg asks a server whether it speaks TLS on each new connection, and its cancel request's
    (`sslmode=prefer`, the default). When that connection attempt is cancelled (a store call that
    reached its deadline, a connection terminated while it cancels its query) and the socket then
    closes, asyncpg sets an exception on a future nobody waits for any more, which asyncio reports
    as "Future exception was never retrieved" with a traceback (MagicStack/asyncpg#1211, #1312).
    The call it belonged to has already failed and been reported, so this report goes only to a
    debug log."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if (type(exc) is ConnectionError and str(exc) == "unexpected connection_lost() call"
                and record.getMessage().startswith("Future exception was never retrieved")):
            return log.isEnabledFor(logging.DEBUG)
        return True


logging.getLogger("asyncio").addFilter(_QuietTlsProbe())


class _Connection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg has no type hints
    """A connection of a pool the backend creates: it knows whether only the backend's own
    statements ran on it since it left the pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.only_statements = False

    def mark_only_statements(self) -> None:
        """Say that the backend's own statements alone run until the connection is released."""
        self.only_statements = True


async def _reset(conn: asyncpg.Connection) -> None:
    """The pool's reset on release, after asyncpg's own (which rolls back an open transaction).

    The backend's statements leave no session state (`SET LOCAL` and transactions end with the
    statement): their connection goes back without asyncpg's reset query, a round trip and four
    commands for each claim, renewal or release. Any other use of a connection is reset in full.
    """
    if isinstance(conn, _Connection) and conn.only_statements:
        conn.only_statements = False
        return
    await conn.execute(conn.get_reset_query())


class FenceContext(Protocol):
    """What `fence` needs of a run: `anarchon.JobContext` has all of it."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def slot(self) -> int: ...
    @property
    def token(self) -> int: ...


class PostgresBackend(LeaseBackendBase):
    """A lease backend on PostgreSQL: one-statement claims, LISTEN/NOTIFY handover and announced wins,
    fenced writes."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.CLAIM, Capability.LEASE, Capability.NOTIFY, Capability.INSPECT, Capability.CONTROL,
         Capability.HISTORY, Capability.ANNOUNCE, Capability.FORGET, Capability.SCHEDULES}
    )
    url_schemes: ClassVar[tuple[str, ...]] = ("postgresql", "postgres")

    def __init__(
        self,
        connection: str | asyncpg.Pool,
        *,
        schema: str = "public",
        table: str = "anarchon_jobs",
        statement_cache_size: int | None = None,
        listen_url: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
    ) -> None:
        self.sql = Statements(validate_identifier(schema, "schema"), validate_identifier(table, "table"))
        if isinstance(connection, str):
            if urlsplit(connection).scheme.lower() not in self.url_schemes:
                raise ValueError(
                    f"unsupported URL {redact_url(connection)!r}: use postgresql://user@host:5432/dbname"
                )
        elif not isinstance(connection, asyncpg.Pool):
            raise TypeError(
                f"connection must be a postgresql:// URL or an asyncpg.Pool, not {type(connection).__name__}"
            )
        self._statement_cache_size = statement_cache_size
        self._min_size, self._max_size = min_size, max_size
        self._listen_dsn = listen_url
        self._listener: Listener | None = None
        self._unpushed = False
        """The start-up check found that NOTIFY does not reach LISTEN: later subscriptions do not try."""
        self._releasing: set[asyncio.Task[None]] = set()
        self._waiting: dict[str, list[_Write]] = {}
        """Schedule writes not sent yet, by namespace: sent together once the statement before is
        answered (see `_submit`)."""
        self._writing: dict[str, asyncio.Task[None]] = {}
        """The task sending a namespace's schedule writes, while it has any."""
        self._use(connection, asyncpg.Pool, {
            "schema": schema, "table": table, "statement_cache_size": statement_cache_size,
            "listen_url": listen_url, "min_size": min_size, "max_size": max_size,
        })

    @classmethod
    def from_url(cls, url: str) -> PostgresBackend:
        """Build from a URL; the query parameters `schema`, `table`, `statement_cache_size` and
        `listen_url` are this backend's, any other is passed to asyncpg (e.g. `sslmode`)."""
        parts = urlsplit(url)
        mine: dict[str, Any] = {}
        rest = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in ("schema", "table", "listen_url"):
                mine[key] = value
            elif key == "statement_cache_size":
                try:
                    mine[key] = int(value)
                except ValueError:
                    raise ValueError(
                        f"invalid statement_cache_size {value!r} in {redact_url(url)!r}: use an integer, "
                        "e.g. 0 behind PgBouncer in transaction mode"
                    ) from None
            else:
                rest.append((key, value))
        dsn = urlunsplit(parts._replace(query=urlencode(rest)))
        return cls(dsn, **mine)

    # -- connection --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Where the store is, password redacted, with the table."""
        where = redact_url(self._target) if self._target is not None else "<asyncpg.Pool>"
        return f"{where} ({self.sql.schema}.{self.sql.table})"

    @property
    def channel(self) -> str:
        """The NOTIFY channel that releases are pushed on."""
        return self.sql.channel

    @property
    def pool(self) -> asyncpg.Pool:
        """The asyncpg pool (after `open`)."""
        pool: asyncpg.Pool = self.client
        return pool

    def _connect_kwargs(self) -> dict[str, Any]:
        if self._statement_cache_size is None:
            return {}
        return {"statement_cache_size": self._statement_cache_size}

    async def _connect(self) -> asyncpg.Pool:
        try:
            return await asyncpg.create_pool(
                self._target, min_size=self._min_size, max_size=self._max_size, timeout=OP_TIMEOUT_S,
                connection_class=_Connection, reset=_reset, **self._connect_kwargs(),
            )
        except (ValueError, asyncpg.exceptions.ClientConfigurationError):
            # asyncpg's message may quote the DSN, password included: do not chain it.
            raise ValueError(
                f"invalid PostgreSQL URL {redact_url(self._target)!r}: "
                "use postgresql://user:password@host:5432/dbname"
            ) from None

    async def _disconnect(self, client: asyncpg.Pool) -> None:
        try:
            await asyncio.wait_for(client.close(), 5)
        except Exception:
            client.terminate()

    async def _prepare(self) -> None:
        """Create or migrate the table."""
        with self._errors("migrate"):
            async with self.pool.acquire() as conn:
                applied = await migrate(conn, self.sql)
        if applied:
            log.info("migrated %s by %d version(s)", self.url, applied)

    async def close(self) -> None:
        """Answer the schedule writes already made, then close as `LeaseBackendBase.close` does."""
        if self._writing:
            await asyncio.wait(list(self._writing.values()), timeout=OP_TIMEOUT_S)
        await super().close()

    async def _shutdown(self) -> None:
        """Stop listening; let connections on their way back reach the pool."""
        if self._releasing:
            await asyncio.wait(list(self._releasing), timeout=OP_TIMEOUT_S)
        listener, self._listener = self._listener, None
        self._unpushed = False
        if listener is not None:
            await listener.close()

    def _translate(self, exc: Exception, doing: str) -> BackendError | None:
        """asyncpg's errors, and socket errors, as anarchon's (see `_errors.translate`)."""
        return translate(exc, doing, self.url)

    async def _fetch(self, what: str, query: str, *args: Any, rows: int = 1) -> list[Any]:
        """Run one statement on a pool connection, answered within `OP_TIMEOUT_S`.

        The connection goes back to the pool after the answer is returned, not before: asyncpg's
        reset on release costs a round trip, which a renewal on a slow network cannot spare. (The
        batch statements take each array as one text parameter, an array literal cast on the server:
        asyncpg would look up the codec of an integer array on each new connection, six more round
        trips, and check every element of a list against abstract base classes.)

        Every statement runs on its own, outside any transaction: its row locks end with it on the
        server, however long the client takes to read the answer. (A transaction around it held the
        rows of a whole claim batch locked until the client sent COMMIT: on a busy event loop,
        seconds, while the other replicas' claims of the same rows waited, and a deadline reached
        before COMMIT rolled every won claim back.)

        A batch of `rows` >= `JIT_FREE_ROWS` items first sets the session's `jit` and
        `enable_nestloop` off, and its connection goes back through the pool's full reset (which
        restores them), after the answer. JIT: the batch's cost estimate passes `jit_above_cost`,
        and compiling it took longer than running it. Nested loops: the planner, blind to the
        sizes of the statements' CTEs, rescanned one CTE for each row of another, quadratic in the
        batch (a release of 5,000 runs took over 10 s, of 2,000 under 0.2 s). And a statement
        timeout of `OP_TIMEOUT_S`: the server ends a statement the caller gave up on, which would
        otherwise run on (the server sees the closed connection only when it answers), holding
        its row locks while the replicas' next claims wait for them.
        """
        if not self._opened:
            await self.open()
        pool = self.pool
        own = self._target is not None  # a pool built here, of `_Connection`s
        with self._errors(what):
            try:
                async with asyncio.timeout(OP_TIMEOUT_S):
                    conn = await pool.acquire()
                    large = rows >= JIT_FREE_ROWS
                    if own and not large:
                        conn.mark_only_statements()
                    try:
                        if large:
                            await conn.execute(_BATCH_SETTINGS)
                        found = await conn.fetch(query, *args)
                    except BaseException as exc:
                        if not isinstance(exc, asyncpg.PostgresError):
                            conn.terminate()  # its state is unknown (a timeout, a lost socket): a new one
                        await pool.release(conn)
                        raise
            except TimeoutError as exc:
                # The pool's other connections, opened before the silence, may be as dead (a black-holed
                # network keeps them open): replace them all rather than lose a deadline on each.
                await pool.expire_connections()
                raise BackendUnavailable(
                    f"{what} on {self.url} got no answer within {OP_TIMEOUT_S:g} s; is PostgreSQL up "
                    "and reachable?") from exc
        task = asyncio.get_running_loop().create_task(self._give_back(conn))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)
        return list(found)

    async def _give_back(self, conn: Any) -> None:
        try:
            await self.pool.release(conn, timeout=OP_TIMEOUT_S)
        except Exception as exc:  # the pool replaces a connection it could not reset
            log.debug("returning a connection to the pool of %s failed: %s", self.url, exc)

    # -- claims ------------------------------------------------------------------------------

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch in one statement (see `anarchon.LeaseBackend.claim`); a job that appears
        twice goes in a second statement."""
        results: list[ClaimResult | None] = [None] * len(requests)
        keys = [(r.namespace, r.job) for r in requests]
        by_key = keys.__getitem__
        pending = list(range(len(requests)))
        rechecks = 0
        while pending:
            batch, later = _first_of_each_job(keys, pending)
            batch.sort(key=by_key)  # one lock order
            answers = await self._claim_batch(list(map(requests.__getitem__, batch)))
            retry = []
            for i, answer in zip(batch, answers, strict=True):
                if answer is not None:
                    results[i] = answer
                elif rechecks < _RECHECKS:
                    retry.append(i)
                else:
                    results[i] = self._race_lost(requests[i])
            if retry:
                rechecks += 1
            pending = sorted(retry + later)
        return cast(list[ClaimResult], results)  # every one answered: `pending` is empty

    async def _claim_batch(self, reqs: Sequence[ClaimRequest]) -> list[ClaimResult | None]:
        # One pass over the requests, its columns transposed in C (ten list comprehensions cost more).
        (namespaces, jobs, slots, owners, lease_ms, max_attempts, overlaps, fingerprints, max_skew_ms,
         stale_after) = zip(*[(r.namespace, r.job, r.slot, r.owner, r.lease_ms, r.max_attempts, r.overlap,
                               r.fingerprint, r.max_skew_ms, r.stale_after) for r in reqs], strict=True)
        rows = await self._fetch(
            "claim", self.sql.claim,
            texts(namespaces), texts(jobs), numbers(slots), texts(owners), numbers(lease_ms),
            numbers(max_attempts), texts(overlaps), texts(fingerprints), numbers(max_skew_ms),
            numbers(stale_after), self.sql.channel,
            rows=len(reqs),
        )
        result = self._result
        return [result(r, row) for r, row in zip(reqs, rows, strict=True)]

    @staticmethod
    def _race_lost(r: ClaimRequest) -> ClaimResult:
        return ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot)

    @staticmethod
    def _result(r: ClaimRequest, row: Any) -> ClaimResult | None:
        """Turn one result row into a ClaimResult; None when the loser's snapshot predates the job's
        first row, inserted by a concurrent claim.

        The row is unpacked by position, in `Statements.claim`'s column order (`_sql.CLAIM_COLUMNS`): a
        lookup by name per column, and an Enum call or class attribute per result, were most of the
        cost of a claim attempt's answer.
        """
        (outcome, c_slot, c_owner, c_attempt, c_token, c_status, c_expires_at, c_fingerprint, c_other, now,
         won, w_attempt, w_token, w_expires_at, prev_slot, prev_status, prev_fingerprint) = row
        if won:
            lease = Lease(r.namespace, r.job, r.slot, w_attempt, w_token, r.owner, w_expires_at)
            return ClaimResult(
                ClaimOutcome.WON, r.job, r.slot, lease, r.owner, w_attempt, w_expires_at, now,
                None if prev_status is None else _STATUSES.get(prev_status) or JobStatus(prev_status),
                prev_fingerprint, prev_slot,
            )
        if outcome == "won":
            return None  # the row appeared after this statement's snapshot: ask again
        if outcome == "early":
            return ClaimResult(ClaimOutcome.EARLY, r.job, r.slot, now=now)
        slot = r.slot
        if outcome == "stale" or outcome == "skipped" or slot == c_slot:
            holder, attempt, status = c_owner, c_attempt, c_status
            expires_at, fingerprint, record_slot = c_expires_at, c_fingerprint, c_slot
        else:  # an older slot still running under overlap=allow
            other = json.loads(c_other)
            holder, attempt, status = other["owner"], other["attempt"], other["status"]
            expires_at, fingerprint, record_slot = other["expires_at"], other["fingerprint"], slot
        kind = _OUTCOMES.get(outcome) or ClaimOutcome(outcome)
        if kind is ClaimOutcome.TAKEN and holder == r.owner:
            # Held by the claimer already (a claim whose answer was lost): its own lease again, nothing
            # written. (Read from the statement's snapshot: the scheduler renews it before relying on it.)
            token = c_token if slot == c_slot else json.loads(c_other)["token"]
            lease = Lease(r.namespace, r.job, slot, attempt, int(token), r.owner, int(expires_at))
            return ClaimResult(
                ClaimOutcome.WON, r.job, slot, lease=lease, holder=holder, attempt=attempt,
                expires_at=lease.expires_at, now=now, fingerprint=fingerprint, record_slot=record_slot,
                reissued=True,
            )
        live = kind is ClaimOutcome.TAKEN or kind is ClaimOutcome.SKIPPED
        return ClaimResult(
            kind, r.job, slot, None, holder, attempt or 0, expires_at if live else None, now,
            _STATUSES.get(status) or JobStatus(status) if kind is ClaimOutcome.EXHAUSTED else None,
            fingerprint, record_slot,
        )

    # -- leases ------------------------------------------------------------------------------

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew a batch of leases in one statement (see `anarchon.LeaseBackend.renew`)."""
        if not renewals:
            return []
        # One pass over the renewals, its columns transposed in C.
        namespaces, jobs, slots, tokens, owners, lease_ms = zip(*[
            (x.namespace, x.job, x.slot, x.token, x.owner, ms) for x, ms in renewals], strict=True)
        rows = await self._fetch(
            "renew", self.sql.renew_many,
            texts(namespaces), texts(jobs), numbers(slots), numbers(tokens), texts(owners),
            numbers(lease_ms), rows=len(renewals),
        )
        results: list[Lease | None] = [None] * len(renewals)
        for row in rows:
            x = renewals[row["ord"] - 1][0]
            results[row["ord"] - 1] = Lease(x.namespace, x.job, x.slot, x.attempt, x.token, x.owner,
                                            row["expires_at"])
        return results

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End a batch of runs and NOTIFY the handovers in one statement (see
        `anarchon.LeaseBackend.release`); a job that appears twice goes in a second one."""
        results = [False] * len(releases)
        keys = [(lease.namespace, lease.job) for lease, _ in releases]
        pending = list(range(len(releases)))
        while pending:
            batch, later = _first_of_each_job(keys, pending)
            # One pass over the releases, its columns transposed in C.
            namespaces, jobs, slots, tokens, owners, statuses = zip(*[
                (x.namespace, x.job, x.slot, x.token, x.owner, _RELEASE_STATUS[outcome])
                for x, outcome in map(releases.__getitem__, batch)], strict=True)
            rows = await self._fetch(
                "release", self.sql.release_many,
                texts(namespaces), texts(jobs), numbers(slots), numbers(tokens), texts(owners),
                texts(statuses), self.sql.channel, rows=len(batch),
            )
            for row in rows:
                results[batch[row["ord"] - 1]] = True
            pending = later
        return results

    async def fence(
        self, conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy, ctx: FenceContext
    ) -> None:
        """Inside the caller's transaction on `conn`: lock the job's row until commit, and raise
        `anarchon.LeaseLost` unless `ctx.token` is still the job's current, live lease.

        Writes made on `conn` after the fence commit only while this run owns the job: a takeover
        has to wait for the row lock, and a stale runner's fence fails.
        """
        if not conn.is_in_transaction():
            raise RuntimeError(
                "fence() must run inside a transaction: `async with conn.transaction(): "
                "await backend.fence(conn, ctx); ...`"
            )
        with self._errors("fence"):
            record = getattr(ctx, "record", ctx.name)  # a trigger's run holds its lease on its own record
            row = await conn.fetchrow(self.sql.fence, ctx.namespace, record, ctx.slot, ctx.token)
        if row is None or not row["current"]:
            now = "no record" if row is None else f"the record holds slot={row['slot']} token={row['token']}"
            raise LeaseLost(
                f"{ctx.name} slot={ctx.slot} token={ctx.token} no longer owns the job ({now}); "
                "the transaction must be rolled back"
            )

    # -- inspection ----------------------------------------------------------------------------

    @staticmethod
    def _state(row: Any) -> JobState:
        status = JobStatus(row["status"])
        record = LeaseRecord(row["slot"], row["attempt"], row["token"], row["owner"], status,
                             row["expires_at"], row["fingerprint"], row["updated_at"])
        return JobState.of(record, namespace=row["namespace"], job=row["job"], now=row["now"])

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Read one job's current record."""
        rows = await self._fetch("inspect", self.sql.inspect, namespace, job)
        return self._state(rows[0]) if rows else None

    async def jobs(self, namespace: str) -> list[JobState]:
        """Read every current record in a namespace, sorted by job name."""
        return [self._state(row) for row in await self._fetch("jobs", self.sql.jobs, namespace)]

    # -- controls ----------------------------------------------------------------------------

    async def set_control(self, namespace: str, job: str, *, paused: bool | None = None,
                          trigger: bool = False) -> JobControl:
        """Set a job's paused flag and/or issue a trigger, and push the change, in one statement (see
        `ControlBackend`)."""
        [row] = await self._fetch("set_control", self.sql.set_control, namespace, job, paused, trigger,
                                  self.sql.channel)
        return JobControl(bool(row["paused"]), int(row["trigger_id"]))

    async def controls(self, namespace: str) -> dict[str, JobControl]:
        """Read every controlled job's controls in a namespace, in one statement."""
        rows = await self._fetch("controls", self.sql.controls, namespace)
        return {str(r["job"]): JobControl(bool(r["paused"]), int(r["trigger_id"])) for r in rows}

    # -- forget ------------------------------------------------------------------------------

    async def forget(self, namespace: str, job: str) -> bool:
        """Delete a job's record, controls, runs and catalogue entries in one statement (see
        `ForgetBackend`)."""
        [row] = await self._fetch("forget", self.sql.forget, namespace, job)
        return int(row["deleted"]) > 0

    async def namespaces(self) -> list[str]:
        """Every namespace that holds anything, in one statement."""
        return sorted(str(r["namespace"]) for r in await self._fetch("namespaces", self.sql.namespaces))

    # -- history -----------------------------------------------------------------------------

    async def publish_catalogue(self, namespace: str, entries: Sequence[CatalogueEntry], ttl_ms: int) -> None:
        """Upsert one entry per (job, instance) in one statement; drop expired ones (see `HistoryBackend`)."""
        unique = list({(e.job, e.instance): e for e in entries}.values())
        if not unique:
            return
        await self._fetch(
            "publish_catalogue", self.sql.publish_catalogue, namespace, int(ttl_ms),
            [e.job for e in unique], [e.instance for e in unique], [e.schedule for e in unique],
            [e.kind for e in unique], [e.timezone for e in unique],
            [json.dumps(e.options, sort_keys=True) for e in unique],
            [None if e.next_slot is None else str(e.next_slot) for e in unique],
            [e.fingerprint for e in unique],
        )

    async def catalogue(self, namespace: str) -> list[CatalogueEntry]:
        """Every live catalogue entry in a namespace, by job then instance, in one statement."""
        rows = await self._fetch("catalogue", self.sql.catalogue, namespace)
        return [CatalogueEntry(job=r["job"], instance=r["instance"], schedule=r["schedule"], kind=r["kind"],
                               timezone=r["timezone"], options=json.loads(r["options"]),
                               next_slot=r["next_slot"], seen_at=int(r["seen_at"]),
                               fingerprint=r["fingerprint"]) for r in rows]

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        """Append ended runs and trim each job to its newest `keep`, in one statement
        (see `HistoryBackend`)."""
        args = self._record_runs_args(namespace, runs, keep)
        if args:
            await self._fetch("record_runs", self.sql.record_runs, *args)

    @staticmethod
    def _record_runs_args(namespace: str, runs: Sequence[RunRecord], keep: int) -> tuple[Any, ...]:
        """The parameters of `Statements.record_runs` for these runs, each (job, slot, attempt) once
        (the last given wins); () for no runs."""
        unique = list({(r.job, r.slot, r.attempt): r for r in runs}.values())
        if not unique:
            return ()
        # One pass over the runs, its columns transposed in C; each column goes as one literal.
        jobs, slots, attempts, tokens, instances, outcomes, starts, durations, errors = zip(*[
            (r.job, r.slot, r.attempt, r.token, r.instance, r.outcome, r.started_at, r.duration_ms,
             r.error[:ERROR_LIMIT]) for r in unique], strict=True)
        return (
            namespace, texts(jobs), numbers(slots), numbers(attempts), numbers(tokens), texts(instances),
            texts(outcomes), numbers(starts), numbers(durations), texts(errors), keep,
        )

    async def history(self, namespace: str, job: str, limit: int) -> list[RunRecord]:
        """A job's newest runs, newest first, at most `limit`, in one statement."""
        rows = await self._fetch("history", self.sql.history, namespace, job, max(limit, 0))
        return [RunRecord(*row) for row in rows]

    # -- schedules as data ---------------------------------------------------------------------

    async def put_schedule(self, namespace: str, write: ScheduleWrite, *,
                           expect: int | Literal["absent", "any"]) -> ScheduleWriteResult:
        """Write a schedule by `expect`, bump the change counter and push the change, in one statement,
        shared with the other writes of the namespace made meanwhile (see `_submit` and
        `ScheduleBackend.put_schedule`)."""
        check_expect(expect)
        if expect == "absent":
            item = _Write("a", write.id, write, None)
        elif expect == "any":
            item = _Write("u", write.id, write, None)
        else:
            item = _Write("c", write.id, write, expect)
        return await self._submit(namespace, item)

    async def put_schedules(self, namespace: str, writes: Sequence[ScheduleWrite], *,
                            expect: Literal["absent", "any"]) -> list[ScheduleWriteResult]:
        """Write many schedules, each judged alone, in order: one statement per chunk of `_PUT_CHUNK`
        (see `Statements.put_schedules` and `ScheduleBackend.put_schedules`)."""
        check_schedule_batch(writes, expect)
        sql = self.sql.put_schedules(absent=expect == "absent")
        results: list[ScheduleWriteResult | None] = [None] * len(writes)
        for start in range(0, len(writes), _PUT_CHUNK):
            pending = list(range(start, min(start + _PUT_CHUNK, len(writes))))
            for _ in range(_RECHECKS + 1):
                chunk = [writes[i] for i in pending]
                ids, tasks, specs, args, options, paused, dues = zip(*[
                    (w.id, w.task, w.spec, w.args, w.options, "t" if w.paused else "f", w.next_due)
                    for w in chunk], strict=True)
                rows = await self._schedule_rows(
                    namespace, sql, texts(ids), texts(tasks), texts(specs), texts(args), texts(options),
                    "{" + ",".join(paused) + "}", numbers(dues), self.sql.channel)
                again = []
                for i, row in zip(pending, rows, strict=True):
                    results[i] = result = _write_result(row, 2)
                    if expect == "absent" and _refused_unread(result):
                        again.append(i)
                if not again:
                    break
                pending = again
        return cast(list[ScheduleWriteResult], results)

    async def _schedule_rows(self, namespace: str, sql: str, *args: Any) -> list[Any]:
        """Run a batch of schedule writes; the first in a namespace creates its counter row, then runs
        again."""
        rows = await self._fetch("put_schedules", sql, namespace, *args)
        if rows and not rows[0]["counted"]:
            await self._fetch("put_schedules", self.sql.create_schedule_counter, namespace)
            rows = await self._fetch("put_schedules", sql, namespace, *args)
        return rows

    async def _schedule_write(self, what: str, sql: str, *args: Any) -> Any:
        """Run a schedule's write; the first in a namespace creates its counter row, then runs again."""
        [row] = await self._fetch(what, sql, *args)
        if not row["counted"]:
            await self._fetch(what, self.sql.create_schedule_counter, args[0])
            [row] = await self._fetch(what, sql, *args)
        return row

    async def remove_schedule(self, namespace: str, schedule_id: str, *, expect: int | None = None
                              ) -> ScheduleWriteResult:
        """Remove a schedule (if its version is `expect`, when given), bump the change counter and push
        the change, in one statement, shared as `put_schedule`'s (see `ScheduleBackend.remove_schedule`)."""
        return await self._submit(namespace, _Write("r", schedule_id, None, expect))

    async def _submit(self, namespace: str, item: _Write) -> ScheduleWriteResult:
        """Send a schedule write with the namespace's others and answer it.

        Every write of a namespace locks its change counter until it commits (a disk flush), so one
        process's writes would go one at a time. Instead, while a statement of the namespace's writes
        is on its way, the writes made meanwhile wait, and go together in the next one
        (`Statements.write_schedules`), each judged as it would be alone. A write alone goes in the
        statement of its kind. Two writes of one id never share a statement: the later waits for the
        next. A caller that stops waiting before its write is sent takes it back."""
        self._waiting.setdefault(namespace, []).append(item)
        if namespace not in self._writing:
            self._writing[namespace] = asyncio.get_running_loop().create_task(self._send_writes(namespace))
        return await item.future

    async def _send_writes(self, namespace: str) -> None:
        """Send the namespace's waiting writes, a statement at a time, until none waits."""
        try:
            while waiting := self._waiting.pop(namespace, None):
                batch: list[_Write] = []
                later: list[_Write] = []
                ids: set[str] = set()
                for item in waiting:
                    if item.future.done():
                        continue  # its caller stopped waiting: not sent
                    if item.schedule_id in ids or len(batch) >= _PUT_CHUNK:
                        later.append(item)
                    else:
                        batch.append(item)
                        ids.add(item.schedule_id)
                if later:
                    self._waiting[namespace] = later
                if batch:
                    again = await self._send_batch(namespace, batch)
                    if again:  # ahead of the writes made since, of the same ids or not
                        self._waiting[namespace] = again + self._waiting.get(namespace, [])
        except BaseException as exc:
            for item in self._waiting.pop(namespace, []):
                item.answer(exc if isinstance(exc, Exception) else _stopped(exc))
            raise
        finally:
            del self._writing[namespace]

    async def _send_batch(self, namespace: str, batch: list[_Write]) -> list[_Write]:
        """Send `batch` and answer each write in it; return the adds to ask again (refused by a row
        committed after the statement's snapshot, which it could not read)."""
        try:
            if len(batch) == 1:
                results = [await self._write_one(namespace, batch[0])]
            else:
                results = await self._write_many(namespace, batch)
        except Exception as exc:
            if len(batch) > 1 and _refused_by_data(exc):
                return [item for one in batch for item in await self._send_batch(namespace, [one])]
            for item in batch:
                item.answer(exc)
            return []
        except BaseException as exc:
            for item in batch:
                item.answer(_stopped(exc))
            raise
        again = []
        for item, result in zip(batch, results, strict=True):
            if item.kind == "a" and _refused_unread(result) and item.rechecks < _RECHECKS:
                item.rechecks += 1
                again.append(item)
            else:
                item.answer(result)
        return again

    async def _write_one(self, namespace: str, item: _Write) -> ScheduleWriteResult:
        """One write in the statement of its kind."""
        if item.kind == "r":
            row = await self._schedule_write("remove_schedule", self.sql.remove_schedule, namespace,
                                             item.schedule_id, item.expect, self.sql.channel)
            return _write_result(row)
        w = cast(ScheduleWrite, item.write)
        args: list[Any] = [namespace, w.id, w.task, w.spec, w.args, w.options, w.paused, w.next_due,
                           self.sql.channel]
        sql = {"a": self.sql.add_schedule, "u": self.sql.upsert_schedule,
               "c": self.sql.update_schedule}[item.kind]
        if item.kind == "c":
            args.append(item.expect)
        return _write_result(await self._schedule_write("put_schedule", sql, *args))

    async def _write_many(self, namespace: str, batch: list[_Write]) -> list[ScheduleWriteResult]:
        """Writes of different ids in one statement (`Statements.write_schedules`), answered in order."""
        columns: list[tuple[Any, ...]] = [
            (i.schedule_id, i.kind, None, None, None, None, None, None, i.expect) if i.write is None else
            (i.schedule_id, i.kind, i.write.task, i.write.spec, i.write.args, i.write.options,
             "t" if i.write.paused else "f", i.write.next_due, i.expect)
            for i in batch]
        ids, kinds, tasks, specs, args, options, paused, dues, expects = zip(*columns, strict=True)
        rows = await self._schedule_rows(
            namespace, self.sql.write_schedules, texts(ids), texts(kinds), _texts_or_null(tasks),
            _texts_or_null(specs), _texts_or_null(args), _texts_or_null(options),
            "{" + ",".join("NULL" if p is None else p for p in paused) + "}", numbers(dues), numbers(expects),
            self.sql.channel)
        return [_write_result(row, 2) for row in rows]

    async def get_schedules(self, namespace: str, ids: Sequence[str]) -> list[ScheduleRecord | None]:
        """The schedules with these ids, in order, in one statement."""
        if not ids:
            return []
        # (Not as a large batch: the plan is one index probe per id whatever their number.)
        rows = await self._fetch("get_schedules", self.sql.get_schedules, namespace, texts(list(ids)))
        found = {row["id"]: _schedule(row) for row in rows}
        return [found.get(i) for i in ids]

    async def list_schedules(self, namespace: str, *, after: str = "", limit: int, task: str | None = None,
                             prefix: str = "") -> list[ScheduleRecord]:
        """A page of schedules by id, from the primary key (or the task index), in one statement."""
        if limit <= 0:
            return []
        end = prefix_end(prefix) if prefix else None
        sql = self.sql.list_schedules(prefix=bool(prefix), end=end is not None, task=task is not None)
        args = [namespace, after, limit, *([prefix] if prefix else []), *([end] if end is not None else []),
                *([task] if task is not None else [])]
        return [_schedule(row) for row in await self._fetch("list_schedules", sql, *args)]

    async def due_schedules(self, namespace: str, *, until: int, tasks: Sequence[str] | None = None,
                            partitions: Sequence[int] | None = None, after: tuple[int, str] | None = None,
                            limit: int) -> list[ScheduleRecord]:
        """A page of the due index, read from its index on (namespace, next_due, id), or on (namespace,
        task, partition, next_due, id) for each task and partition asked, in one statement."""
        wanted = None if tasks is None else list(dict.fromkeys(tasks))
        parts = None if partitions is None else sorted(
            {p for p in partitions if 0 <= p < SCHEDULE_PARTITIONS})  # (the others match nothing)
        if limit <= 0 or wanted == [] or parts == []:
            return []
        if wanted is not None and parts is None:
            parts = list(range(SCHEDULE_PARTITIONS))  # the tasks' index is by partition
        if wanted is not None and parts is not None and len(wanted) * len(parts) <= MERGED_RANGES:
            # Each (task, partition) range read in order and merged: a herd's page reads one page.
            pairs = [x for task in wanted for p in parts for x in (task, p)]
            sql = _due_ranges(self.sql, len(pairs) // 2, after is not None)
            args = [namespace, until, limit, *(after or ()), *pairs]
        else:
            sql = self.sql.due_schedules(after=after is not None, tasks=wanted is not None,
                                         partitions=parts is not None)
            args = [namespace, until, limit, *(after or ()), *([] if wanted is None else [texts(wanted)]),
                    *([] if parts is None else [numbers(parts)])]
        return [_schedule(row) for row in await self._fetch("due_schedules", sql, *args)]

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        """Move schedules forward in the due index, each only while it has the version given, in one
        statement; the change counter is left alone (see `ScheduleBackend.advance_schedules`)."""
        if not moves:
            return
        ids, versions, dues = zip(*moves, strict=True)
        # (Not as a large batch, whose settings turn nested loops off: each move is a probe of the
        # primary key, which a hash join would replace by a scan of the namespace's schedules.)
        await self._fetch("advance_schedules", self.sql.advance_schedules, namespace, texts(ids),
                          numbers(versions), numbers(dues))

    async def schedules_version(self, namespace: str) -> int:
        """The namespace's change counter: 0 before any write."""
        [row] = await self._fetch("schedules_version", self.sql.schedules_version, namespace)
        return int(row["version"])

    # -- push --------------------------------------------------------------------------------

    async def _listen_connect(self) -> asyncpg.Connection:
        """The LISTEN connection: its own, from `listen_url` or the URL; or, for a pool passed in,
        one of the pool's connections, held while this backend listens."""
        dsn = self._listen_dsn or self._target
        if dsn is not None:
            return await asyncpg.connect(dsn, timeout=OP_TIMEOUT_S, **self._connect_kwargs())
        conn: asyncpg.Connection = await self.pool.acquire(timeout=OP_TIMEOUT_S)
        return conn

    async def _listen_disconnect(self, conn: asyncpg.Connection) -> None:
        if self._listen_dsn is None and self._target is None:
            await self.pool.release(conn)  # the pool resets it (UNLISTEN *) or replaces a broken one
        elif not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 2)
            except Exception:
                conn.terminate()

    async def subscribe(self, namespace: str, callback: ReleaseCallback) -> None:
        """Call `callback(job, slot)` on this event loop whenever a run in `namespace` is released."""
        await self._listen(lambda listener: listener.add(namespace, callback))

    async def subscribe_wins(self, namespace: str, callback: WinsCallback) -> None:
        """Call `callback(owner, [(job, slot), ...])` on this event loop for the claims won in
        `namespace` (announced by each claim statement at commit; see `Statements.claim`)."""
        await self._listen(lambda listener: listener.add_wins(namespace, callback))

    async def _listen(self, add: Callable[[Listener], None]) -> None:
        """Add a subscriber to the one listener, started (and its push checked) on first use."""
        if self._unpushed:
            return  # the check said why (once): the subscriber polls, or claims every slot
        if self._listener is None:
            where = redact_url(self._listen_dsn) if self._listen_dsn else self.url
            self._listener = Listener(self._listen_connect, self._listen_disconnect, self.sql.channel, where)
            add(self._listener)
            await self._listener.start()
            await self._check_push(where)
        else:
            add(self._listener)

    async def _check_push(self, where: str) -> None:
        """Send one NOTIFY through the pool and wait for it on the LISTEN connection; say in the log
        whether releases (and won claims) are pushed, or (behind PgBouncer in transaction mode, whose server
        connections change between transactions) why they are not and that backups poll instead."""
        listener = self._listener
        if listener is None or not listener.connected.is_set():
            return  # not connected yet: the listener logged why, and retries
        token = f"{PROBE}{uuid.uuid4().hex}"
        arrived = listener.expect(token)
        try:
            with self._errors("checking NOTIFY"):
                async with self.pool.acquire() as conn:
                    await conn.execute("SELECT pg_notify($1, $2)", self.sql.channel, token)
            async with asyncio.timeout(_PUSH_CHECK_S):
                await arrived.wait()
        except (TimeoutError, BackendError) as exc:
            reason = "no answer" if isinstance(exc, TimeoutError) else str(exc)
            log.warning(
                "releases are not pushed, nor won claims announced: a NOTIFY sent through %s did not "
                "reach the LISTEN connection to %s within %g s (%s; PgBouncer in transaction mode "
                "drops LISTEN). Backups poll instead, taking over at lease expiry, and each replica "
                "claims every slot; for push, set listen_url to a direct connection to the server",
                self.url, where, _PUSH_CHECK_S, reason)
            self._listener = None
            # A later subscription would wait as long for the same answer; after an error it tries.
            self._unpushed = isinstance(exc, TimeoutError)
            await listener.close()
            return
        finally:
            listener.expect(None)
        log.info("releases are pushed by LISTEN/NOTIFY on %s", where)

    @property
    def listener(self) -> Listener | None:
        """The LISTEN connection's supervisor, once `subscribe` or `subscribe_wins` was called."""
        return self._listener
