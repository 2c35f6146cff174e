"""Versioned, idempotent schema migrations, serialised across replicas by an advisory lock."""

from __future__ import annotations

import asyncpg

from anarchon import SchemaMismatch

from ._sql import NOW_MS, Statements, partition_of, quote_ident

__all__ = ["FILLFACTOR", "SCHEMA_VERSION", "migrate"]

FILLFACTOR = 50
"""How full PostgreSQL fills the record table's pages. Every claim and release rewrites a job's row;
the room left lets the new version stay on the row's page (a HOT update: no new index entry, and
the page's dead versions are pruned in place)."""


def _v1(s: Statements) -> list[str]:
    return [
        f"""CREATE TABLE {s.qualified} (
            namespace text NOT NULL,
            job text NOT NULL,
            slot bigint NOT NULL,
            attempt integer NOT NULL,
            token bigint NOT NULL,
            job_token bigint NOT NULL,
            owner text NOT NULL,
            status text NOT NULL CHECK (status IN ('running', 'done', 'failed', 'released')),
            expires_at bigint NOT NULL,
            fingerprint text NOT NULL DEFAULT '',
            updated_at bigint NOT NULL,
            max_attempts integer NOT NULL,
            overlap text NOT NULL,
            others jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            prev_slot bigint,
            prev_status text,
            prev_fingerprint text,
            PRIMARY KEY (namespace, job)
        )""",
        f"COMMENT ON TABLE {s.qualified} IS 'anarchon: one record per (namespace, job); "
        "others holds older slots still running under overlap=allow'",
    ]


def _v2(s: Statements) -> list[str]:
    return [
        f"""CREATE TABLE {s.controls_table} (
            namespace text NOT NULL,
            job text NOT NULL,
            paused boolean NOT NULL,
            trigger_id bigint NOT NULL,
            PRIMARY KEY (namespace, job)
        )""",
        f"COMMENT ON TABLE {s.controls_table} IS 'anarchon: each job''s pause flag and newest trigger id'",
    ]


def _v3(s: Statements) -> list[str]:
    return [
        f"""CREATE TABLE {s.history_table} (
            namespace text NOT NULL,
            job text NOT NULL,
            slot bigint NOT NULL,
            attempt integer NOT NULL,
            token bigint NOT NULL,
            instance text NOT NULL,
            outcome text NOT NULL,
            started_at bigint NOT NULL,
            duration_ms bigint NOT NULL,
            error text NOT NULL,
            PRIMARY KEY (namespace, job, slot, attempt)
        )""",
        f"COMMENT ON TABLE {s.history_table} IS 'anarchon: the newest ended runs of each job'",
        f"""CREATE TABLE {s.catalogue_table} (
            namespace text NOT NULL,
            job text NOT NULL,
            instance text NOT NULL,
            schedule text NOT NULL,
            kind text NOT NULL,
            timezone text NOT NULL,
            options jsonb NOT NULL,
            next_slot bigint,
            fingerprint text NOT NULL,
            seen_at bigint NOT NULL,
            expires_at bigint NOT NULL,
            PRIMARY KEY (namespace, job, instance)
        )""",
        f"COMMENT ON TABLE {s.catalogue_table} IS 'anarchon: the jobs each scheduler registered, with a TTL'",
    ]


def _v4(s: Statements) -> list[str]:
    return [
        f"""CREATE TABLE {s.history_count_table} (
            namespace text NOT NULL,
            job text NOT NULL,
            runs integer NOT NULL,
            checked_at bigint,
            PRIMARY KEY (namespace, job)
        ) WITH (fillfactor = {FILLFACTOR})""",
        f"COMMENT ON TABLE {s.history_count_table} IS 'anarchon: how many runs the history holds "
        "for each job; checked_at: when they were last counted row by row'",
        f"""INSERT INTO {s.history_count_table} (namespace, job, runs, checked_at)
            SELECT namespace, job, count(*), {NOW_MS} FROM {s.history_table} GROUP BY namespace, job""",
    ]


def _v5(s: Statements) -> list[str]:
    # Ids and tasks in code point order whatever the database's collation ("C": byte order of UTF-8).
    return [
        f"""CREATE TABLE {s.schedules_table} (
            namespace text NOT NULL,
            id text COLLATE "C" NOT NULL,
            task text COLLATE "C" NOT NULL,
            spec text NOT NULL,
            args text NOT NULL,
            options text NOT NULL,
            paused boolean NOT NULL,
            next_due bigint,
            version bigint NOT NULL,
            created_at bigint NOT NULL,
            updated_at bigint NOT NULL,
            PRIMARY KEY (namespace, id)
        )""",
        f"COMMENT ON TABLE {s.schedules_table} IS 'anarchon: the schedules kept as data; next_due feeds "
        "the due index'",
        f"CREATE INDEX {quote_ident(s.table + '_sched_due')} ON {s.schedules_table} "
        "(namespace, next_due, id) WHERE next_due IS NOT NULL",
        f"CREATE INDEX {quote_ident(s.table + '_sched_task_due')} ON {s.schedules_table} "
        "(namespace, task, next_due, id) WHERE next_due IS NOT NULL",
        f"CREATE INDEX {quote_ident(s.table + '_sched_task')} ON {s.schedules_table} (namespace, task, id)",
        f"""CREATE TABLE {s.schedule_versions_table} (
            namespace text NOT NULL PRIMARY KEY,
            version bigint NOT NULL
        )""",
        f"COMMENT ON TABLE {s.schedule_versions_table} IS 'anarchon: each namespace''s change counter of its "
        "stored schedules, one more with every write and removal'",
    ]


def _v6(s: Statements) -> list[str]:
    # Each schedule's partition of the due index (`schedule_partition`), so that replicas sharing the
    # partitions out read only theirs: the task index gains it before next_due. The index on
    # (namespace, next_due, id) stays for the read of every task's due schedules. The rows are filled
    # by rewriting the table once (a change of type computed from the id), its indexes rebuilt in bulk:
    # an UPDATE would add an entry to every index for every row (51 s at a million rows, against 11).
    # No default: a write that leaves the partition out (an earlier release still running) fails.
    st = s.schedules_table
    return [
        f"DROP INDEX {quote_ident(s.schema)}.{quote_ident(s.table + '_sched_task_due')}",
        f"ALTER TABLE {st} ADD COLUMN partition smallint",
        f"ALTER TABLE {st} ALTER COLUMN partition TYPE smallint USING {partition_of('id')}, "
        "ALTER COLUMN partition SET NOT NULL",
        f"CREATE INDEX {quote_ident(s.table + '_sched_part_due')} ON {st} "
        "(namespace, task, partition, next_due, id) WHERE next_due IS NOT NULL",
    ]


MIGRATIONS = [_v1, _v2, _v3, _v4, _v5, _v6]
SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this release creates and expects."""


async def migrate(conn: asyncpg.Connection, s: Statements) -> int:
    """Bring the table up to `SCHEMA_VERSION`; return the number of migrations applied.

    Every step runs in one transaction holding a transaction-scoped advisory lock, so replicas
    starting together apply each migration exactly once and the lock never outlives the
    transaction (safe behind PgBouncer). A table already at `SCHEMA_VERSION` and tuned, as nearly
    every start finds it, is recognised first in two statements, without the lock.
    """
    if await _is_current(conn, s):
        return 0
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", s.lock_key)
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(s.schema)}")
        has_versions = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", s.versions)
        has_table = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", s.qualified)
        if has_table and not has_versions:
            raise SchemaMismatch(
                f"table {s.schema}.{s.table} exists but was not created by anarchon-postgres "
                f"(no {s.schema}.{s.table}_schema table); choose another `table` or drop it"
            )
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s.versions} "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current: int = await conn.fetchval(f"SELECT coalesce(max(version), 0) FROM {s.versions}")
        if current > SCHEMA_VERSION:
            raise SchemaMismatch(
                f"table {s.schema}.{s.table} is at schema version {current}, newer than this "
                f"anarchon-postgres knows ({SCHEMA_VERSION}); upgrade anarchon-postgres"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version - 1](s):
                await conn.execute(statement)
            await conn.execute(f"INSERT INTO {s.versions} (version) VALUES ($1)", version)
        await _tune(conn, s)
        return SCHEMA_VERSION - current


async def _is_current(conn: asyncpg.Connection, s: Statements) -> bool:
    """True when the table and its version table exist, the version is `SCHEMA_VERSION` and the table
    has a fillfactor: nothing for `migrate` to do. A version is committed with its migration, so one
    read here is never half applied; anything else (a newer version included) takes the locked path,
    which says what is wrong."""
    exist: bool = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL",
                                      s.versions, s.qualified)
    if not exist:
        return False
    row = await conn.fetchrow(
        f"SELECT coalesce(max(version), 0) AS version, "
        f"(SELECT reloptions FROM pg_class WHERE oid = $1::regclass) AS options FROM {s.versions}",
        s.qualified)
    assert row is not None  # an aggregate without GROUP BY: always one row
    return bool(row["version"] == SCHEMA_VERSION and _has_fillfactor(row["options"]))


def _has_fillfactor(options: list[str] | None) -> bool:
    """True when a table's `reloptions` set a fillfactor (the operator's, or `FILLFACTOR`)."""
    return any(o.startswith("fillfactor=") for o in options or ())


async def _tune(conn: asyncpg.Connection, s: Statements) -> None:
    """Give the record table `FILLFACTOR`, unless it has a fillfactor already (the operator's, or
    set by an earlier start). A storage setting, not a schema version: every release can use the table."""
    options: list[str] | None = await conn.fetchval(
        "SELECT reloptions FROM pg_class WHERE oid = $1::regclass", s.qualified)
    if not _has_fillfactor(options):
        await conn.execute(f"ALTER TABLE {s.qualified} SET (fillfactor = {FILLFACTOR})")
