"""The client plumbing: commands packed in C into the bytes redis-py makes, one deadline per operation."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio

from anarchon_redis import RedisBackend
from anarchon_redis._client import _c_packing, split_url

COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "anarchon:{ns}:job", "anarchon:{ns}:others", 1_796_094_960_000, "host:1:ab12",
     30_000, 3, "skip", "every 1s", 2000),
    ("SCRIPT LOAD", "return 1"),
    (b"SCRIPT LOAD", "return 1"),
    ("SADD", "idx", "ジョブ-β-😀", 'it\'s "quoted"', "x" * 20_000),
    ("PUBLISH", "chan", b"\x00\xffbytes", 1.5, -7),
]


@pytest.mark.parametrize("args", COMMANDS)
def test_c_packer_matches_the_client_library(args: tuple[Any, ...]) -> None:
    python = redis.asyncio.Connection()
    packed = _c_packing(redis.asyncio.Connection)()
    assert b"".join(packed.pack_command(*args)) == b"".join(python.pack_command(*args))


@pytest.mark.parametrize("library", ["redis", "valkey"])
def test_a_pipeline_packs_through_the_swapped_pack_command(
    library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The C packing replaces the connection's `pack_command` (redis/redis-py#4176). That a pipeline
    # packs through it (`pack_commands`) is the client library's own business: this fails once it
    # stops, when the swap would be dead code and the claims would cost Python packing again.
    import hiredis

    module = redis.asyncio if library == "redis" else pytest.importorskip("valkey.asyncio")
    calls: list[tuple[Any, ...]] = []
    real = hiredis.pack_command

    def counting(args: tuple[Any, ...]) -> bytes:
        calls.append(args)
        packed: bytes = real(args)
        return packed

    monkeypatch.setattr(hiredis, "pack_command", counting)
    connection = _c_packing(module.Connection)()
    commands = [COMMANDS[0], COMMANDS[3], COMMANDS[4]]
    packed = b"".join(connection.pack_commands(commands))
    assert [args[0] for args in calls] == ["EVALSHA", "SADD", "PUBLISH"]
    assert packed == b"".join(module.Connection().pack_commands(commands))


def test_backends_built_from_a_url_use_it() -> None:
    backend = RedisBackend("redis://127.0.0.1:6379/0")
    cls = backend.client.connection_pool.connection_class
    assert cls.pack_command is not redis.asyncio.Connection.pack_command
    assert issubclass(cls, redis.asyncio.Connection)
    unix = RedisBackend("unix:///tmp/redis.sock")
    assert issubclass(unix.client.connection_pool.connection_class, redis.asyncio.UnixDomainSocketConnection)


def test_our_options_come_off_the_url_and_the_rest_is_kept_as_written() -> None:
    schemes = {"redis": "redis", "unix": "unix", "valkey": "redis"}
    assert split_url("unix:///tmp/r.sock?db=2&prefix=p", ("prefix",), schemes) == (
        "unix:///tmp/r.sock?db=2", {"prefix": "p"})
    assert split_url("valkey://:s3cret@h:6380/1?prefix=p&socket_timeout=3", ("prefix",), schemes) == (
        "redis://:s3cret@h:6380/1?socket_timeout=3", {"prefix": "p"})
    assert split_url("redis://h", ("prefix",), schemes) == ("redis://h", {})


async def test_a_server_that_never_answers_fails_the_operation_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A partition: the TCP connection is accepted, then nothing comes back. Without a read timeout
    # per reply, each operation must still end, as BackendUnavailable, at its own deadline.
    import asyncio

    from anarchon import BackendUnavailable
    from anarchon_redis import _lease

    monkeypatch.setattr(_lease, "OP_TIMEOUT_S", 0.3)
    held: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read(-1)

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    backend = RedisBackend(f"redis://:secret@127.0.0.1:{port}/0")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(BackendUnavailable, match=r"did not answer within 0.3 s while connecting") as info:
        await asyncio.wait_for(backend.open(), 5)  # a hang fails the test, not the run
    assert loop.time() - started < 3
    assert "secret" not in str(info.value)
    await backend.close()
    for writer in held:
        writer.close()
    server.close()


async def test_batches_larger_than_one_script_call_keep_their_order(redis_url: str, prefix: str) -> None:
    from anarchon.backends import ClaimOutcome, ClaimRequest, ReleaseOutcome
    from anarchon_redis._lease import BATCH

    backend = RedisBackend(redis_url, prefix=prefix)
    other = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    await other.open()
    try:
        n = 2 * BATCH + 3
        slot = 1_796_094_960_000

        def reqs(owner: str) -> list[ClaimRequest]:
            return [ClaimRequest("ns", f"job-{i}", slot, owner) for i in range(n)]

        won = await backend.claim_many(reqs("a"))
        assert [(r.job, r.outcome) for r in won] == [(f"job-{i}", ClaimOutcome.WON) for i in range(n)]
        taken = await other.claim_many(reqs("b"))
        assert [r.outcome for r in taken] == [ClaimOutcome.TAKEN] * n
        assert all(r.holder == "a" for r in taken)
        leases = [r.lease for r in won if r.lease is not None]
        # Two renewals in three and every other release are forged: each item is judged alone, across
        # chunk boundaries.
        from dataclasses import replace

        renewed = await backend.renew_many(
            [(lease if i % 3 == 0 else replace(lease, token=lease.token + 1), 60_000)
             for i, lease in enumerate(leases)]
        )
        assert [r is not None for r in renewed] == [i % 3 == 0 for i in range(n)]
        assert [r.job for r in renewed if r is not None] == [f"job-{i}" for i in range(0, n, 3)]
        assert all(r.expires_at > lease.expires_at for r, lease in zip(renewed, leases, strict=True) if r)
        batch = [(lease if i % 2 == 0 else replace(lease, owner="x"), ReleaseOutcome.DONE)
                 for i, lease in enumerate(leases)]
        assert await backend.release_many(batch) == [i % 2 == 0 for i in range(n)]
        again = await other.claim_many(reqs("b"))
        assert [r.outcome for r in again] == [
            ClaimOutcome.DONE if i % 2 == 0 else ClaimOutcome.TAKEN for i in range(n)
        ]
        assert len(await backend.jobs("ns")) == n
    finally:
        await backend.close()
        await other.close()


# Run in a fresh interpreter where `import valkey` fails exactly as it does when valkey-py is not
# installed (a None entry in sys.modules halts the import); nothing of the backend is replaced.
_WITHOUT_VALKEY_PY = """
import sys
sys.modules["valkey"] = None

from anarchon import Scheduler
from anarchon_redis import ValkeyBackend

for build in (Scheduler.from_url, ValkeyBackend.from_url, ValkeyBackend):
    try:
        build("valkey://127.0.0.1:1/0")
    except ImportError as exc:
        print("ImportError:", exc, "| caused by", type(exc.__cause__).__name__)
    else:
        print("built without valkey-py")

from anarchon_conformance._cli import main

sys.exit(main(["valkey://127.0.0.1:1/0"]))
"""


def test_valkey_url_without_valkey_py_fails_once_naming_the_extra() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _WITHOUT_VALKEY_PY], capture_output=True, text=True,
                          timeout=120, check=False)
    hint = "install it with `pip install 'anarchon-redis[valkey]'`"
    lines = done.stdout.splitlines()
    message = f"ValkeyBackend needs valkey-py: {hint}"
    assert lines == [f"ImportError: {message} | caused by ModuleNotFoundError"] * 3
    # The conformance kit says it once and runs no test, instead of failing every test with it.
    assert done.returncode == 2, done.stderr
    url = "valkey://127.0.0.1:1/0"
    assert done.stderr.strip() == f"anarchon-conformance: error: --anarchon-backend {url!r}: {message}"


async def test_a_client_passed_in_keeps_the_keeper_on_the_loop_and_the_log_says_why_once(
    raw: redis.asyncio.Redis, redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    # The backend does not own the client, so it cannot open a second connection for the keeper's
    # thread: the leases are renewed on the scheduler's loop, as one line at start says.
    import asyncio
    import logging
    import threading
    import time

    from anarchon import JobContext, JobStatus, Scheduler

    caplog.set_level(logging.INFO, logger="anarchon")
    backend = RedisBackend(raw, prefix=prefix)
    assert backend.sibling() is None
    scheduler = Scheduler(backend, lease="1s", heartbeat="0.3s")
    attempts: list[int] = []

    async def long(ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        await ctx.sleep(2)  # twice the lease: renewed on the loop

    scheduler.at("long", time.time() + 0.2, long, jitter=0)
    async with scheduler:
        assert [t.name for t in threading.enumerate() if t.name.startswith("anarchon-keeper")] == []
        await asyncio.sleep(3)
    lines = [m for m in caplog.messages if "renewed on the scheduler's event loop" in m]
    assert lines == [
        f"leases on {backend.url} are renewed on the scheduler's event loop, not beside it: it was given "
        "a client object that it does not own, so it cannot open a second connection; a handler that "
        "blocks the loop for longer than the lease loses its lease"
    ], caplog.text
    assert attempts == [1]
    reader = RedisBackend(redis_url, prefix=prefix)
    await reader.open()
    try:
        state = await reader.inspect("anarchon", "long")
    finally:
        await reader.close()
    assert state is not None and (state.status, state.attempt) == (JobStatus.DONE, 1), state
    assert await raw.ping()  # the client passed in is left open
