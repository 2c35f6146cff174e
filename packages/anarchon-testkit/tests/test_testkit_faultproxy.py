"""The fault proxy against a real echo server on loopback: every fault does what it says."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator

import pytest

from anarchon_testkit.faultproxy import FaultProxy, Mode


class Echo:
    """An upstream that echoes every line and records when it received each byte."""

    def __init__(self) -> None:
        self.received: list[tuple[float, bytes]] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                self.received.append((time.monotonic(), line))
                writer.write(line)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    server = Echo()
    await server.start()
    yield server
    assert server.server is not None
    server.server.close()


@pytest.fixture
async def proxy(echo: Echo) -> AsyncIterator[FaultProxy]:
    assert echo.server is not None
    port = echo.server.sockets[0].getsockname()[1]
    async with FaultProxy("127.0.0.1", port) as p:
        yield p


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, text: bytes,
              wait: float = 2.0) -> bytes:
    writer.write(text)
    await writer.drain()
    return await asyncio.wait_for(reader.readline(), wait)


async def test_forwards_both_ways(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    assert await ask(reader, writer, b"hello\n") == b"hello\n"
    assert await ask(reader, writer, b"again\n") == b"again\n"
    writer.close()
    assert proxy.stats.connections == 1
    assert proxy.stats.bytes_up == proxy.stats.bytes_down == len(b"hello\nagain\n")


async def test_latency_delays_each_way_and_keeps_order(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    await proxy.latency(0.15)
    started = time.monotonic()
    writer.write(b"one\ntwo\n")
    await writer.drain()
    first = await asyncio.wait_for(reader.readline(), 3)
    second = await asyncio.wait_for(reader.readline(), 3)
    assert (first, second) == (b"one\n", b"two\n")
    assert time.monotonic() - started >= 0.3  # 150 ms up and 150 ms down
    await proxy.latency(0)
    started = time.monotonic()
    assert await ask(reader, writer, b"fast\n") == b"fast\n"
    writer.close()


async def test_latency_refuses_a_negative_delay(proxy: FaultProxy) -> None:
    with pytest.raises(ValueError, match="-1"):
        await proxy.latency(-1)


async def test_partition_holds_bytes_until_heal(proxy: FaultProxy, echo: Echo) -> None:
    reader, writer = await connect(proxy)
    assert await ask(reader, writer, b"before\n") == b"before\n"
    await proxy.partition()
    writer.write(b"held\n")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readline(), 0.4)
    assert [line for _, line in echo.received] == [b"before\n"], "a byte crossed the partition"
    healed = time.monotonic()
    await proxy.heal()
    assert await asyncio.wait_for(reader.readline(), 2) == b"held\n"
    assert echo.received[-1][0] >= healed
    writer.close()


async def test_a_connection_opened_in_a_partition_connects_at_heal(proxy: FaultProxy, echo: Echo) -> None:
    await proxy.partition()
    reader, writer = await connect(proxy)
    writer.write(b"early\n")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readline(), 0.3)
    assert echo.received == []
    await proxy.heal()
    assert await asyncio.wait_for(reader.readline(), 2) == b"early\n"
    writer.close()


async def test_reset_resets_open_connections(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    assert await ask(reader, writer, b"x\n") == b"x\n"
    assert await proxy.reset() == 1
    writer.write(b"y\n")
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.readline(), 2)
    assert proxy.stats.resets == 1
    reader, writer = await connect(proxy)  # a new connection works at once
    assert await ask(reader, writer, b"z\n") == b"z\n"
    writer.close()


async def test_refuse_closes_the_port_until_heal(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    await proxy.refuse()
    assert proxy.mode is Mode.REFUSE
    with pytest.raises(ConnectionResetError):  # the open connection was reset
        await asyncio.wait_for(reader.read(), 2)
    with pytest.raises(ConnectionRefusedError):
        await connect(proxy)
    await proxy.heal()
    reader, writer = await connect(proxy)
    assert await ask(reader, writer, b"back\n") == b"back\n"
    writer.close()


async def test_blackhole_swallows_and_stays_dead_after_heal(proxy: FaultProxy, echo: Echo) -> None:
    reader, writer = await connect(proxy)
    await proxy.blackhole()
    late_reader, late_writer = await connect(proxy)  # accepted ...
    for r, w in ((reader, writer), (late_reader, late_writer)):
        w.write(b"lost\n")
        await w.drain()
        with pytest.raises(TimeoutError):  # ... and never answered
            await asyncio.wait_for(r.readline(), 0.3)
    await proxy.heal()
    with pytest.raises(TimeoutError):
        await ask(reader, writer, b"still lost\n", wait=0.3)
    assert echo.received == []
    fresh_reader, fresh_writer = await connect(proxy)
    assert await ask(fresh_reader, fresh_writer, b"fresh\n") == b"fresh\n"
    for w in (writer, late_writer, fresh_writer):
        w.close()


async def test_url_points_at_the_proxy(proxy: FaultProxy) -> None:
    assert proxy.url("redis://:secret@127.0.0.1:6379/3") == f"redis://:secret@127.0.0.1:{proxy.port}/3"
    assert proxy.url("postgresql://postgres@localhost/test?x=1") == (
        f"postgresql://postgres@127.0.0.1:{proxy.port}/test?x=1")


async def test_command_line_proxy(echo: Echo) -> None:
    assert echo.server is not None
    port = echo.server.sockets[0].getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "anarchon_testkit.faultproxy", f"127.0.0.1:{port}",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        banner = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
        assert banner.startswith("listening on 127.0.0.1:"), banner
        listen = int(banner.split(":")[1].split()[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", listen)
        assert await ask(reader, writer, b"via cli\n") == b"via cli\n"
        proc.stdin.write(b"partition\n")
        assert b"mode partition" in await asyncio.wait_for(proc.stdout.readline(), 5)
        proc.stdin.write(b"latency ten\n")
        assert b"'ten'" in await asyncio.wait_for(proc.stdout.readline(), 5)
        writer.close()
        proc.stdin.write(b"quit\n")
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
