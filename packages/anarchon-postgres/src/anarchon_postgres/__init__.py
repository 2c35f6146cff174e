"""anarchon-postgres: the PostgreSQL lease backend for anarchon (asyncpg).

    from anarchon import Scheduler
    from anarchon_postgres import PostgresBackend

    scheduler = Scheduler(backend=PostgresBackend("postgresql://app@db:5432/app"), lease="30s")
    # or: Scheduler.from_url("postgresql://app@db:5432/app?schema=jobs")

- `PostgresBackend(connection, *, schema="public", table="anarchon_jobs", statement_cache_size=None)`:
  `connection` is a `postgresql://` / `postgres://` URL or an `asyncpg.Pool` you already have.
  The table is created (and migrated, under an advisory lock) on `open()`.
- Every claim, renew and release is one statement: `INSERT … ON CONFLICT … DO UPDATE … WHERE …
  RETURNING`, judged by the server's `clock_timestamp()`. `claim_many` sends a batch as arrays.
- A handover NOTIFYs; backups LISTEN on one dedicated connection (`listen_url` if your pooler
  cannot carry LISTEN), so a graceful handover needs no polling.
- Behind PgBouncer in transaction mode pass `statement_cache_size=0`.
- Exactly-once writes in the same database: inside your transaction,
  `await backend.fence(conn, ctx)` locks the job's row and raises `anarchon.LeaseLost` unless
  `ctx.token` still owns the job.

See docs/backends/postgres.md and docs/recipes/exactly-once-postgres.md.
"""

from typing import TYPE_CHECKING

from anarchon.backends import lazy_exports

if TYPE_CHECKING:
    from ._backend import FenceContext, PostgresBackend
    from ._migrations import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "FenceContext", "PostgresBackend"]

# Every process that builds a Scheduler imports this package (its plugin module lives here), so the
# public names, and asyncpg with them, are imported on first use only (PEP 562).
_EXPORTS = {
    "FenceContext": "_backend",
    "PostgresBackend": "_backend",
    "SCHEMA_VERSION": "_migrations",
}


if not TYPE_CHECKING:
    # Hidden from type checkers, which would otherwise accept any name imported from this package.
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
