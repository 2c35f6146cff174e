"""anarchon-sqlite: the embedded lease backend, one SQLite file shared by processes on one host.

    from anarchon import JobContext, Scheduler

    scheduler = Scheduler.from_url("sqlite:///jobs.db", lease="6s", heartbeat="1s", log=True)

    @scheduler.every("sync", "10s")
    async def sync(ctx: JobContext) -> None:
        ...

    scheduler.run()

Start the same program three times: every slot runs in exactly one process, a process stopped with
SIGINT/SIGTERM hands its running job to another one at once (attempt 2), and a process killed with
`kill -9` is taken over once its lease expires.

URLs: `sqlite:///relative.db` (relative to the working directory) or `sqlite:////abs/path.db`, with
optional `?table=anarchon_jobs&busy_timeout=5s`. Or build it directly:

    from anarchon_sqlite import SqliteBackend
    scheduler = Scheduler(SqliteBackend("/var/lib/myapp/jobs.db", busy_timeout="5s"), lease="30s")

How it works: the file is in WAL mode; every claim, renewal and release is one statement or one
`BEGIN IMMEDIATE` transaction, and lease times come from SQLite's clock, so the processes never compare
their own clocks. A write lock held longer than `busy_timeout` is retried with backoff and logged.
The schema (`anarchon_jobs` and the version table `anarchon_meta`) is created on `open()`.

Limits: every process must be on the same host, and the file must be on a local disk, never a
network filesystem (NFS, SMB, most container volumes shared between hosts). See docs/backends/sqlite.md.
"""

from typing import TYPE_CHECKING

from anarchon.backends import lazy_exports

if TYPE_CHECKING:
    from ._backend import SqliteBackend
    from ._libsql import LibsqlBackend
    from ._schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "LibsqlBackend", "SqliteBackend"]

# Every process that builds a Scheduler imports this package (its plugin module lives here), so the
# public names, and sqlite3 with them, are imported on first use only (PEP 562).
_EXPORTS = {
    "SqliteBackend": "_backend",
    "LibsqlBackend": "_libsql",
    "SCHEMA_VERSION": "_schema",
}


if not TYPE_CHECKING:
    # Hidden from type checkers, which would otherwise accept any name imported from this package.
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
