"""Opening a file: URLs, the versioned schema, concurrent first opens, and every kind of bad input."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from anarchon import (
    BackendError,
    BackendUnavailable,
    ClaimRequest,
    MemoryBackend,
    ScheduleError,
    Scheduler,
    SchemaMismatch,
    backend_for_url,
)
from anarchon_sqlite import SCHEMA_VERSION, SqliteBackend


def _slot() -> int:
    return time.time_ns() // 1_000_000 - 10_000


async def test_from_url_finds_the_backend_through_the_entry_point(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    backend = backend_for_url("sqlite:///relative.db?table=my_jobs&busy_timeout=250ms")
    assert isinstance(backend, SqliteBackend)
    assert (backend.path, backend.table, backend.busy_timeout_ms) == ("relative.db", "my_jobs", 250)
    scheduler = Scheduler.from_url("sqlite:///relative.db", lease="2s", heartbeat="0.5s")
    assert isinstance(scheduler.backend, SqliteBackend)
    await scheduler.start()
    await scheduler.stop()
    assert (tmp_path / "relative.db").is_file()


def test_a_sqlite_url_imports_sqlite3_and_no_other_client_library(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import json, sys
        import anarchon
        anarchon.Scheduler.from_url(sys.argv[1])
        plugins = [name for name, _ in anarchon.plugin_manager().list_name_plugin()]
        print(json.dumps({"modules": sorted(sys.modules), "plugins": plugins}))
    """)
    env = {k: v for k, v in os.environ.items() if k != "ANARCHON_DISABLE_PLUGIN_AUTOLOAD"}
    done = subprocess.run([sys.executable, "-c", code, f"sqlite:///{tmp_path}/x.db"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # Every installed driver's plugin was loaded, so the client libraries were there to be imported.
    assert {ep.name for ep in entry_points(group="anarchon")} <= set(seen["plugins"])
    assert "sqlite3" in seen["modules"]
    for client in ("redis", "valkey", "asyncpg", "aio_pika", "aiormq", "nats"):
        assert client not in seen["modules"], f"a sqlite:// URL imported {client}"


def test_absolute_urls_and_plain_paths(tmp_path: Path) -> None:
    absolute = SqliteBackend(f"sqlite:///{tmp_path}/jobs.db")  # sqlite:////tmp/... : four slashes
    assert absolute.path == f"{tmp_path}/jobs.db"
    assert absolute.url == f"sqlite:///{tmp_path}/jobs.db"
    assert SqliteBackend(tmp_path / "jobs.db").path == str(tmp_path / "jobs.db")


@pytest.mark.parametrize(("value", "words"), [
    ("sqlite://host/jobs.db", "no host"),
    ("sqlite://", "no file path"),
    ("sqlite:///jobs.db?tabel=x", "unknown option(s) 'tabel'"),
    (":memory:", "MemoryBackend"),
    ("", "invalid SQLite path"),
])
def test_bad_urls_are_refused_with_the_value(value: str, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        SqliteBackend(value)


def test_bad_table_and_timeout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid table name 'jobs; drop'"):
        SqliteBackend(tmp_path / "x.db", table="jobs; drop")
    with pytest.raises(ScheduleError, match="invalid busy_timeout 'soon'"):
        SqliteBackend(tmp_path / "x.db", busy_timeout="soon")


async def test_an_unopened_backend_says_so(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "jobs.db")
    with pytest.raises(BackendUnavailable, match="not open"):
        await backend.claim(ClaimRequest("ns", "job", _slot(), "a"))


async def test_schema_is_created_once_versioned_and_reopened(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    first = SqliteBackend(path)
    await first.open()
    await first.open()  # idempotent
    result = await first.claim(ClaimRequest("ns", "job", _slot(), "a"))
    assert result.won
    await first.close()
    await first.close()
    second = SqliteBackend(path)
    await second.open()
    state = await second.inspect("ns", "job")
    assert state is not None
    assert state.owner == "a"
    await second.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name, version FROM anarchon_meta").fetchall() == [
            ("anarchon_jobs", SCHEMA_VERSION)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_two_tables_in_one_file_are_independent(tmp_path: Path) -> None:
    a = SqliteBackend(tmp_path / "jobs.db", table="app_a")
    b = SqliteBackend(tmp_path / "jobs.db", table="app_b")
    await a.open()
    await b.open()
    slot = _slot()
    assert (await a.claim(ClaimRequest("ns", "job", slot, "x"))).won
    assert (await b.claim(ClaimRequest("ns", "job", slot, "y"))).won
    await a.close()
    await b.close()


_OPENER = """
import asyncio, sys, time
from anarchon_sqlite import SqliteBackend
async def main():
    start = float(sys.argv[2])
    time.sleep(max(0.0, start - time.time()))
    backend = SqliteBackend(sys.argv[1])
    await backend.open()
    await backend.close()
    print("ok")
asyncio.run(main())
"""


def test_processes_opening_a_fresh_file_at_once_all_succeed(tmp_path: Path) -> None:
    for round_ in range(3):
        path = tmp_path / f"fresh{round_}.db"
        start = time.time() + 1.0
        procs = [subprocess.Popen([sys.executable, "-c", _OPENER, str(path), str(start)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
        for proc in procs:
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            assert out.strip() == "ok"


async def test_missing_directory_fails_at_start_and_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "deeper"
    scheduler = Scheduler(SqliteBackend(missing / "jobs.db"), lease="2s", heartbeat="0.5s")
    with pytest.raises(BackendUnavailable, match="does not exist") as info:
        await scheduler.start()
    assert str(missing) in str(info.value)
    assert not missing.exists()


async def test_garbage_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    garbage = b"these are my notes, not a database\n" * 200
    path.write_bytes(garbage)
    before = path.stat()
    with pytest.raises(BackendError, match="is not a SQLite database") as info:
        await SqliteBackend(path).open()
    assert "left untouched" in str(info.value)
    after = path.stat()
    assert path.read_bytes() == garbage
    assert after.st_mtime_ns == before.st_mtime_ns
    beside = sorted(os.listdir(tmp_path))
    assert beside == ["notes.db"]  # no -wal or -shm file was created


async def test_opening_a_second_backend_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    """POSIX drops every lock a process holds on a file when any descriptor of it closes. A second
    backend on the same file (the lease keeper's thread) must not open one beside SQLite's: another
    process would then take itself for the last connection and delete the WAL under the first."""
    path = tmp_path / "jobs.db"
    first, second = SqliteBackend(path), SqliteBackend(path)
    await first.open()
    try:
        assert (await first.claim(ClaimRequest("ns", "job", _slot(), "a"))).won
        await second.open()
        other = ("import sqlite3, sys; conn = sqlite3.connect(sys.argv[1]); "
                 "conn.execute('SELECT count(*) FROM sqlite_master'); conn.close()")
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", other, str(path)], timeout=30)
        assert done.returncode == 0
        assert (tmp_path / "jobs.db-wal").exists(), "another process deleted the WAL of open connections"
    finally:
        await second.close()
        await first.close()


async def test_read_only_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = SqliteBackend(path)
    await backend.open()
    await backend.close()
    content = path.read_bytes()
    path.chmod(0o444)
    try:
        with pytest.raises(BackendUnavailable, match="read-only") as info:
            await SqliteBackend(path).open()
        assert "chmod" in str(info.value)
        assert path.read_bytes() == content
    finally:
        path.chmod(0o644)


def _foreign_table(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE anarchon_jobs (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO anarchon_jobs (name) VALUES ('keep me')")
        return str(conn.execute("SELECT sql FROM sqlite_master WHERE name = 'anarchon_jobs'").fetchone()[0])


async def test_a_foreign_table_is_named_and_not_altered(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    sql = _foreign_table(path)
    with pytest.raises(SchemaMismatch, match="table 'anarchon_jobs'") as info:
        await SqliteBackend(path).open()
    assert "table='another_name'" in str(info.value)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT sql FROM sqlite_master WHERE name = 'anarchon_jobs'").fetchone()[0] == sql
        assert conn.execute("SELECT id, name FROM anarchon_jobs").fetchall() == [(1, "keep me")]
        # Nothing else was created either: the failed open rolled its transaction back.
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert names == {"anarchon_jobs"}
    other = SqliteBackend(path, table="scheduler_jobs")
    await other.open()
    await other.close()


async def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = SqliteBackend(path)
    await backend.open()
    await backend.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE anarchon_meta SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaMismatch, match=f"schema version {SCHEMA_VERSION + 1}"):
        await SqliteBackend(path).open()


def test_memory_backend_is_still_the_reference_for_memory_urls() -> None:
    assert isinstance(backend_for_url("memory://"), MemoryBackend)
    assert os.fspath(SqliteBackend("sqlite:///a.db").path) == "a.db"
