"""LibsqlBackend: the SQLite backend's statements and lease rules on a local file, through libSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

from ._backend import Conn, SqliteBackend

__all__ = ["LibsqlBackend"]


class _LibsqlConnection:
    """A `libsql` connection that speaks like `sqlite3`'s to the SQLite backend: the same `execute`,
    `in_transaction` and `close`, with its errors (plain `ValueError`s) raised as sqlite3's."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        """Run one statement; a failure is raised as sqlite3's error of the same meaning."""
        try:
            return self._conn.execute(sql, tuple(parameters))
        except ValueError as exc:
            text = str(exc)
            lower = text.lower()
            kind: type[sqlite3.Error] = (
                sqlite3.OperationalError
                if any(w in lower for w in ("locked", "busy", "no such", "unable to open", "readonly"))
                else sqlite3.DatabaseError
            )
            raise kind(text) from exc

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""
        return bool(self._conn.in_transaction)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


def _connect(path: str, timeout_s: float) -> Conn:
    try:
        import libsql
    except ImportError as exc:
        raise ImportError(
            "LibsqlBackend needs the libsql package: install it with `pip install 'anarchon-sqlite[libsql]'`"
        ) from exc
    conn = libsql.connect(path, isolation_level=None)
    wrapped = _LibsqlConnection(conn)
    wrapped.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
    return cast(Conn, wrapped)


class LibsqlBackend(SqliteBackend):
    """Leases in a local libSQL (SQLite-compatible) file: `libsql:///path.db`, the SQLite backend's
    statements and rules over the `libsql` package's driver."""

    url_schemes: ClassVar[tuple[str, ...]] = ("libsql",)

    @classmethod
    def from_url(cls, url: str) -> LibsqlBackend:
        """`libsql:///relative.db` or `libsql:////abs/path.db`, optionally `?table=…&busy_timeout=…`."""
        return cls(url)

    def _driver_connect(self) -> Callable[[str, float], Conn]:
        """Open the file with libsql."""
        return _connect
