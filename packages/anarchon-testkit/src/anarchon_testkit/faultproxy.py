"""A TCP proxy on loopback that injects network faults between a replica and its store.

    proxy = FaultProxy("127.0.0.1", 6379)
    await proxy.start()
    url = proxy.url("redis://127.0.0.1:6379/0")   # the same URL, through the proxy's port
    await proxy.latency(0.2)  # 200 ms more each way, order kept
    await proxy.partition()   # sockets stay open, bytes are held ...
    await proxy.heal()        # ... and delivered now
    await proxy.reset()       # every open connection is reset (RST)
    await proxy.refuse()      # the port refuses connections; open ones are reset
    await proxy.blackhole()   # connections are accepted, then never answered
    await proxy.close()

One proxy serves one upstream; give each replica a proxy of its own to fault them one at a time.
Run `python -m anarchon_testkit.faultproxy --help` for a stand-alone proxy driven from stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import enum
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

__all__ = ["FaultProxy", "Mode", "ProxyStats"]

_CHUNK = 65536


class Mode(enum.StrEnum):
    """What the proxy does with the bytes it is given."""

    NORMAL = "normal"
    """Forward every byte (after the configured latency)."""
    PARTITION = "partition"
    """Hold every byte, both ways, on open and new connections, until `heal()` delivers them."""
    BLACKHOLE = "blackhole"
    """Accept connections and read their bytes, but never forward or answer; such a connection stays
    dead after `heal()` (the client must give up on it and reconnect)."""
    REFUSE = "refuse"
    """The port refuses new connections, and every open one was reset."""


@dataclass(slots=True)
class ProxyStats:
    """What the proxy has seen since it started."""

    connections: int = 0
    """Connections accepted."""
    resets: int = 0
    """Connections the proxy reset (`reset()`, `refuse()`)."""
    bytes_up: int = 0
    """Bytes delivered to the upstream."""
    bytes_down: int = 0
    """Bytes delivered back to clients."""
    modes: list[tuple[float, str]] = field(default_factory=list)
    """(monotonic time, mode) at every change, latency changes included."""


class _Pipe:
    """One direction of one connection: read, stamp with a due time, write in order when due."""

    def __init__(self, proxy: FaultProxy, conn: _Conn, up: bool) -> None:
        self.proxy = proxy
        self.conn = conn
        self.up = up
        self.queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

    async def read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                if self.conn.dead:
                    continue  # black-holed: read and dropped
                self.queue.put_nowait((time.monotonic() + self.proxy.delay, data))
        except (ConnectionError, OSError):
            pass
        finally:
            self.queue.put_nowait(None)

    async def write(self, writer_for: asyncio.Future[asyncio.StreamWriter]) -> None:
        proxy = self.proxy
        try:
            while True:
                item = await self.queue.get()
                if item is None:
                    break
                due, data = item
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await proxy._flowing.wait()  # a partition holds the bytes here until heal()
                if self.conn.dead:
                    continue
                writer = await writer_for
                writer.write(data)
                await writer.drain()
                if self.up:
                    proxy.stats.bytes_up += len(data)
                else:
                    proxy.stats.bytes_down += len(data)
        except (ConnectionError, OSError):
            pass
        finally:
            self.conn.close()


class _Conn:
    """One client connection and, once it is opened, its upstream connection."""

    def __init__(self, proxy: FaultProxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client_reader = reader
        self.client_writer = writer
        self.upstream: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()
        self.dead = proxy.mode is Mode.BLACKHOLE
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = False

    async def serve(self) -> None:
        proxy = self.proxy
        up = _Pipe(proxy, self, up=True)
        down = _Pipe(proxy, self, up=False)
        client_writer = asyncio.get_running_loop().create_future()
        client_writer.set_result(self.client_writer)
        self.tasks = [
            asyncio.ensure_future(up.read(self.client_reader)),
            asyncio.ensure_future(up.write(self.upstream)),
            asyncio.ensure_future(down.write(client_writer)),
        ]
        if not self.dead:
            try:
                await proxy._flowing.wait()  # a connection made during a partition connects at heal
                if self.dead or self.closed:
                    return
                reader, writer = await asyncio.open_connection(proxy.target_host, proxy.target_port)
            except (ConnectionError, OSError):
                self.close()
                return
            if self.closed:
                writer.close()
                return
            self.upstream.set_result(writer)
            self.tasks.append(asyncio.ensure_future(down.read(reader)))
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def reset(self) -> None:
        """Close both sides with a TCP reset, dropping what is unsent."""
        for writer in self._writers():
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for writer in self._writers():
            writer.close()
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self.proxy._conns.discard(self)

    def _writers(self) -> list[asyncio.StreamWriter]:
        writers = [self.client_writer]
        if self.upstream.done() and not self.upstream.cancelled():
            writers.append(self.upstream.result())
        return writers


class FaultProxy:
    """A TCP proxy from a loopback port to one upstream (host, port), with faults switched at will."""

    def __init__(self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self._port = listen_port
        self.delay = 0.0
        """Added latency each way, in seconds."""
        self.mode = Mode.NORMAL
        self.stats = ProxyStats()
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The loopback port clients connect to (known after `start()`)."""
        return self._port

    def url(self, url: str) -> str:
        """`url` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        userinfo, _, _ = parts.netloc.rpartition("@")
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunsplit((parts.scheme, f"{netloc}{self.listen_host}:{self.port}", parts.path, parts.query,
                           parts.fragment))

    async def start(self) -> None:
        """Listen on the port (a free one when 0 was given)."""
        self._server = await asyncio.start_server(self._accept, self.listen_host, self._port,
                                                  reuse_address=True)
        self._port = self._server.sockets[0].getsockname()[1]
        self._record()

    async def close(self) -> None:
        """Stop listening and close every connection."""
        await self._stop_listening()
        for conn in list(self._conns):
            conn.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- faults ---------------------------------------------------------------------------------

    async def latency(self, seconds: float) -> None:
        """Delay every byte by `seconds` more in each direction (0 removes the delay)."""
        if seconds < 0:
            raise ValueError(f"invalid latency {seconds!r}: use a number of seconds >= 0")
        self.delay = seconds
        self._record()

    async def partition(self) -> None:
        """Hold every byte, both ways, until `heal()`; sockets stay open."""
        self._flowing.clear()
        self._set(Mode.PARTITION)

    async def blackhole(self) -> None:
        """Make every open and new connection swallow its bytes without an answer, for good."""
        for conn in self._conns:
            conn.dead = True
        self._set(Mode.BLACKHOLE)

    async def reset(self) -> int:
        """Reset every open connection now; return how many. The mode stays as it is."""
        conns = list(self._conns)
        for conn in conns:
            conn.reset()
        self.stats.resets += len(conns)
        return len(conns)

    async def refuse(self) -> None:
        """Refuse new connections (the port is closed) and reset every open one."""
        await self._stop_listening()
        await self.reset()
        self._set(Mode.REFUSE)

    async def heal(self) -> None:
        """Back to normal: held bytes are delivered, a refused port listens again, and black-holed
        connections stay dead."""
        if self._server is None:
            await self.start()
        self._flowing.set()
        self._set(Mode.NORMAL)

    # -- internals ------------------------------------------------------------------------------

    def _set(self, mode: Mode) -> None:
        self.mode = mode
        self._record()

    def _record(self) -> None:
        label = self.mode.value if not self.delay else f"{self.mode.value}+{int(self.delay * 1000)}ms"
        self.stats.modes.append((time.monotonic(), label))

    async def _stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode is Mode.REFUSE:  # accepted just as the port closed
            writer.transport.abort()
            return
        self.stats.connections += 1
        conn = _Conn(self, reader, writer)
        self._conns.add(conn)
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await conn.serve()
        except asyncio.CancelledError:
            # Cancelled by `stop`: end quietly (on Python 3.11, asyncio's server logs a traceback
            # for a handler task that ends cancelled).
            pass
        finally:
            conn.close()
            self._handlers.discard(task)


async def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m anarchon_testkit.faultproxy",
        description="A loopback TCP proxy with faults. Commands on stdin, one per line: latency SECONDS, "
                    "partition, blackhole, reset, refuse, heal, stats, quit.",
    )
    parser.add_argument("target", help="upstream HOST:PORT, e.g. 127.0.0.1:6379")
    parser.add_argument("--port", type=int, default=0,
                        help="loopback port to listen on (default: a free one)")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"invalid target {args.target!r}: use HOST:PORT, e.g. 127.0.0.1:6379")
    proxy = FaultProxy(host, int(port), listen_port=args.port)
    await proxy.start()
    print(f"listening on 127.0.0.1:{proxy.port} -> {host}:{port}", flush=True)
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if not line or line == "quit":
                return 0
            word, _, arg = line.partition(" ")
            try:
                if word == "latency":
                    await proxy.latency(float(arg))
                elif word in {"partition", "blackhole", "heal", "refuse"}:
                    await getattr(proxy, word)()
                elif word == "reset":
                    print(f"reset {await proxy.reset()} connection(s)", flush=True)
                elif word == "stats":
                    print(proxy.stats, flush=True)
                    continue
                else:
                    print(f"unknown command {line!r}", flush=True)
                    continue
            except ValueError as exc:
                print(exc, flush=True)
                continue
            print(f"mode {proxy.mode.value}, latency {proxy.delay:g} s", flush=True)
    finally:
        await proxy.close()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(_main()))
