"""The schema: created on open, versioned in `anarchon_meta`, checked before anything is written."""

from __future__ import annotations

import sqlite3

from anarchon import SchemaMismatch
from anarchon.backends import schedule_partition

__all__ = ["COLUMNS", "META_TABLE", "SCHEMA_VERSION", "catalogue_table", "controls_table", "ensure_controls",
           "ensure_history", "ensure_schedules", "ensure_schema", "fill_partitions", "history_table",
           "schedule_versions_table", "schedules_table"]

SCHEMA_VERSION = 1
"""Bump this, and add a step to `_MIGRATIONS`, whenever the table's shape changes."""

META_TABLE = "anarchon_meta"

COLUMNS: tuple[tuple[str, str, int], ...] = (
    # (name, type, position in the primary key, 0 when not part of it)
    ("namespace", "TEXT", 1),
    ("job", "TEXT", 2),
    ("slot", "INTEGER", 3),
    ("attempt", "INTEGER", 0),
    ("token", "INTEGER", 0),
    ("owner", "TEXT", 0),
    ("status", "TEXT", 0),
    ("expires_at", "INTEGER", 0),
    ("fingerprint", "TEXT", 0),
    ("updated_at", "INTEGER", 0),
    ("head", "INTEGER", 0),
    ("last_token", "INTEGER", 0),
)

_META_COLUMNS = (("name", "TEXT", 1), ("version", "INTEGER", 0))

# version -> the statements that migrate a table from `version` to `version + 1` ({t} is the table).
_MIGRATIONS: dict[int, tuple[str, ...]] = {}


def _create_table(table: str) -> str:
    return f"""
        CREATE TABLE "{table}" (
            namespace   TEXT    NOT NULL,
            job         TEXT    NOT NULL,
            slot        INTEGER NOT NULL,   -- epoch ms, UTC
            attempt     INTEGER NOT NULL,
            token       INTEGER NOT NULL,   -- fencing token of this row's current run
            owner       TEXT    NOT NULL,
            status      TEXT    NOT NULL CHECK (status IN ('running', 'done', 'failed', 'released')),
            expires_at  INTEGER NOT NULL,   -- store time, epoch ms
            fingerprint TEXT    NOT NULL,
            updated_at  INTEGER NOT NULL,   -- store time, epoch ms
            head        INTEGER NOT NULL,   -- 1: the job's newest slot; 0: an older one kept by overlap=allow
            last_token  INTEGER NOT NULL,   -- on the head row: the job's token counter
            PRIMARY KEY (namespace, job, slot)
        ) WITHOUT ROWID"""


def _shape(conn: sqlite3.Connection, table: str) -> tuple[tuple[str, str, int], ...] | None:
    """The table's (name, type, pk) columns, or None when no such table exists."""
    kind = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    if kind is None:
        return None
    if kind[0] != "table":
        return (("<a " + str(kind[0]) + ">", "", 0),)
    rows = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    return tuple((str(r[1]), str(r[2]).upper(), int(r[5])) for r in rows)


def _check(shape: tuple[tuple[str, str, int], ...], expected: tuple[tuple[str, str, int], ...],
           table: str, url: str) -> None:
    if shape != expected:
        have = ", ".join(f"{name} {kind}".strip() for name, kind, _pk in shape)
        want = ", ".join(f"{name} {kind}" for name, kind, _pk in expected)
        raise SchemaMismatch(
            f"table {table!r} in {url} was not created by anarchon-sqlite: it has ({have}), anarchon "
            f"expects ({want}). It was left unchanged; pass table='another_name' to SqliteBackend, "
            "or rename that table"
        )


def ensure_schema(conn: sqlite3.Connection, table: str, url: str) -> None:
    """Create, check or migrate `table` inside the caller's BEGIN IMMEDIATE transaction.

    Two processes that open a fresh file at once are serialised by the write lock: the second one
    finds the tables the first created.
    """
    meta = _shape(conn, META_TABLE)
    if meta is None:
        conn.execute(
            f'CREATE TABLE "{META_TABLE}" (name TEXT NOT NULL PRIMARY KEY, version INTEGER NOT NULL)'
        )
    else:
        _check(meta, _META_COLUMNS, META_TABLE, url)
    shape = _shape(conn, table)
    if shape is None:
        conn.execute(_create_table(table))
        conn.execute(f'CREATE UNIQUE INDEX "{table}_head" ON "{table}" (namespace, job) WHERE head = 1')
        conn.execute(f'INSERT OR REPLACE INTO "{META_TABLE}" (name, version) VALUES (?, ?)',
                     (table, SCHEMA_VERSION))
        return
    found = conn.execute(f'SELECT version FROM "{META_TABLE}" WHERE name = ?', (table,)).fetchone()
    version = SCHEMA_VERSION if found is None else int(found[0])
    if version > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"table {table!r} in {url} has schema version {version}, written by a newer anarchon-sqlite "
            f"(this one knows versions up to {SCHEMA_VERSION}); upgrade anarchon-sqlite on every replica"
        )
    if version == SCHEMA_VERSION:
        _check(shape, COLUMNS, table, url)
    while version < SCHEMA_VERSION:
        for statement in _MIGRATIONS[version]:
            conn.execute(statement.format(t=table))
        version += 1
    _check(_shape(conn, table) or (), COLUMNS, table, url)
    if found is None or int(found[0]) != version:
        conn.execute(f'INSERT OR REPLACE INTO "{META_TABLE}" (name, version) VALUES (?, ?)',
                     (table, version))


def controls_table(table: str) -> str:
    """The name of the table that holds the controls of the jobs whose records are in `table`."""
    return f"{table}_controls"


def ensure_controls(conn: sqlite3.Connection, table: str) -> None:
    """Create the controls table of `table` when it is missing (capability `control`)."""
    conn.execute(f"""
        CREATE TABLE IF NOT EXISTS "{controls_table(table)}" (
            namespace  TEXT    NOT NULL,
            job        TEXT    NOT NULL,
            paused     INTEGER NOT NULL,   -- 1 while the job is paused
            trigger_id INTEGER NOT NULL,   -- the newest trigger's id (store time, epoch ms); 0: none
            PRIMARY KEY (namespace, job)
        ) WITHOUT ROWID""")


def history_table(table: str) -> str:
    """The name of the table that keeps the ended runs of the jobs whose records are in `table`."""
    return f"{table}_history"


def catalogue_table(table: str) -> str:
    """The name of the table where schedulers publish the jobs whose records are in `table`."""
    return f"{table}_catalogue"


def ensure_history(conn: sqlite3.Connection, table: str) -> None:
    """Create the history and catalogue tables of `table` when they are missing (capability `history`).

    New tables beside the records, not a change to them: a replica of an older anarchon-sqlite
    still opens the file, and never reads them.
    """
    conn.execute(f"""
        CREATE TABLE IF NOT EXISTS "{history_table(table)}" (
            namespace   TEXT    NOT NULL,
            job         TEXT    NOT NULL,
            slot        INTEGER NOT NULL,   -- epoch ms, UTC
            attempt     INTEGER NOT NULL,
            token       INTEGER NOT NULL,
            instance    TEXT    NOT NULL,
            outcome     TEXT    NOT NULL,   -- done, failed, handover, lost
            started_at  INTEGER NOT NULL,   -- epoch ms, by the instance's clock
            duration_ms INTEGER NOT NULL,
            error       TEXT    NOT NULL,
            PRIMARY KEY (namespace, job, slot, attempt)
        ) WITHOUT ROWID""")
    conn.execute(f"""
        CREATE TABLE IF NOT EXISTS "{catalogue_table(table)}" (
            namespace   TEXT    NOT NULL,
            job         TEXT    NOT NULL,
            instance    TEXT    NOT NULL,
            schedule    TEXT    NOT NULL,
            kind        TEXT    NOT NULL,
            timezone    TEXT    NOT NULL,
            options     TEXT    NOT NULL,   -- a JSON object of strings
            next_slot   INTEGER,            -- epoch ms; NULL when the job has no slot left
            fingerprint TEXT    NOT NULL,
            seen_at     INTEGER NOT NULL,   -- store time, epoch ms
            expires_at  INTEGER NOT NULL,   -- store time, epoch ms
            PRIMARY KEY (namespace, job, instance)
        ) WITHOUT ROWID""")


def schedules_table(table: str) -> str:
    """The name of the table that keeps the stored schedules of the jobs whose records are in `table`."""
    return f"{table}_schedules"


def schedule_versions_table(table: str) -> str:
    """The name of the table that keeps each namespace's change counter of its stored schedules."""
    return f"{table}_sched_version"


def ensure_schedules(conn: sqlite3.Connection, table: str) -> None:
    """Create the schedules tables of `table` when they are missing (capability `schedules`), and add
    the partition column and its indexes to a schedules table of an older release.

    New tables beside the records, as the history's are: a file made by an older anarchon-sqlite
    gains them at its first open by this one, keeps everything it had, and still opens in the older
    release, which never reads them. Ids and tasks compare as BINARY (UTF-8 bytes: code point order);
    the due index reads `(namespace, next_due, id)` in order, or `(namespace, task, next_due, id)` for
    each task asked, or `(namespace, task, partition, next_due, id)` for each task and partition asked,
    and only the rows that have a next due.

    `partition` is `schedule_partition(id)`, written by this release with every schedule (SQLite has no
    MD5). It is NULL in the rows of an older release: in those it had before its first open by this one
    (until `fill_partitions` reaches them), and in those an older replica still writes. The due read
    by partitions reads the NULL ones too, through the same index, and keeps those of its partitions.
    """
    st, sv = schedules_table(table), schedule_versions_table(table)
    conn.execute(f"""
        CREATE TABLE IF NOT EXISTS "{st}" (
            namespace   TEXT    NOT NULL,
            id          TEXT    NOT NULL,
            task        TEXT    NOT NULL,
            spec        TEXT    NOT NULL,   -- JSON text, kept as written
            args        TEXT    NOT NULL,   -- JSON text, kept as written
            options     TEXT    NOT NULL,   -- JSON text, kept as written
            paused      INTEGER NOT NULL,   -- 1 while paused
            next_due    INTEGER,            -- epoch ms; NULL when the schedule has no slot left
            version     INTEGER NOT NULL,   -- the namespace's change counter at the write that made it
            created_at  INTEGER NOT NULL,   -- store time, epoch ms
            updated_at  INTEGER NOT NULL,   -- store time, epoch ms
            "partition" INTEGER,            -- schedule_partition(id); NULL: written by an older release
            PRIMARY KEY (namespace, id)
        ) WITHOUT ROWID""")
    if "partition" not in {str(r[1]) for r in conn.execute(f'PRAGMA table_info("{st}")').fetchall()}:
        # A table of an older release; nullable, so that its INSERTs (which do not name it) still work.
        conn.execute(f'ALTER TABLE "{st}" ADD COLUMN "partition" INTEGER')
    conn.execute(f'CREATE INDEX IF NOT EXISTS "{table}_sched_due" ON "{st}" (namespace, next_due, id) '
                 "WHERE next_due IS NOT NULL")
    conn.execute(f'CREATE INDEX IF NOT EXISTS "{table}_sched_task_due" ON "{st}" '
                 "(namespace, task, next_due, id) WHERE next_due IS NOT NULL")
    conn.execute(f'CREATE INDEX IF NOT EXISTS "{table}_sched_part_due" ON "{st}" '
                 '(namespace, task, "partition", next_due, id) WHERE next_due IS NOT NULL')
    # Empty once every row has its partition: it costs this release's writes nothing.
    conn.execute(f'CREATE INDEX IF NOT EXISTS "{table}_sched_unparted" ON "{st}" (namespace, id) '
                 'WHERE "partition" IS NULL')
    conn.execute(f'CREATE INDEX IF NOT EXISTS "{table}_sched_task" ON "{st}" (namespace, task, id)')
    conn.execute(f"""
        CREATE TABLE IF NOT EXISTS "{sv}" (
            namespace TEXT    NOT NULL PRIMARY KEY,
            version   INTEGER NOT NULL   -- grows with every write and removal of a schedule
        ) WITHOUT ROWID""")


def fill_partitions(conn: sqlite3.Connection, table: str, limit: int) -> int:
    """Write the partition of at most `limit` schedules that have none (rows of an older release), in
    the caller's transaction; the number written (0: none is left)."""
    st = schedules_table(table)
    rows = conn.execute(f'SELECT namespace, id FROM "{st}" WHERE "partition" IS NULL LIMIT ?',
                        (limit,)).fetchall()
    for namespace, schedule_id in rows:
        part = schedule_partition(str(schedule_id))
        conn.execute(f'UPDATE "{st}" SET "partition" = ? WHERE namespace = ? AND id = ? '
                     'AND "partition" IS NULL', (part, namespace, schedule_id))
    return len(rows)
