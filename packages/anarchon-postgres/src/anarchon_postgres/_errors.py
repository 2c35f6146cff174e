"""The one place that maps asyncpg's exceptions to anarchon's."""

from __future__ import annotations

import asyncio

import asyncpg

from anarchon import BackendError, BackendUnavailable, SchemaMismatch

__all__ = ["translate"]

# Errors after which the connection (or the server) is gone: the operation may be retried later.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, pg_terminate_backend, crash
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InterfaceError,  # "connection is closed", pool closing
    asyncpg.exceptions.InsufficientResourcesError,
)
_SCHEMA: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.UndefinedTableError,
    asyncpg.exceptions.UndefinedColumnError,
    asyncpg.exceptions.InvalidSchemaNameError,
    asyncpg.exceptions.DatatypeMismatchError,
)

# Prepared statements that a transaction-mode pooler lost, or found twice, on its server connections.
_POOLER: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.InvalidSQLStatementNameError,
    asyncpg.exceptions.DuplicatePreparedStatementError,
)


def translate(exc: BaseException, what: str, where: str) -> BackendError | None:
    """Return anarchon's error for `exc`, raised while doing `what` on `where` (a redacted URL);
    None when it is not asyncpg's or a socket's."""
    if not isinstance(exc, (asyncpg.PostgresError, *_UNAVAILABLE)):
        return None
    detail = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, _SCHEMA):
        return SchemaMismatch(
            f"{what} on {where} failed: {detail}; the table does not have the shape anarchon-postgres "
            "creates. Point `schema`/`table` at a table anarchon owns, or drop it so it is recreated"
        )
    if isinstance(exc, _UNAVAILABLE):
        return BackendUnavailable(f"{what} on {where} failed: {detail}; is PostgreSQL up and reachable?")
    if isinstance(exc, _POOLER):
        return BackendError(
            f"{what} on {where} failed: {detail}; prepared statements do not outlive a transaction behind "
            "a transaction-mode pooler such as PgBouncer: add statement_cache_size=0 to the URL (and "
            "listen_url=<a direct URL to the server>, which the pooler's LISTEN cannot replace), or use "
            "session pooling"
        )
    if isinstance(exc, asyncpg.exceptions.InvalidAuthorizationSpecificationError):
        return BackendUnavailable(f"{what} on {where} failed: {detail}; check the user and password")
    return BackendError(f"{what} on {where} failed: {detail}")
