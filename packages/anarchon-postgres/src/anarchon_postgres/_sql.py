"""Every SQL statement the backend sends, built once per (schema, table).

Identifiers are validated and quoted here; every value (namespace, job, owner, slot, …) is a bound
parameter. Time is the server's `clock_timestamp()` in epoch milliseconds, read once per statement.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from anarchon.backends import SCHEDULE_PARTITIONS

__all__ = [
    "ANNOUNCE_CHUNK_BYTES",
    "NOW_MS",
    "Statements",
    "array_literal",
    "numbers_literal",
    "partition_of",
    "quote_ident",
    "validate_identifier",
]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MAX_IDENT = 50  # leaves room for the suffixes of the helper tables within PostgreSQL's 63 bytes


def validate_identifier(value: object, what: str) -> str:
    """Return `value` when it is a plain SQL identifier, else raise ValueError quoting it."""
    if not isinstance(value, str) or not _IDENT.fullmatch(value) or len(value) > _MAX_IDENT:
        raise ValueError(
            f"invalid {what} {value!r}: use letters, digits and underscores, starting with a letter "
            f"or underscore, at most {_MAX_IDENT} characters (e.g. 'anarchon_jobs')"
        )
    return value


def array_literal(values: Sequence[str]) -> str:
    """`values` as one PostgreSQL array literal, every element quoted, for a `$n::text::text[]`.

    The batch statements take their arrays as one text parameter each: asyncpg checks every element
    of a list parameter against abstract base classes, over a quarter of the driver's CPU time for
    a batch of claims.
    """
    if not values:
        return "{}"
    # PostgreSQL text cannot hold NUL: it separates the elements while they are escaped in one go.
    joined = "\0".join(values)
    if joined.count("\0") == len(values) - 1:
        return '{"' + joined.replace("\\", "\\\\").replace('"', '\\"').replace("\0", '","') + '"}'
    # A value holds NUL: quoted one by one, for the server to refuse.
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def numbers_literal(values: Iterable[int | None]) -> str:
    """Integers (None: NULL) as one PostgreSQL array literal, for a `$n::text::bigint[]`."""
    if not isinstance(values, (list, tuple)):
        values = list(values)
    if None not in values:  # the usual case: every element converted in C
        return "{" + ",".join(map(str, values)) + "}"
    return "{" + ",".join(["NULL" if v is None else str(v) for v in values]) + "}"


def partition_of(schedule_id: str) -> str:
    """`schedule_partition` of the text expression `schedule_id`, in SQL: the first byte of the MD5 of
    its UTF-8 bytes (whatever the database's encoding), modulo `SCHEDULE_PARTITIONS`."""
    return f"(get_byte(decode(md5(convert_to({schedule_id}, 'UTF8')), 'hex'), 0) % {SCHEDULE_PARTITIONS})"


def quote_ident(value: str) -> str:
    """Double-quote an already validated identifier."""
    return '"' + value.replace('"', '""') + '"'


ANNOUNCE_CHUNK_BYTES = 4000
"""The bytes of `[job, slot]` items a notification of won claims holds before its last item (see
`Statements.claim`): with that item, the owner and the namespace, well under NOTIFY's 8000 bytes."""
CLAIM_COLUMNS = ("outcome", "c_slot", "c_owner", "c_attempt", "c_token", "c_status", "c_expires_at",
                 "c_fingerprint", "c_other", "now", "won", "w_attempt", "w_token", "w_expires_at",
                 "prev_slot", "prev_status", "prev_fingerprint")
"""The columns of `Statements.claim`'s answer, in order: `PostgresBackend._result` unpacks a row by
position (a test holds the statement to it)."""
NOW_MS = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
_SCHEDULE = "id, task, spec, args, options, paused, next_due, version, created_at, updated_at"
"""A stored schedule's columns, in `ScheduleRecord`'s order."""
_VALUES = "$1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::boolean, $8::bigint"
"""A written schedule's parameters: namespace, id, task, spec, args, options, paused, next_due."""
# How a batch statement locks the rows of its jobs: in code-point (namespace, job) order, whatever the
# database's collation, the order `claim_many` sends its batches in. Every batch that locks several
# rows takes them in this one order, so no two batches can deadlock. The requests are sorted so, and
# each locks its row by a probe of the primary key (`LATERAL` over the sorted set, so the rows are
# locked in its order): a join would let the planner scan and hash the whole table for a batch.
_IN_CLAIM_ORDER = 'ORDER BY namespace COLLATE "C", job COLLATE "C"'


def _live(rec: str, now: str) -> str:
    return f"({rec}.status = 'running' AND {rec}.expires_at > {now})"


def _judge_same(status: str, expires_at: str, attempt: str, now: str, max_attempts: str) -> str:
    """The claim table's rows for a record of the same slot."""
    return (
        f"CASE WHEN {status} = 'running' AND {expires_at} > {now} THEN 'taken' "
        f"WHEN {status} IN ('done', 'failed') THEN 'done' "
        f"WHEN {attempt} >= {max_attempts} THEN 'exhausted' ELSE 'won' END"
    )


def _running_only(others: str) -> str:
    """`others` without the records that no longer run (released for handover and not taken over):
    what a new slot keeps of the older slots. Cheap when there are none, the usual case."""
    return (
        f"CASE WHEN {others} = '{{}}'::jsonb THEN {others} ELSE (SELECT coalesce(jsonb_object_agg("
        f"e.key, e.value), '{{}}'::jsonb) FROM jsonb_each({others}) AS e WHERE e.value ->> 'status' = "
        "'running') END"
    )


def _release_other(others: str, slot: str, status: str, now: str) -> str:
    """`others` after the release of its older slot `slot` with `status`: a handover stays
    (`released`, for a backup to take over until a newer slot starts); a run that is over goes."""
    return (
        f"CASE WHEN {status} = 'released' THEN jsonb_set({others}, ARRAY[{slot}::text], "
        f"({others} -> {slot}::text) || jsonb_build_object('status', {status}, 'updated_at', {now})) "
        f"ELSE {others} - {slot}::text END"
    )


def _other(rec: str, slot: str, field: str, cast: str = "") -> str:
    expr = f"({rec}.others -> ({slot})::text ->> '{field}')"
    return f"{expr}::{cast}" if cast else expr


def decide(rec: str, now: str, slot: str, overlap: str, max_attempts: str) -> str:
    """The outcome of claiming `slot` against record `rec` (a row of the table, possibly all NULL).

    The same expression judges the snapshot (to tell a loser why it lost) and, inside
    ON CONFLICT DO UPDATE, the locked latest row (to decide the win), so the two cannot drift.
    """
    same = _judge_same(f"{rec}.status", f"{rec}.expires_at", f"{rec}.attempt", now, max_attempts)
    other = _judge_same(
        _other(rec, slot, "status"), _other(rec, slot, "expires_at", "bigint"),
        _other(rec, slot, "attempt", "int"), now, max_attempts,
    )
    return (
        f"CASE WHEN {rec}.slot IS NULL THEN 'won' "
        f"WHEN {slot} = {rec}.slot THEN {same} "
        f"WHEN {slot} < {rec}.slot THEN CASE WHEN {overlap} = 'allow' AND {rec}.others ? ({slot})::text "
        f"THEN {other} ELSE 'stale' END "
        f"WHEN {_live(rec, now)} AND {overlap} IN ('skip', 'buffer_one') THEN 'skipped' "
        f"ELSE 'won' END"
    )


@dataclass(frozen=True, slots=True)
class Statements:
    """The statements for one table."""

    schema: str
    table: str

    @property
    def qualified(self) -> str:
        """The table's quoted, schema-qualified name."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table)}"

    @property
    def versions(self) -> str:
        """The migrations bookkeeping table."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table + '_schema')}"

    @property
    def controls_table(self) -> str:
        """The table of each job's controls (capability `control`)."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table + '_controls')}"

    @property
    def history_table(self) -> str:
        """The table of each job's newest ended runs (capability `history`)."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table + '_history')}"

    @property
    def history_count_table(self) -> str:
        """The table of how many runs `history_table` holds for each job (capability `history`)."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table + '_history_count')}"

    @property
    def catalogue_table(self) -> str:
        """The table of the jobs each scheduler published (capability `history`)."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table + '_catalogue')}"

    @property
    def schedules_table(self) -> str:
        """The table of the stored schedules (capability `schedules`)."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table + '_schedules')}"

    @property
    def schedule_versions_table(self) -> str:
        """The table of each namespace's change counter of its stored schedules (capability `schedules`)."""
        return f"{quote_ident(self.schema)}.{quote_ident(self.table + '_sched_version')}"

    @property
    def channel(self) -> str:
        """The NOTIFY channel for releases in this table (a valid identifier under 63 bytes)."""
        digest = hashlib.sha1(f"{self.schema}.{self.table}".encode()).hexdigest()[:12]
        return f"anarchon_{digest}"

    @property
    def lock_key(self) -> int:
        """The advisory-lock key that serialises migrations of this table across replicas."""
        digest = hashlib.sha1(f"anarchon-migrate:{self.schema}.{self.table}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    # -- claim ---------------------------------------------------------------------------------

    @property
    def claim(self) -> str:
        """Claim a batch: $1..$10 are array literals (text, see `array_literal`), one element per
        request, each (namespace, job) once ($10, `stale_after`, holds NULL for no limit).

        The snapshot CTE `snap` says why each request would lose. Only the rows it says are won are
        locked (`lk`, in request order: `claim_many` sends a batch in code-point (namespace, job)
        order, the order every batch statement locks in) and judged again on their latest version:
        a concurrent claim that won the row first makes this request a loser, told the holder in
        this statement. A loser in the snapshot locks (and so writes) nothing; its answer was true
        at the snapshot. `up` updates the won rows; `ins` inserts a job's first row, and a first
        row inserted by a concurrent claim after the snapshot leaves this request with "would have
        won": the caller asks again.

        $11 is the NOTIFY channel on which the batch's wins are announced at commit (capability
        `announce`): the rows `up` and `ins` wrote, never a loser nor a lease reissued to its holder
        (which writes nothing). One notification per (namespace, owner) and chunk of wins, its
        payload `{"owner": …, "namespace": …, "wins": [[job, slot], …]}` (a JSON object, where a
        release's is an array). A new chunk begins every `ANNOUNCE_CHUNK_BYTES` of wins, so a payload
        stays under PostgreSQL's 8000 bytes unless an owner or job name is nearly as long; such a
        chunk is not sent (pg_notify would fail the claim), and its wins cost the other replicas a
        claim each.
        """
        t = self.qualified
        ex = "x"  # the request, as `cur` gives it: the columns of the row it would write
        won = decide("t", f"{ex}.updated_at", f"{ex}.slot", f"{ex}.overlap", f"{ex}.max_attempts")
        o_attempt = _other("t", f"{ex}.slot", "attempt", "int")
        t_as_json = (
            "jsonb_build_object('attempt', t.attempt, 'token', t.token, 'owner', t.owner, "
            "'status', t.status, 'expires_at', t.expires_at, 'fingerprint', t.fingerprint, "
            "'updated_at', t.updated_at)"
        )
        new_other = (
            f"jsonb_build_object('attempt', {o_attempt} + 1, 'token', t.job_token + 1, "
            f"'owner', {ex}.owner, 'status', 'running', 'expires_at', {ex}.expires_at, "
            f"'fingerprint', {ex}.fingerprint, 'updated_at', {ex}.updated_at)"
        )

        def cur_or(col: str) -> str:
            return f"CASE WHEN {ex}.slot >= t.slot THEN {ex}.{col} ELSE t.{col} END"

        def won_(col: str, cast: str) -> str:
            """The won lease's `col`: the row's, or its entry in `others` for an older slot."""
            return (f"CASE WHEN w.slot = x.slot THEN w.{col} "
                    f"ELSE (w.others -> x.slot::text ->> '{col}')::{cast} END")

        return f"""
WITH n AS MATERIALIZED (SELECT {NOW_MS} AS now),
snap AS (
    SELECT r.ord, r.namespace, r.job, r.slot AS r_slot, r.owner AS r_owner, r.lease_ms, r.max_attempts,
           r.overlap, r.fingerprint AS r_fingerprint,
           CASE WHEN r.slot > n.now + r.max_skew_ms THEN 'early'
                -- Delivered too late to be worth running: it never revives a past slot.
                WHEN n.now > r.stale_after THEN 'stale'
                ELSE {decide("c", "n.now", "r.slot", "r.overlap", "r.max_attempts")} END AS outcome,
           c.slot, c.owner, c.attempt, c.token, c.status, c.expires_at, c.fingerprint, c.others
    FROM unnest($1::text::text[], $2::text::text[], $3::text::bigint[], $4::text::text[],
                $5::text::bigint[], $6::text::int[], $7::text::text[], $8::text::text[],
                $9::text::bigint[], $10::text::bigint[])
        WITH ORDINALITY AS r(namespace, job, slot, owner, lease_ms, max_attempts, overlap,
                             fingerprint, max_skew_ms, stale_after, ord)
    CROSS JOIN n
    -- A probe of the primary key per request (`OFFSET 0` keeps it one): a join, under a large
    -- batch's settings (nested loops off), scanned and hashed the whole table.
    LEFT JOIN LATERAL (
        SELECT * FROM {t} c WHERE c.namespace = r.namespace AND c.job = r.job OFFSET 0
    ) c ON true
),
-- The rows the snapshot says are won, locked: FOR UPDATE waits for a concurrent claim and returns
-- the row as it committed, so a request that lost the race is judged (and told the holder) here.
lk AS MATERIALIZED (
    SELECT s.ord, c.slot, c.owner, c.attempt, c.token, c.status, c.expires_at, c.fingerprint, c.others
    -- `claim_many` sends a batch in code-point (namespace, job) order: request order is lock order,
    -- a probe of the primary key per request, in that order.
    FROM (SELECT * FROM snap WHERE outcome = 'won' ORDER BY ord) s
    CROSS JOIN LATERAL (SELECT * FROM {t} c WHERE c.namespace = s.namespace AND c.job = s.job FOR UPDATE) c
),
cur AS (
    SELECT s.ord, s.namespace, s.job, l.ord IS NOT NULL AS locked,
           s.r_slot AS slot, s.r_owner AS owner, 'running' AS status, n.now + s.lease_ms AS expires_at,
           s.r_fingerprint AS fingerprint, n.now AS updated_at, s.max_attempts, s.overlap,
           CASE WHEN l.ord IS NULL THEN s.outcome
                ELSE {decide("l", "n.now", "s.r_slot", "s.overlap", "s.max_attempts")} END AS outcome,
           coalesce(l.slot, s.slot) AS c_slot, coalesce(l.owner, s.owner) AS c_owner,
           coalesce(l.attempt, s.attempt) AS c_attempt, coalesce(l.token, s.token) AS c_token,
           coalesce(l.status, s.status) AS c_status, coalesce(l.expires_at, s.expires_at) AS c_expires_at,
           coalesce(l.fingerprint, s.fingerprint) AS c_fingerprint,
           coalesce(l.others, s.others) -> s.r_slot::text AS c_other
    FROM snap s CROSS JOIN n LEFT JOIN lk l ON l.ord = s.ord
),
-- The locked rows that are won. (The condition is the one `cur` judged the locked row by.)
up AS (
    UPDATE {t} AS t SET
        slot = GREATEST(t.slot, {ex}.slot),
        attempt = CASE WHEN {ex}.slot = t.slot THEN t.attempt + 1
                       WHEN {ex}.slot > t.slot THEN 1 ELSE t.attempt END,
        token = CASE WHEN {ex}.slot >= t.slot THEN t.job_token + 1 ELSE t.token END,
        job_token = t.job_token + 1,
        owner = {cur_or("owner")},
        status = {cur_or("status")},
        expires_at = {cur_or("expires_at")},
        fingerprint = {cur_or("fingerprint")},
        updated_at = {cur_or("updated_at")},
        max_attempts = {cur_or("max_attempts")},
        overlap = {cur_or("overlap")},
        others = CASE
            WHEN {ex}.slot < t.slot THEN jsonb_set(t.others, ARRAY[{ex}.slot::text], {new_other})
            WHEN {ex}.slot > t.slot AND {ex}.overlap = 'allow' AND {_live("t", f"{ex}.updated_at")}
                THEN {_running_only("t.others")} || jsonb_build_object(t.slot::text, {t_as_json})
            WHEN {ex}.slot > t.slot THEN {_running_only("t.others")}
            ELSE t.others END,
        prev_slot = LEAST(t.slot, {ex}.slot),
        prev_status = CASE WHEN {ex}.slot = t.slot THEN t.status
                           WHEN {ex}.slot < t.slot THEN {_other("t", f"{ex}.slot", "status")} END,
        prev_fingerprint = CASE WHEN {ex}.slot < t.slot THEN {_other("t", f"{ex}.slot", "fingerprint")}
                                ELSE t.fingerprint END
    FROM cur {ex}
    WHERE {ex}.locked AND {ex}.outcome = 'won' AND t.namespace = {ex}.namespace AND t.job = {ex}.job
      AND ({won}) = 'won'
    RETURNING {ex}.ord, t.slot, t.attempt, t.token, t.expires_at, t.others, t.prev_slot, t.prev_status,
              t.prev_fingerprint, {ex}.namespace AS w_namespace, {ex}.job AS w_job, {ex}.owner AS w_owner,
              {ex}.slot AS w_slot
),
-- A job's first row. One inserted by a concurrent claim after the snapshot is left alone: this
-- request then "would have won", and the caller asks again.
ins AS (
    INSERT INTO {t} AS t (namespace, job, slot, attempt, token, job_token, owner, status, expires_at,
                          fingerprint, updated_at, max_attempts, overlap, others)
    SELECT {ex}.namespace, {ex}.job, {ex}.slot, 1, 1, 1, {ex}.owner, 'running', {ex}.expires_at,
           {ex}.fingerprint, {ex}.updated_at, {ex}.max_attempts, {ex}.overlap, '{{}}'::jsonb
    FROM cur {ex}
    WHERE NOT {ex}.locked AND {ex}.outcome = 'won'
    ON CONFLICT (namespace, job) DO NOTHING
    RETURNING t.namespace, t.job, t.slot, t.attempt, t.token, t.expires_at, t.others, t.prev_slot,
              t.prev_status, t.prev_fingerprint
),
w AS (
    SELECT * FROM up
    UNION ALL
    SELECT x.ord, i.slot, i.attempt, i.token, i.expires_at, i.others, i.prev_slot, i.prev_status,
           i.prev_fingerprint, x.namespace, x.job, x.owner, x.slot
    FROM ins i JOIN cur x ON x.namespace = i.namespace AND x.job = i.job
),
-- The wins, announced at commit: one NOTIFY per (namespace, owner) and chunk, a chunk beginning every
-- {ANNOUNCE_CHUNK_BYTES} bytes of the batch's [job, slot] items in request order. (A running sum over
-- the whole batch: a batch is one owner's, and a window per (namespace, owner) cost a sort by text.)
-- A payload of 8000 bytes or more (an owner or job name nearly that long) is not sent: pg_notify
-- would raise, and fail the claims with it.
ann AS MATERIALIZED (
    SELECT pg_notify($11, p.payload)
    FROM (
        SELECT json_build_object('owner', k.w_owner, 'namespace', k.w_namespace,
                                 'wins', json_agg(k.item ORDER BY k.ord))::text AS payload
        FROM (
            SELECT i.w_namespace, i.w_owner, i.ord, i.item,
                   (sum(i.size) OVER (ORDER BY i.ord ROWS UNBOUNDED PRECEDING) - i.size)
                       / {ANNOUNCE_CHUNK_BYTES} AS chunk
            FROM (SELECT w.w_namespace, w.w_owner, w.ord, j.item, octet_length(j.item::text) + 2 AS size
                  FROM w CROSS JOIN LATERAL (SELECT json_build_array(w.w_job, w.w_slot) AS item) j) i
        ) k
        GROUP BY k.w_namespace, k.w_owner, k.chunk
    ) p
    WHERE octet_length(p.payload) < 8000
)
SELECT x.outcome, x.c_slot, x.c_owner, x.c_attempt, x.c_token, x.c_status, x.c_expires_at,
       x.c_fingerprint, x.c_other, n.now, w.ord IS NOT NULL AS won,
       {won_("attempt", "int")} AS w_attempt, {won_("token", "bigint")} AS w_token,
       {won_("expires_at", "bigint")} AS w_expires_at,
       w.prev_slot, w.prev_status, w.prev_fingerprint
FROM cur x CROSS JOIN n
    -- Read here, or the announcements would never be sent (a SELECT in WITH runs only when read).
    CROSS JOIN (SELECT count(*) AS announced FROM ann) a
    LEFT JOIN w ON w.ord = x.ord
ORDER BY x.ord
"""

    # -- renew, release, fence ----------------------------------------------------------------

    @property
    def renew_many(self) -> str:
        """Extend a batch of leases in one statement, each as `renew` would.

        $1..$6 are array literals (namespace, job, slot, token, owner, lease_ms); a job may appear more than
        once (slots under overlap=allow, or one lease twice). Rows are locked first in code-point
        (namespace, job) order, the order `claim_many` sends its batches in, so a batch of renewals
        and a batch of claims cannot deadlock. Every item is judged against the locked row; a
        (job, slot) renewed twice keeps the batch's last expiry, as if renewed one after another.
        Returns the ordinal (1-based) and new expiry of each renewal that matched its lease.
        """
        t = self.qualified
        o = "l.others -> r.slot::text"
        return f"""
WITH n AS MATERIALIZED (SELECT {NOW_MS} AS now),
req AS (
    SELECT * FROM unnest($1::text::text[], $2::text::text[], $3::text::bigint[], $4::text::bigint[],
                         $5::text::text[], $6::text::bigint[])
        WITH ORDINALITY AS r(namespace, job, slot, token, owner, lease_ms, ord)
),
locked AS MATERIALIZED (
    SELECT c.namespace, c.job, c.slot, c.token, c.owner, c.status, c.expires_at, c.others
    FROM (SELECT namespace, job FROM req GROUP BY namespace, job {_IN_CLAIM_ORDER}) r
    CROSS JOIN LATERAL (SELECT * FROM {t} c WHERE c.namespace = r.namespace AND c.job = r.job FOR UPDATE) c
),
ok AS MATERIALIZED (
    SELECT r.ord, r.namespace, r.job, r.slot, r.lease_ms, r.slot = l.slot AS head,
           {o} || jsonb_build_object('expires_at', n.now + r.lease_ms, 'updated_at', n.now) AS entry
    FROM req r JOIN locked l ON l.namespace = r.namespace AND l.job = r.job CROSS JOIN n
    -- Lost once expired (inclusive), even when nobody took over: a late renewal revives nothing.
    WHERE (r.slot = l.slot AND r.token = l.token AND r.owner = l.owner AND l.status = 'running'
           AND l.expires_at > n.now) OR
          (r.slot <> l.slot AND ({o} ->> 'token')::bigint = r.token AND {o} ->> 'owner' = r.owner
           AND {o} ->> 'status' = 'running' AND ({o} ->> 'expires_at')::bigint > n.now)
),
last AS (
    SELECT DISTINCT ON (namespace, job, slot) namespace, job, slot, lease_ms, head, entry
    FROM ok ORDER BY namespace, job, slot, ord DESC
),
per_job AS (
    -- One row per job: an UPDATE applies a single FROM row to each target row.
    SELECT namespace, job, max(lease_ms) FILTER (WHERE head) AS head_ms,
           jsonb_object_agg(slot::text, entry) FILTER (WHERE NOT head) AS patch
    FROM last GROUP BY namespace, job
),
u AS (
    UPDATE {t} AS t SET
        expires_at = CASE WHEN p.head_ms IS NULL THEN t.expires_at ELSE n.now + p.head_ms END,
        updated_at = CASE WHEN p.head_ms IS NULL THEN t.updated_at ELSE n.now END,
        others = CASE WHEN p.patch IS NULL THEN t.others ELSE t.others || p.patch END
    FROM per_job p CROSS JOIN n
    WHERE t.namespace = p.namespace AND t.job = p.job
    RETURNING 1
)
-- `u` runs to completion though nothing reads it, and it updates every row of `ok`: those rows
-- are locked. (Joining `u` here made the planner, blind to its size, loop over it per renewal.)
SELECT ok.ord, n.now + ok.lease_ms AS expires_at
FROM ok CROSS JOIN n
ORDER BY ok.ord
"""

    @property
    def release_many(self) -> str:
        """End a batch of runs and NOTIFY the handovers, in one statement.

        $1..$6 are array literals (namespace, job, slot, token, owner, status), each (namespace, job) once;
        $7 is the channel. Rows are locked first in code-point (namespace, job) order (COLLATE "C",
        whatever the database's collation), the order `claim_many` sends its batches in, so a batch
        of releases and a batch of claims cannot deadlock. Returns the ordinal (1-based) of each
        release that matched its lease.
        """
        t = self.qualified
        o = "t.others -> r.slot::text"
        return f"""
WITH n AS MATERIALIZED (SELECT {NOW_MS} AS now),
req AS (
    SELECT * FROM unnest($1::text::text[], $2::text::text[], $3::text::bigint[], $4::text::bigint[],
                         $5::text::text[], $6::text::text[])
        WITH ORDINALITY AS r(namespace, job, slot, token, owner, status, ord)
),
locked AS MATERIALIZED (
    SELECT c.namespace, c.job FROM (SELECT * FROM req {_IN_CLAIM_ORDER}) r
    CROSS JOIN LATERAL (SELECT * FROM {t} c WHERE c.namespace = r.namespace AND c.job = r.job FOR UPDATE) c
),
u AS (
    UPDATE {t} AS t SET
        status = CASE WHEN t.slot = r.slot THEN r.status ELSE t.status END,
        updated_at = CASE WHEN t.slot = r.slot THEN n.now ELSE t.updated_at END,
        others = CASE WHEN t.slot = r.slot THEN t.others
                      ELSE {_release_other("t.others", "r.slot", "r.status", "n.now")} END
    FROM locked l JOIN req r ON r.namespace = l.namespace AND r.job = l.job CROSS JOIN n
    WHERE t.namespace = l.namespace AND t.job = l.job AND (
        (t.slot = r.slot AND t.token = r.token AND t.owner = r.owner AND t.status = 'running') OR
        (t.slot <> r.slot AND ({o} ->> 'token')::bigint = r.token AND {o} ->> 'owner' = r.owner
         AND {o} ->> 'status' = 'running'))
    RETURNING r.ord, r.namespace, r.job, r.slot, r.status
)
SELECT u.ord
FROM u
LEFT JOIN LATERAL (
    -- Only a handover wakes the backups: after done or failed there is nothing left to claim.
    SELECT pg_notify($7, p.payload)
    FROM (SELECT json_build_array(u.namespace, u.job, u.slot)::text AS payload) p
    WHERE u.status = 'released' AND octet_length(p.payload) < 8000
) x ON true
"""

    @property
    def fence(self) -> str:
        """Lock the job's row for the caller's transaction and read whether the lease is current."""
        o = "others -> $3::text"
        return f"""
SELECT (slot = $3 AND token = $4 AND status = 'running' AND expires_at > {NOW_MS})
       OR (slot <> $3 AND ({o} ->> 'token')::bigint = $4 AND {o} ->> 'status' = 'running'
           AND ({o} ->> 'expires_at')::bigint > {NOW_MS}) AS current,
       token, slot
FROM {self.qualified}
WHERE namespace = $1 AND job = $2
FOR UPDATE
"""

    # -- inspect -------------------------------------------------------------------------------

    _COLUMNS = "namespace, job, slot, attempt, token, owner, status, expires_at, fingerprint, updated_at"

    @property
    def inspect(self) -> str:
        """One job's current record and the server's clock."""
        return (
            f"SELECT {self._COLUMNS}, {NOW_MS} AS now FROM {self.qualified} "
            "WHERE namespace = $1 AND job = $2"
        )

    @property
    def jobs(self) -> str:
        """Every current record in a namespace, by job name in code-point order."""
        return (
            f"SELECT {self._COLUMNS}, {NOW_MS} AS now FROM {self.qualified} "
            'WHERE namespace = $1 ORDER BY job COLLATE "C"'
        )

    # -- controls ------------------------------------------------------------------------------

    @property
    def set_control(self) -> str:
        """Set a job's paused flag ($3, NULL: leave it) and/or issue a trigger ($4), in one upsert,
        and NOTIFY the change on channel $5 as slot -1 (`CONTROLS_CHANGED`), sent at commit."""
        return f"""
WITH c AS (
    INSERT INTO {self.controls_table} AS c (namespace, job, paused, trigger_id)
    VALUES ($1, $2, coalesce($3::boolean, false), CASE WHEN $4::boolean THEN {NOW_MS} ELSE 0 END)
    ON CONFLICT (namespace, job) DO UPDATE SET
        paused = coalesce($3::boolean, c.paused),
        trigger_id = CASE WHEN $4::boolean THEN greatest({NOW_MS}, c.trigger_id + 1) ELSE c.trigger_id END
    RETURNING paused, trigger_id
)
SELECT c.paused, c.trigger_id, pg_notify($5, json_build_array($1::text, $2::text, -1)::text) AS pushed
FROM c"""

    @property
    def controls(self) -> str:
        """Every controlled job's controls in a namespace."""
        return f"SELECT job, paused, trigger_id FROM {self.controls_table} WHERE namespace = $1"

    # -- history -------------------------------------------------------------------------------

    @property
    def record_runs(self) -> str:
        """Upsert ended runs ($2..$10 array literals, see `array_literal`; each (job, slot, attempt)
        once) of namespace $1 and keep each job's newest $11, in one statement.

        Each job's stored runs are counted in `history_count_table`, so the statement knows how many
        of a job's runs go (`excess`) without reading the ones that stay: the oldest `excess` of its
        stored keys, read forwards from the primary key and merged with its new runs (those not
        stored yet), end at the newest run dropped (`cut`); the job's rows up to it are deleted and
        its runs after it are written. The count changes by the rows inserted (`xmax = 0`: not an
        update of a run recorded again) less the rows deleted, added to the stored count under its
        row lock, so concurrent statements never lose each other's changes. A job without a count,
        and at random one in $11 of the others, is counted afresh from the primary key, and the
        difference from the count that the same snapshot saw is added too: rows that a writer
        unaware of the count added or removed are counted again within about $11 of the job's
        flushes, without losing what a concurrent statement added. Counts are written in job order
        and deletes go in row order, so two statements over the same jobs lock in one order and
        cannot deadlock.

        The plan must not depend on the batch's size, which a prepared statement's generic plan
        guesses at 10 rows per array: a join of two of its sets would then be a nested loop, one
        batch scanned for each row of the other. So each job's runs travel as arrays in one row
        per job, and every other step is a per-job probe of a primary key (scalar subqueries and
        `LATERAL`; `OFFSET 0` keeps the delete's range probe a probe)."""
        h, k = self.history_table, self.history_count_table
        return f"""
WITH r AS (
    SELECT * FROM unnest($2::text::text[], $3::text::bigint[], $4::text::int[], $5::text::bigint[],
                         $6::text::text[], $7::text::text[], $8::text::bigint[], $9::text::bigint[],
                         $10::text::text[])
        AS r(job, slot, attempt, token, instance, outcome, started_at, duration_ms, error)
),
j AS MATERIALIZED (
    SELECT a.*, c.checked, coalesce(n.runs, k.runs) AS runs, coalesce(n.runs - coalesce(k.runs, 0), 0) AS fix
    FROM (
        SELECT f.job, count(*) FILTER (WHERE f.fresh)::int AS n,
               array_agg(f.slot) FILTER (WHERE f.fresh) AS fresh_slots,
               array_agg(f.attempt) FILTER (WHERE f.fresh) AS fresh_attempts,
               array_agg(f.slot) AS slots, array_agg(f.attempt) AS attempts, array_agg(f.token) AS tokens,
               array_agg(f.instance) AS instances, array_agg(f.outcome) AS outcomes,
               array_agg(f.started_at) AS starts, array_agg(f.duration_ms) AS durations,
               array_agg(f.error) AS errors
        FROM (
            SELECT r.*, (SELECT true FROM {h} AS x WHERE x.namespace = $1 AND x.job = r.job
                         AND x.slot = r.slot AND x.attempt = r.attempt) IS NULL AS fresh
            FROM r OFFSET 0
        ) AS f
        GROUP BY f.job
    ) AS a
    LEFT JOIN {k} AS k ON k.namespace = $1 AND k.job = a.job
    CROSS JOIN LATERAL (
        SELECT k.runs IS NULL OR k.checked_at IS NULL OR random() * $11::int < 1 AS checked
    ) AS c
    LEFT JOIN LATERAL (
        SELECT count(*)::int AS runs FROM {h} AS x WHERE c.checked AND x.namespace = $1 AND x.job = a.job
    ) AS n ON c.checked
),
cut AS MATERIALIZED (
    SELECT j.*, o.slot AS cut_slot, o.attempt AS cut_attempt
    FROM j
    LEFT JOIN LATERAL (
        SELECT u.slot, u.attempt FROM (
            (SELECT h.slot, h.attempt FROM {h} AS h WHERE h.namespace = $1 AND h.job = j.job
             ORDER BY h.slot, h.attempt LIMIT greatest(j.runs + j.n - $11::int, 0))
            UNION ALL
            (SELECT n.slot, n.attempt FROM unnest(j.fresh_slots, j.fresh_attempts) AS n(slot, attempt)
             ORDER BY n.slot, n.attempt)
        ) AS u
        WHERE j.runs + j.n > $11::int
        ORDER BY u.slot, u.attempt OFFSET greatest(j.runs + j.n - $11::int - 1, 0) LIMIT 1
    ) AS o ON true
),
gone AS (
    DELETE FROM {h} AS h
    WHERE h.ctid = ANY (ARRAY(
        SELECT o.ctid FROM cut AS c
        CROSS JOIN LATERAL (
            SELECT x.ctid FROM {h} AS x WHERE x.namespace = $1 AND x.job = c.job
              AND (x.slot, x.attempt) <= (c.cut_slot, c.cut_attempt)
            OFFSET 0
        ) AS o
        WHERE c.cut_slot IS NOT NULL
    ))
    RETURNING h.job
),
put AS (
    INSERT INTO {h} AS h (namespace, job, slot, attempt, token, instance, outcome, started_at,
                          duration_ms, error)
    SELECT $1, c.job, u.slot, u.attempt, u.token, u.instance, u.outcome, u.started_at, u.duration_ms,
           u.error
    FROM cut AS c
    CROSS JOIN LATERAL unnest(c.slots, c.attempts, c.tokens, c.instances, c.outcomes, c.starts,
                              c.durations, c.errors)
        AS u(slot, attempt, token, instance, outcome, started_at, duration_ms, error)
    WHERE c.cut_slot IS NULL OR (u.slot, u.attempt) > (c.cut_slot, c.cut_attempt)
    ON CONFLICT (namespace, job, slot, attempt) DO UPDATE SET
        token = excluded.token, instance = excluded.instance, outcome = excluded.outcome,
        started_at = excluded.started_at, duration_ms = excluded.duration_ms, error = excluded.error
    RETURNING h.job, h.xmax = 0 AS inserted
),
d AS (
    SELECT e.job, sum(e.n)::int AS n, bool_or(e.checked) AS checked FROM (
        SELECT j.job, j.fix AS n, j.checked FROM j
        UNION ALL
        SELECT p.job, 1, false FROM put AS p WHERE p.inserted
        UNION ALL
        SELECT g.job, -1, false FROM gone AS g
    ) AS e GROUP BY e.job
)
INSERT INTO {k} AS k (namespace, job, runs, checked_at)
SELECT $1, d.job, d.n, CASE WHEN d.checked THEN {NOW_MS} END
FROM d
WHERE d.checked OR d.n <> 0
ORDER BY d.job COLLATE "C"
ON CONFLICT (namespace, job) DO UPDATE SET
    runs = k.runs + excluded.runs, checked_at = coalesce(excluded.checked_at, k.checked_at)"""

    @property
    def history(self) -> str:
        """A job's newest runs, newest first, at most $3."""
        return (
            "SELECT job, slot, attempt, token, instance, outcome, started_at, duration_ms, error "
            f"FROM {self.history_table} WHERE namespace = $1 AND job = $2 "
            "ORDER BY slot DESC, attempt DESC LIMIT $3"
        )

    @property
    def publish_catalogue(self) -> str:
        """Upsert catalogue entries ($3..$10 arrays, each (job, instance) once) of namespace $1 with a
        TTL of $2 ms, stamped with the server's time; expired entries of the namespace are dropped."""
        c = self.catalogue_table
        return f"""
WITH n AS MATERIALIZED (SELECT {NOW_MS} AS now),
e AS (
    SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
                         $9::text[]::bigint[], $10::text[])
        AS e(job, instance, schedule, kind, timezone, options, next_slot, fingerprint)
),
gone AS (
    DELETE FROM {c} AS c USING n
    WHERE c.namespace = $1 AND c.expires_at <= n.now
      AND NOT EXISTS (SELECT 1 FROM e WHERE e.job = c.job AND e.instance = c.instance)
)
INSERT INTO {c} AS c (namespace, job, instance, schedule, kind, timezone, options, next_slot, fingerprint,
                      seen_at, expires_at)
SELECT $1, e.job, e.instance, e.schedule, e.kind, e.timezone, e.options::jsonb, e.next_slot, e.fingerprint,
       n.now, n.now + $2::bigint
FROM e CROSS JOIN n
ON CONFLICT (namespace, job, instance) DO UPDATE SET
    schedule = excluded.schedule, kind = excluded.kind, timezone = excluded.timezone,
    options = excluded.options, next_slot = excluded.next_slot, fingerprint = excluded.fingerprint,
    seen_at = excluded.seen_at, expires_at = excluded.expires_at"""

    # -- forget --------------------------------------------------------------------------------

    @property
    def forget(self) -> str:
        """Delete everything of job $2 in namespace $1, every table in one statement (one snapshot,
        atomic); answers how many rows went, the history's count row aside."""
        gone = [f"{name} AS (DELETE FROM {table} WHERE namespace = $1 AND job = $2 RETURNING 1)"
                for name, table in (("r", self.qualified), ("c", self.controls_table),
                                    ("h", self.history_table), ("k", self.history_count_table),
                                    ("e", self.catalogue_table))]
        return (f"WITH {', '.join(gone)} SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM c) "
                "+ (SELECT count(*) FROM h) + (SELECT count(*) FROM e) AS deleted")

    @property
    def namespaces(self) -> str:
        """Every namespace that holds a record, controls, a run, a stored schedule or a live catalogue entry
        (unordered: the caller sorts them by code point)."""
        return (f"SELECT namespace FROM {self.qualified} UNION SELECT namespace FROM {self.controls_table} "
                f"UNION SELECT namespace FROM {self.history_table} UNION SELECT namespace FROM "
                f"{self.schedules_table} UNION SELECT namespace FROM "
                f"{self.catalogue_table} WHERE expires_at > {NOW_MS}")

    @property
    def catalogue(self) -> str:
        """Every live catalogue entry of namespace $1, by job then instance in code-point order."""
        return (
            "SELECT job, instance, schedule, kind, timezone, options::text AS options, next_slot, seen_at, "
            f"fingerprint FROM {self.catalogue_table} WHERE namespace = $1 AND expires_at > {NOW_MS} "
            'ORDER BY job COLLATE "C", instance COLLATE "C"'
        )

    # -- schedules as data ---------------------------------------------------------------------

    def _schedule_locked(self) -> str:
        """The start of a schedule's write: the namespace's counter row locked (`k`, its latest value),
        and the server's clock read once the lock is held (`n`). Every write of a namespace's schedules
        takes this lock first, so they are one after another, and each knows the counter it will set."""
        return f"""
WITH k AS MATERIALIZED (SELECT version FROM {self.schedule_versions_table} WHERE namespace = $1 FOR UPDATE),
n AS MATERIALIZED (SELECT {NOW_MS} AS now FROM k)"""

    def _schedule_write(self, written: str, refused: str, channel: str = "$9") -> str:
        """The end of a schedule's write: when CTE `written` wrote a row, the change counter set to the
        value after the locked one (the version that row was written with) and the change pushed (on
        `channel`, as slot -2, `SCHEDULES_CHANGED`, sent at commit). The answer is that row, or else CTE
        `refused`'s (the current record), with `written` saying which, and `counted` false when the
        namespace has no counter row yet (nothing was written: the caller creates it and asks again)."""
        return f""",
bump AS (
    UPDATE {self.schedule_versions_table} AS v SET version = k.version + 1 FROM k
    WHERE v.namespace = $1 AND EXISTS (SELECT 1 FROM {written})
),
push AS MATERIALIZED (
    SELECT pg_notify({channel}::text, p.payload)
    FROM {written} CROSS JOIN LATERAL (SELECT json_build_array($1::text, $2::text, -2)::text AS payload) p
    WHERE octet_length(p.payload) < 8000
)
SELECT coalesce(a.written, false) AS written, {", ".join(f"a.{c}" for c in _SCHEDULE.split(", "))},
       EXISTS (SELECT 1 FROM k) AS counted
-- Read here, or the push would never be sent (a SELECT in WITH runs only when read); one row always.
FROM (SELECT count(*) AS pushed FROM push) p
LEFT JOIN (
    SELECT true AS written, {_SCHEDULE} FROM {written}
    UNION ALL
    SELECT false, {_SCHEDULE} FROM {refused} WHERE NOT EXISTS (SELECT 1 FROM {written})
) a ON true"""

    @property
    def create_schedule_counter(self) -> str:
        """Namespace $1's counter row at 0, unless it has one: every write locks it first."""
        return (f"INSERT INTO {self.schedule_versions_table} (namespace, version) VALUES ($1, 0) "
                "ON CONFLICT (namespace) DO NOTHING")

    @property
    def add_schedule(self) -> str:
        """Insert schedule $2 of namespace $1 unless one has its id ($3..$8: task, spec, args, options,
        paused, next_due; $9: the channel), in its partition of the due index (`partition_of` the id),
        at the counter's next value, with the server's clock; else answer the current record as this
        statement's snapshot sees it (none, when an add committed after the snapshot, before the lock:
        the caller asks again)."""
        st = self.schedules_table
        return self._schedule_locked() + f""",
w AS (
    INSERT INTO {st} AS t (namespace, {_SCHEDULE}, partition)
    SELECT {_VALUES}, k.version + 1, n.now, n.now, {partition_of("$2::text")} FROM k CROSS JOIN n
    ON CONFLICT (namespace, id) DO NOTHING
    RETURNING {_SCHEDULE}
),
c AS (SELECT {_SCHEDULE} FROM {st} WHERE namespace = $1 AND id = $2)""" + self._schedule_write("w", "c")

    @property
    def upsert_schedule(self) -> str:
        """Insert schedule $2 of namespace $1, or replace it whatever its version (created_at kept), at
        the counter's next value, with the server's clock; parameters as `add_schedule`'s."""
        st = self.schedules_table
        return self._schedule_locked() + f""",
w AS (
    INSERT INTO {st} AS t (namespace, {_SCHEDULE}, partition)
    SELECT {_VALUES}, k.version + 1, n.now, n.now, {partition_of("$2::text")} FROM k CROSS JOIN n
    ON CONFLICT (namespace, id) DO UPDATE SET
        task = excluded.task, spec = excluded.spec, args = excluded.args, options = excluded.options,
        paused = excluded.paused, next_due = excluded.next_due, version = excluded.version,
        updated_at = excluded.updated_at
    RETURNING {_SCHEDULE}
),
c AS (SELECT {_SCHEDULE} FROM {st} WHERE false)""" + self._schedule_write("w", "c")

    def put_schedules(self, *, absent: bool) -> str:
        """Write many schedules of namespace $1, each judged alone: only those whose id is free (`absent`),
        or each inserted or replaced whatever its version (an upsert). $2..$8 are array literals (ids,
        tasks, specs, args, options, paused, next_due; NULL for none), $9 the channel.

        One row per schedule, in the arrays' order (`ord`): `written`, the record written or (refused)
        the current one, `counted` as `_schedule_write`'s. With the counter row locked first (`k`, as
        every write), the schedule in the i-th place that is written gets version k + i: versions grow
        in order, and the counter becomes the largest written. Rows are written in id order, the order
        in which `advance_schedules` locks them, so the two cannot deadlock. One push for the batch,
        naming the first schedule written. An add refused by a row committed after this statement's
        snapshot answers no record (the caller asks again for it)."""
        st = self.schedules_table
        cols = _SCHEDULE.split(", ")
        current = (f"SELECT i.ord, {', '.join(f's.{c}' for c in cols)} FROM i JOIN {st} AS s "
                   "ON s.namespace = $1 AND s.id = i.id" if absent
                   else f"SELECT 0::bigint AS ord, {_SCHEDULE} FROM {st} WHERE false")
        conflict = ("DO NOTHING" if absent else
                    """DO UPDATE SET
        task = excluded.task, spec = excluded.spec, args = excluded.args, options = excluded.options,
        paused = excluded.paused, next_due = excluded.next_due, version = excluded.version,
        updated_at = excluded.updated_at""")
        return self._schedule_locked() + f""",
i AS MATERIALIZED (
    SELECT * FROM unnest($2::text::text[], $3::text::text[], $4::text::text[], $5::text::text[],
                         $6::text::text[], $7::text::boolean[], $8::text::bigint[])
        WITH ORDINALITY AS i(id, task, spec, args, options, paused, next_due, ord)
),
c AS MATERIALIZED ({current}),
w AS (
    INSERT INTO {st} AS t (namespace, {_SCHEDULE}, partition)
    SELECT $1, i.id, i.task, i.spec, i.args, i.options, i.paused, i.next_due, k.version + i.ord, n.now, n.now,
           {partition_of("i.id")}
    FROM i CROSS JOIN k CROSS JOIN n
    WHERE NOT EXISTS (SELECT 1 FROM c WHERE c.ord = i.ord)
    ORDER BY i.id COLLATE "C"
    ON CONFLICT (namespace, id) {conflict}
    RETURNING {_SCHEDULE}
),
bump AS (
    UPDATE {self.schedule_versions_table} AS v SET version = (SELECT max(w.version) FROM w) FROM k
    WHERE v.namespace = $1 AND EXISTS (SELECT 1 FROM w)
),
push AS MATERIALIZED (
    SELECT pg_notify($9::text, json_build_array($1::text, f.id, -2)::text)
    FROM (SELECT w.id FROM w ORDER BY w.version LIMIT 1) AS f
)
SELECT i.ord, w.id IS NOT NULL AS written,
       {", ".join(f"coalesce(w.{c}, c.{c}) AS {c}" for c in cols)},
       EXISTS (SELECT 1 FROM k) AS counted, (SELECT count(*) FROM push) AS pushed
FROM i LEFT JOIN w ON w.id = i.id LEFT JOIN c ON c.ord = i.ord
ORDER BY i.ord"""

    @property
    def write_schedules(self) -> str:
        """Several writes of namespace $1's schedules, each of its own id and judged as its own
        statement would judge it (`add_schedule`, `upsert_schedule`, `update_schedule`,
        `remove_schedule`), in one statement that locks the counter once. $2..$10 are array literals,
        an item per write: ids; kinds (`a` add if absent, `u` upsert, `c` replace if the version is
        `expect`, `r` remove, if the version is `expect` when not NULL); tasks, specs, args, options,
        paused and next_due (NULL for a remove); `expect`. $11 is the channel.

        One row per write, in the arrays' order (`ord`): `written`, the record written (a remove's:
        the row deleted) or else the current one, `counted` as `_schedule_write`'s. The write in the
        i-th place gets version k + i, and the counter becomes the largest of those written. The rows
        are locked, and inserted, in id order, the order in which `advance_schedules` locks them, so
        the two cannot deadlock. One push for the batch, naming the first schedule written. An add
        refused by a row committed after this statement's snapshot answers no record (the caller asks
        again for it)."""
        st = self.schedules_table
        cols = _SCHEDULE.split(", ")
        current = ", ".join(f"s.{c}" for c in cols)
        returned = ", ".join(f"t.{c}" for c in cols)
        values = ("$1, i.id, i.task, i.spec, i.args, i.options, i.paused, i.next_due, k.version + i.ord, "
                  f"n.now, n.now, {partition_of('i.id')}")
        replace = ("task = {0}task, spec = {0}spec, args = {0}args, options = {0}options, "
                   "paused = {0}paused, next_due = {0}next_due")
        return self._schedule_locked() + f""",
i AS MATERIALIZED (
    SELECT * FROM unnest($2::text::text[], $3::text::text[], $4::text::text[], $5::text::text[],
                         $6::text::text[], $7::text::text[], $8::text::boolean[], $9::text::bigint[],
                         $10::text::bigint[])
        WITH ORDINALITY AS i(id, kind, task, spec, args, options, paused, next_due, expect, ord)
),
c AS MATERIALIZED (
    SELECT i.ord, {current} FROM i JOIN {st} AS s ON s.namespace = $1 AND s.id = i.id CROSS JOIN k
    ORDER BY s.id COLLATE "C" FOR UPDATE OF s
),
a AS (
    INSERT INTO {st} AS t (namespace, {_SCHEDULE}, partition)
    SELECT {values} FROM i CROSS JOIN k CROSS JOIN n
    WHERE i.kind = 'a' AND NOT EXISTS (SELECT 1 FROM c WHERE c.ord = i.ord)
    ORDER BY i.id COLLATE "C"
    ON CONFLICT (namespace, id) DO NOTHING
    RETURNING {_SCHEDULE}
),
u AS (
    INSERT INTO {st} AS t (namespace, {_SCHEDULE}, partition)
    SELECT {values} FROM i CROSS JOIN k CROSS JOIN n
    WHERE i.kind = 'u'
    ORDER BY i.id COLLATE "C"
    ON CONFLICT (namespace, id) DO UPDATE SET {replace.format("excluded.")},
        version = excluded.version, updated_at = excluded.updated_at
    RETURNING {_SCHEDULE}
),
r AS (
    UPDATE {st} AS t SET {replace.format("i.")}, version = k.version + i.ord, updated_at = n.now
    FROM i JOIN c ON c.ord = i.ord CROSS JOIN k CROSS JOIN n
    WHERE i.kind = 'c' AND t.namespace = $1 AND t.id = c.id AND c.version = i.expect AND t.version = i.expect
    RETURNING {returned}
),
d AS (
    DELETE FROM {st} AS t USING i JOIN c ON c.ord = i.ord
    WHERE i.kind = 'r' AND t.namespace = $1 AND t.id = c.id AND (i.expect IS NULL OR c.version = i.expect)
    RETURNING {returned}
),
w AS MATERIALIZED (
    SELECT i.ord, x.* FROM (
        SELECT * FROM a UNION ALL SELECT * FROM u UNION ALL SELECT * FROM r UNION ALL SELECT * FROM d
    ) AS x JOIN i ON i.id = x.id
),
bump AS (
    UPDATE {self.schedule_versions_table} AS v SET version = k.version + (SELECT max(w.ord) FROM w) FROM k
    WHERE v.namespace = $1 AND EXISTS (SELECT 1 FROM w)
),
push AS MATERIALIZED (
    SELECT pg_notify($11::text, p.payload) FROM (
        SELECT q.payload
        FROM (SELECT w.ord, json_build_array($1::text, w.id, -2)::text AS payload FROM w) AS q
        WHERE octet_length(q.payload) < 8000 ORDER BY q.ord LIMIT 1
    ) AS p
)
SELECT i.ord, w.ord IS NOT NULL AS written,
       {", ".join(f"CASE WHEN w.ord IS NULL THEN c.{c} ELSE w.{c} END AS {c}" for c in cols)},
       EXISTS (SELECT 1 FROM k) AS counted, (SELECT count(*) FROM push) AS pushed
FROM i LEFT JOIN w ON w.ord = i.ord LEFT JOIN c ON c.ord = i.ord
ORDER BY i.ord"""

    @property
    def update_schedule(self) -> str:
        """Replace schedule $2 of namespace $1 only if its version is $10 (a compare-and-set), at the
        counter's next value; parameters $3..$9 as `add_schedule`'s. The row is locked after the counter
        (`c`: its latest committed version), so the version is compared on the row as it is, and a
        refusal answers that row."""
        st = self.schedules_table
        return self._schedule_locked() + f""",
c AS MATERIALIZED (
    SELECT {", ".join(f"s.{col}" for col in _SCHEDULE.split(", "))} FROM {st} AS s CROSS JOIN k
    WHERE s.namespace = $1 AND s.id = $2 FOR UPDATE OF s
),
w AS (
    UPDATE {st} AS t SET
        task = $3, spec = $4, args = $5, options = $6, paused = $7, next_due = $8, version = k.version + 1,
        updated_at = n.now
    FROM c CROSS JOIN k CROSS JOIN n
    WHERE t.namespace = $1 AND t.id = c.id AND c.version = $10::bigint AND t.version = $10::bigint
    RETURNING {", ".join(f"t.{col}" for col in _SCHEDULE.split(", "))}
)""" + self._schedule_write("w", "c")

    @property
    def remove_schedule(self) -> str:
        """Delete schedule $2 of namespace $1 (only if its version is $3, when not NULL); answer the row
        deleted, or the current one. $4 is the channel."""
        st = self.schedules_table
        return self._schedule_locked() + f""",
c AS MATERIALIZED (
    SELECT {", ".join(f"s.{col}" for col in _SCHEDULE.split(", "))} FROM {st} AS s CROSS JOIN k
    WHERE s.namespace = $1 AND s.id = $2 FOR UPDATE OF s
),
w AS (
    DELETE FROM {st} AS t USING c
    WHERE t.namespace = $1 AND t.id = c.id AND ($3::bigint IS NULL OR c.version = $3::bigint)
    RETURNING {", ".join(f"t.{col}" for col in _SCHEDULE.split(", "))}
)""" + self._schedule_write("w", "c", "$4")

    @property
    def get_schedules(self) -> str:
        """The schedules of namespace $1 whose ids are in $2 (an array literal), in one snapshot."""
        return (f"SELECT {_SCHEDULE} FROM {self.schedules_table} "
                "WHERE namespace = $1 AND id = ANY ($2::text::text[])")

    def list_schedules(self, *, prefix: bool, end: bool, task: bool) -> str:
        """A page of namespace $1's schedules by id, after $2, limit $3; then, as asked and numbered on
        from $4, the lowest id of a prefix's range, the bound above it, and a task."""
        where = ["namespace = $1", "id > $2"]
        for asked, condition in ((prefix, "id >= "), (end, "id < "), (task, "task = ")):
            if asked:
                where.append(f"{condition}${len(where) + 2}")
        return (f"SELECT {_SCHEDULE} FROM {self.schedules_table} WHERE {' AND '.join(where)} "
                "ORDER BY id LIMIT $3")

    def due_schedules(self, *, after: bool, tasks: bool = False, partitions: bool = False) -> str:
        """A page of namespace $1's due index: next_due set and at most $2, after ($4, $5) when `after`,
        by (next_due, id), limit $3; then, as asked and numbered on, only the tasks of an array literal
        (`tasks`) and the partitions of another (`partitions`, required with `tasks`).

        Read from the partial index on (namespace, next_due, id) (the partitions asked, if any, a
        filter), or, for each (task, partition) asked, from the one on (namespace, task, partition,
        next_due, id): a range scan from the cursor that stops after $3 rows, the pages merged."""
        cursor = "AND (next_due, id) > ($4::bigint, $5::text) " if after else ""
        first = 6 if after else 4
        if not tasks:
            # (The array read once, by a subquery: a cast of the parameter in the filter would parse it
            # again for every row.)
            asked = f"(SELECT ${first}::text::smallint[])::smallint[]"
            parts = f"AND partition = ANY ({asked}) " if partitions else ""
            return (f"SELECT {_SCHEDULE} FROM {self.schedules_table} "
                    f"WHERE namespace = $1 AND next_due IS NOT NULL AND next_due <= $2 {cursor}{parts}"
                    "ORDER BY next_due, id LIMIT $3")
        assert partitions, "the index on tasks is read partition by partition"
        cols = ", ".join(f"s.{col}" for col in _SCHEDULE.split(", "))
        return f"""
SELECT {", ".join(f"x.{col}" for col in _SCHEDULE.split(", "))}
FROM unnest(${first}::text::text[]) AS q(task)
CROSS JOIN unnest(${first + 1}::text::smallint[]) AS r(partition)
CROSS JOIN LATERAL (
    SELECT {cols} FROM {self.schedules_table} AS s
    WHERE s.namespace = $1 AND s.task = q.task AND s.partition = r.partition
      AND s.next_due IS NOT NULL AND s.next_due <= $2
      {cursor.replace("next_due, id", "s.next_due, s.id")}
    ORDER BY s.next_due, s.id LIMIT $3
) AS x
ORDER BY x.next_due, x.id LIMIT $3"""

    def due_ranges(self, ranges: int, *, after: bool) -> str:
        """`due_schedules` for `ranges` (task, partition) pairs, each its own range of the index on
        (namespace, task, partition, next_due, id): parameters as there, but the pairs' tasks and
        partitions one by one from the first number on (task, partition, task, ...).

        The ranges are merged in order as they are read (a Merge Append of index scans, each under a
        limit), so a page reads its `$3` rows and at most one more per range: where many rows are due
        at once (a herd), reading each range up to the limit first and sorting them all would read a
        page per range for each page returned."""
        cursor = "AND (s.next_due, s.id) > ($4::bigint, $5::text) " if after else ""
        first = 6 if after else 4
        cols = ", ".join(f"s.{col}" for col in _SCHEDULE.split(", "))
        parts = [f"""(SELECT {cols} FROM {self.schedules_table} AS s
 WHERE s.namespace = $1 AND s.task = ${first + 2 * k}::text AND s.partition = ${first + 2 * k + 1}::smallint
   AND s.next_due IS NOT NULL AND s.next_due <= $2 {cursor}
 ORDER BY s.next_due, s.id LIMIT $3)""" for k in range(ranges)]
        return (f"SELECT {', '.join(f'x.{col}' for col in _SCHEDULE.split(', '))} FROM (\n"
                + "\nUNION ALL\n".join(parts) + "\n) AS x ORDER BY x.next_due, x.id LIMIT $3")

    @property
    def advance_schedules(self) -> str:
        """Move schedules of namespace $1 forward in the due index: $2..$4 are array literals (id,
        version, next_due; NULL for none). Each row moves only while it has the version given, and only
        forward (NULL replaces any next_due; a number only a smaller one); moves of one id are applied
        as one after another would be. Rows are locked in id order first, so two advances cannot
        deadlock.

        The moves travel from the lock to the update in the locked rows (`lk`), each then a probe of
        the primary key: joined to the moves again instead, a plan that guesses the batch's size (a
        generic plan guesses a few hundred rows) scanned every locked row for each move, quadratic in
        the batch (4,000 moves took seconds)."""
        st = self.schedules_table
        return f"""
WITH m AS (
    SELECT r.id, r.version,
           CASE WHEN bool_or(r.next_due IS NULL) THEN NULL ELSE max(r.next_due) END AS next_due
    FROM unnest($2::text::text[], $3::text::bigint[], $4::text::bigint[]) AS r(id, version, next_due)
    GROUP BY r.id, r.version
),
lk AS MATERIALIZED (
    SELECT t.id, m.version, m.next_due FROM {st} t JOIN m ON t.id = m.id WHERE t.namespace = $1
    ORDER BY t.id FOR UPDATE OF t
)
UPDATE {st} AS t SET next_due = lk.next_due
FROM lk
WHERE t.namespace = $1 AND t.id = lk.id AND t.version = lk.version AND t.next_due IS NOT NULL
  AND (lk.next_due IS NULL OR lk.next_due > t.next_due)"""

    @property
    def schedules_version(self) -> str:
        """Namespace $1's change counter (0 before any write)."""
        return (f"SELECT coalesce((SELECT version FROM {self.schedule_versions_table} "
                "WHERE namespace = $1), 0) AS version")
