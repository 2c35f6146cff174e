"""Real OS-process clusters for driver tests: N replicas of `anarchon_testkit._replica` on one store.

    with Cluster(url, tmp_path, replicas=3, lease="2s", heartbeat="0.5s") as cluster:
        ev = cluster.wait_for(lambda e: e.event == "start" and e.job == "long", timeout=20)
        cluster.terminate(ev.pid)                  # SIGTERM: graceful stop, handover
        cluster.wait_for(lambda e: e.slot == ev.slot and e.attempt == 2, timeout=10)
        cluster.assert_one_winner()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

from anarchon import Duration, parse_duration

from .faultproxy import FaultProxy

T = TypeVar("T")

__all__ = ["FAULT_SCENARIOS", "STOP_SCENARIOS", "Cluster", "Event", "ProxyThread", "check_blocked_loops",
           "check_controls", "check_every_slot_once", "check_history", "check_slow_network",
           "check_stored_schedules",
           "check_stop_never_overlaps", "check_store_fault"]


@dataclass(frozen=True, slots=True)
class Event:
    """One line a replica wrote: a handler's start, end or cancellation, or the replica's ready,
    stopping (SIGTERM received) or exit."""

    event: str
    pid: int
    t: float
    """Wall time, epoch seconds."""
    job: str = ""
    slot: int = 0
    attempt: int = 0
    reason: str = ""
    instance: str = ""
    keeper: str = ""
    """On a ready line: where the replica's lease keeper renews its leases."""


class Cluster:
    """Start, stop, kill and observe replica processes that share one backend URL."""

    def __init__(
        self,
        url: str,
        workdir: Path | str,
        *,
        replicas: int = 3,
        namespace: str | None = None,
        lease: Duration = "2s",
        heartbeat: Duration = "0.5s",
        tick_every: Duration = "1s",
        long_every: Duration = "6s",
        long_run: Duration = "3s",
        stop_timeout: Duration = "5s",
        block_every: Duration = "5s",
        block_for: list[float] | None = None,
        block_limit: Duration | None = None,
        env: dict[str, str] | None = None,
        extra_ticks: int = 0,
        history: int | None = None,
        later: bool = False,
        stubborn: dict[str, Any] | None = None,
        tasks: list[str] | None = None,
        ready_within: float = 30.0,
    ) -> None:
        self.url = url
        self.ready_within = ready_within
        """Seconds the replicas have to start (open the store, migrate, subscribe) before a test fails."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.replicas = replicas
        self.namespace = namespace or f"cluster-{uuid.uuid4().hex[:8]}"
        self.lease_ms = parse_duration(lease, name="lease")
        self.heartbeat_ms = parse_duration(heartbeat, name="heartbeat")
        self._config = {
            "url": url, "workdir": str(self.workdir), "namespace": self.namespace,
            "lease": f"{self.lease_ms}ms", "heartbeat": f"{self.heartbeat_ms}ms",
            "tick_every": f"{parse_duration(tick_every, name='tick_every')}ms",
            "long_every": f"{parse_duration(long_every, name='long_every')}ms",
            "long_run": parse_duration(long_run, name="long_run") / 1000,
            "stop_timeout": f"{parse_duration(stop_timeout, name='stop_timeout', allow_zero=True)}ms",
            "block_every": f"{parse_duration(block_every, name='block_every')}ms",
            "block_for": list(block_for or []),
            "extra_ticks": extra_ticks,
            "history": history,
            "later": later,
            "stubborn": stubborn,
            "tasks": list(tasks or []),
            "block_limit": (None if block_limit is None
                            else f"{parse_duration(block_limit, name='block_limit')}ms"),
        }
        self._env = {**os.environ, **(env or {})}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.logs: dict[int, Path] = {}
        """Each replica's stdout and stderr, by pid."""
        self.ready_ms = 0
        """Wall time (epoch ms) when every initial replica was ready: a slot after it has every
        replica as a claimant, so a graceful stop of its winner always has a backup."""

    def __enter__(self) -> Cluster:
        pids = {self.spawn(wait=False) for _ in range(self.replicas)}
        deadline = time.monotonic() + self.ready_within
        while {e.pid for e in self.events() if e.event == "ready"} < pids:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"replicas not ready within {self.ready_within:g} s:\n{self.output(tail=40)}")
            time.sleep(0.05)
        self.ready_ms = int(time.time() * 1000)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def spawn(self, *, wait: bool = True, tasks: list[str] | None = None) -> int:
        """Start one more replica; return its pid once it is ready (or at once with wait=False).
        `tasks`: this replica's tasks instead of the cluster's (e.g. [] for one that lacks them)."""
        path = self.workdir / f"replica-{len(self.procs)}-{uuid.uuid4().hex[:4]}.log"
        log = path.open("wb")
        config = self._config if tasks is None else {**self._config, "tasks": list(tasks)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "anarchon_testkit._replica", json.dumps(config)],
            stdout=log, stderr=subprocess.STDOUT, env=self._env,
        )
        self.procs[proc.pid] = proc
        self.logs[proc.pid] = path
        if wait:
            self.wait_for(lambda e: e.event == "ready" and e.pid == proc.pid, timeout=30)
        return proc.pid

    def alive(self) -> list[int]:
        """Pids of replicas still running."""
        return [pid for pid, p in self.procs.items() if p.poll() is None]

    def terminate(self, pid: int, sig: int = signal.SIGTERM) -> None:
        """Send SIGTERM (a graceful stop), or `sig`, and return at once; `join` waits for the exit."""
        self.procs[pid].send_signal(sig)

    def log_of(self, pid: int) -> str:
        """What one replica has written to stdout and stderr so far."""
        return self.logs[pid].read_text(errors="replace")

    def wait_for_log(self, pid: int, text: str, *, timeout: float) -> str:
        """Wait up to `timeout` s for a line of replica `pid`'s output that contains `text`; return it."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log_of(pid).splitlines():
                if text in line:
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"replica {pid} wrote no line with {text!r} within {timeout} s:\n"
                                     f"{self.log_of(pid)[-4000:]}")
            time.sleep(0.05)

    def join(self, pid: int, *, wait: float = 15.0) -> int | None:
        """Wait for a replica sent SIGTERM to exit; return its exit code."""
        proc = self.procs[pid]
        try:
            return proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"replica {pid} did not stop within {wait} s of SIGTERM") from None

    def stop(self, pid: int, *, wait: float = 15.0) -> int | None:
        """Send SIGTERM (a graceful stop) and wait for the process to exit; return its exit code."""
        self.terminate(pid)
        return self.join(pid, wait=wait)

    def kill(self, pid: int) -> None:
        """Send SIGKILL: the replica vanishes without releasing anything."""
        proc = self.procs[pid]
        proc.kill()
        proc.wait(10)

    def close(self) -> None:
        """Stop every replica (SIGTERM, then SIGKILL after 15 s)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def events(self) -> list[Event]:
        """Every event written so far, ordered by wall time."""
        found: list[Event] = []
        for path in self.workdir.glob("events-*.jsonl"):
            for line in path.read_text().splitlines():
                if line.strip():
                    try:
                        found.append(Event(**json.loads(line)))
                    except (ValueError, TypeError):
                        continue  # a line cut short by kill -9
        return sorted(found, key=lambda e: e.t)

    def wait_for(self, predicate: Callable[[Event], bool], *, timeout: float) -> Event:
        """Return the first event matching `predicate`, waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events():
                if predicate(event):
                    return event
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no matching event within {timeout} s; replica output:\n{self.output(tail=40)}"
                )
            time.sleep(0.05)

    def starts(self, job: str | None = None) -> list[Event]:
        """Handler starts, optionally of one job."""
        return [e for e in self.events() if e.event == "start" and (job is None or e.job == job)]

    def assert_one_winner(self) -> None:
        """At most one handler start per (job, slot, attempt) across every replica."""
        counts = Counter((e.job, e.slot, e.attempt) for e in self.starts())
        doubles = {k: n for k, n in counts.items() if n > 1}
        assert not doubles, f"more than one winner for (job, slot, attempt): {doubles}"

    def missed(self, job: str, since_ms: int, until_ms: int, every_ms: int = 1000) -> list[int]:
        """Slots of `job` on its grid in [since_ms, until_ms] that no replica started."""
        started = {e.slot for e in self.starts(job)}
        first = -(-since_ms // every_ms) * every_ms
        return [s for s in range(first, until_ms + 1, every_ms) if s not in started]

    def output(self, tail: int = 40) -> str:
        """The last lines of every replica's stdout/stderr, for failure messages."""
        chunks = []
        for path in sorted(self.workdir.glob("replica-*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            chunks.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(chunks)

    def __repr__(self) -> str:
        return f"Cluster({self.url!r}, replicas={len(self.alive())})"


def check_every_slot_once(url: str, workdir: Path | str, *, seconds: float = 6.0,
                          at_most: float = 30.0) -> None:
    """Run three replicas on `url` for `seconds` and assert that every slot of a 1 s job and of a
    3 s job (which runs for 1 s) started exactly once, and that more than one replica won.

    A loaded machine can let one replica win every slot of a short run, so the run goes on, up to
    `at_most` seconds, until a second replica has won one."""
    with Cluster(url, workdir, replicas=3, tick_every="1s", long_every="3s", long_run="1s") as c:
        since = int(time.time() * 1000) + 1000
        time.sleep(seconds)
        deadline = time.monotonic() + at_most - seconds
        while len({e.pid for e in c.starts()}) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        until = int(time.time() * 1000) - 1000
        c.assert_one_winner()
        assert c.missed("tick", since, until) == [], c.output()
        assert c.missed("long", since, until, every_ms=3000) == [], c.output()
        assert len({e.pid for e in c.starts()}) >= 2, "one replica won every slot: no race happened"


def check_blocked_loops(url: str, workdir: Path | str, *, lease_s: float = 1.0, heartbeat_s: float = 0.3,
                        block_limit_s: float = 4.0) -> None:
    """Run three replicas on `url` whose `async def` job blocks its event loop with `time.sleep`, and
    assert what the lease keeper's thread promises:

    1. a run that blocks for three leases (less than `block_limit`) ends as attempt 1, and no replica
       starts attempt 2 of its slot meanwhile;
    2. a run that blocks for good is taken over as attempt 2 within block_limit + lease + heartbeat
       (plus half a second between the keeper's checks at a heartbeat of 1 s or less, the claim
       jitter and a round trip).

    Every replica's keeper renews beside its loop, on a connection its driver's `sibling()` made.
    """
    # The blocking job's next slot must begin well after the hung run's lease can have expired
    # (block_limit + lease after its start, at most): a newer slot that begins first supersedes the
    # takeover, since only the latest slot runs.
    every = f"{2 * math.ceil(block_limit_s + lease_s)}s"
    with Cluster(url, workdir, replicas=3, lease=f"{lease_s}s", heartbeat=f"{heartbeat_s}s",
                 tick_every="1s", long_every="1h", block_every=every, block_for=[3 * lease_s, 3600.0],
                 block_limit=f"{block_limit_s}s") as c:
        keepers = {e.pid: e.keeper for e in c.events() if e.event == "ready"}
        assert set(keepers.values()) == {
            "beside the scheduler's event loop, on a second connection from its sibling()"}, keepers
        # The cluster's first blocking run blocks for three leases (a marker file per run), even one that
        # started before the last replica was up: so the first start of all, not the first after ready.
        first = c.wait_for(lambda e: e.event == "start" and e.job == "block", timeout=20)
        end = c.wait_for(lambda e: e.event == "end" and e.job == "block" and e.slot == first.slot, timeout=20)
        assert (end.pid, end.attempt) == (first.pid, 1), (first, end, c.output())
        time.sleep(lease_s + heartbeat_s)  # an attempt 2 would have started by now
        retried = [e for e in c.starts("block") if e.slot == first.slot and e.attempt > 1]
        assert not retried, f"attempt 2 started while attempt 1 blocked its loop: {retried}\n{c.output()}"

        hung = c.wait_for(lambda e: e.event == "start" and e.job == "block" and e.slot > first.slot,
                          timeout=20)
        taken = c.wait_for(lambda e: e.event == "start" and e.job == "block" and e.slot == hung.slot
                           and e.attempt == 2, timeout=block_limit_s + lease_s + 15)
        took = taken.t - hung.t
        bound = block_limit_s + lease_s + heartbeat_s + 0.5 + 0.05 + 0.5
        assert taken.pid != hung.pid and block_limit_s <= took <= bound, (
            f"taken over {took:.2f} s after the loop blocked; expected within "
            f"[{block_limit_s}, {bound:.2f}] s\n{c.output()}")
        c.kill(hung.pid)  # it would sleep for an hour
        c.assert_one_winner()


STOP_SCENARIOS = ("thread", "thread-second-signal", "async", "replace")
"""The cases of `check_stop_never_overlaps`."""


def check_stop_never_overlaps(url: str, workdir: Path | str, scenario: str, *, lease_s: float = 2.0,
                              heartbeat_s: float = 0.5, stop_timeout_s: float = 1.0) -> None:
    """Two replicas on `url` (run with `Scheduler.run()`) share a one-off job whose handler ignores its
    cancellation signal for 6 s; SIGINT goes to the replica that runs it. Assert that no second run of
    the slot starts while the first one runs:

    - "thread": a plain function. After `stop_timeout` one line names the handler and says that its
      lease is kept; the run ends done when the function returns, then the replica exits (status 0);
      no attempt 2 ever starts.
    - "thread-second-signal": the same, then a second SIGINT: the replica exits at once (status 130)
      without releasing, and the other replica takes the slot over as attempt 2 once the lease
      expires, after the exit.
    - "async": an `async def` that ignores `ctx.cancelled`: after `stop_timeout` it is cancelled, and
      the other replica takes the slot over as attempt 2 once it has ended.
    - "replace": no stop; the job is due every 2 s under `overlap="replace"`, and its plain function
      ignores its signal for 3 s. Each newer slot asks the older run to end and waits until its
      thread returns: no two runs ever overlap, and one line names the handler.
    """
    if scenario == "replace":
        _check_replace_never_overlaps(url, workdir, lease_s=lease_s, heartbeat_s=heartbeat_s,
                                      stop_timeout_s=stop_timeout_s)
        return
    kind = "async" if scenario == "async" else "thread"
    at = time.time() + 4.0
    with Cluster(url, workdir, replicas=2, lease=f"{lease_s}s", heartbeat=f"{heartbeat_s}s",
                 tick_every="1h", long_every="1h", stop_timeout=f"{stop_timeout_s}s",
                 stubborn={"at": at, "kind": kind, "seconds": 6.0}) as c:
        first = c.wait_for(lambda e: e.event == "start" and e.job == "stubborn", timeout=20)
        winner = first.pid
        other = next(pid for pid in c.procs if pid != winner)
        time.sleep(0.5)
        c.terminate(winner, signal.SIGINT)
        signalled = time.time()
        c.wait_for_log(winner, "a second signal exits at once", timeout=5)
        if kind == "thread":
            line = c.wait_for_log(winner, "still runs", timeout=stop_timeout_s + 5)
            assert "stubborn_thread" in line and "lease is kept" in line, line
            assert "second SIGINT or SIGTERM exits now" in line, line
        if scenario == "thread-second-signal":
            c.terminate(winner, signal.SIGINT)
            again = time.time()
            assert c.join(winner, wait=5) == 128 + signal.SIGINT, c.log_of(winner)
            taken = c.wait_for(lambda e: e.event == "start" and e.job == "stubborn" and e.attempt == 2,
                               timeout=lease_s + heartbeat_s + 10)
            assert taken.pid == other and taken.t > again, (taken, again, c.output())
            ends = [e for e in c.events() if e.pid == winner and e.event in ("end", "cancelled")]
            assert not ends, f"attempt 1 went on after the second signal: {ends}"
        elif scenario == "thread":
            end = c.wait_for(lambda e: e.event == "end" and e.pid == winner, timeout=15)
            assert end.t - signalled > stop_timeout_s, "the handler did not outlive the stop"
            assert c.join(winner, wait=10) == 0, c.log_of(winner)
            time.sleep(lease_s + heartbeat_s + 0.5)  # an attempt 2 would have started by now
            assert [e.attempt for e in c.starts("stubborn")] == [1], c.output()
        else:
            cancelled = c.wait_for(lambda e: e.event == "cancelled" and e.pid == winner,
                                   timeout=stop_timeout_s + 5)
            taken = c.wait_for(lambda e: e.event == "start" and e.job == "stubborn" and e.attempt == 2,
                               timeout=lease_s + heartbeat_s + 10)
            assert taken.pid == other and taken.t >= cancelled.t, (taken, cancelled, c.output())
            assert c.join(winner, wait=10) == 0, c.log_of(winner)
        c.assert_one_winner()


def _check_replace_never_overlaps(url: str, workdir: Path | str, *, lease_s: float, heartbeat_s: float,
                                  stop_timeout_s: float) -> None:
    """`check_stop_never_overlaps`'s "replace" case."""
    with Cluster(url, workdir, replicas=2, lease=f"{lease_s}s", heartbeat=f"{heartbeat_s}s",
                 tick_every="1h", long_every="1h", stop_timeout=f"{stop_timeout_s}s",
                 stubborn={"at": 0, "kind": "thread", "seconds": 3.0, "every": "2s",
                           "overlap": "replace"}) as c:
        first = c.wait_for(lambda e: e.event == "start" and e.job == "stubborn", timeout=20)
        # Runs of 3 s every 2 s: by the third start, two newer slots have each waited for a thread.
        c.wait_for(lambda e: e.event == "start" and e.job == "stubborn" and e.t > first.t + 5, timeout=15)
        time.sleep(1.0)
        events = [e for e in c.events() if e.job == "stubborn" and e.event in ("start", "end")]
        live = 0
        for event in events:  # (ordered by wall time)
            live += 1 if event.event == "start" else -1
            assert live <= 1, f"two runs of 'stubborn' at once: {c.output()}"
        slots = [e.slot for e in c.starts("stubborn")]
        assert len(slots) == len(set(slots)), c.output()
        asked = [line for pid in c.procs for line in c.log_of(pid).splitlines() if "is asked to end" in line]
        assert asked and "stubborn_thread" in asked[0] and "keeps its lease" in asked[0], c.output()
        c.assert_one_winner()


class ProxyThread:
    """A `FaultProxy` on an event loop of its own, in a daemon thread, for synchronous tests:

        with ProxyThread("127.0.0.1", 6379) as proxy:
            proxy.do(proxy.proxy.latency(0.2))
            with Cluster(proxy.url("redis://127.0.0.1:6379/0"), tmp_path) as cluster: ...
    """

    def __init__(self, host: str, port: int) -> None:
        self.proxy = FaultProxy(host, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="anarchon-faultproxy",
                                        daemon=True)

    def __enter__(self) -> ProxyThread:
        self._thread.start()
        self.do(self.proxy.start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.do(self.proxy.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def do(self, step: Coroutine[Any, Any, T] | Awaitable[T], timeout: float = 30) -> T:
        """Run one of the proxy's coroutines (a fault, a heal) on its loop; return its result."""

        async def run() -> T:
            return await step

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return future.result(timeout)

    def url(self, url: str) -> str:
        """`url` through the proxy's port."""
        return self.proxy.url(url)


def check_slow_network(url: str, workdir: Path | str, *, runs: int = 1, delay_s: float = 0.2) -> str:
    """Run three replicas that reach the store at `url` through a `FaultProxy` adding `delay_s` each
    way (lease 3 s, heartbeat 1 s, a 1 s job and a job of 6 s every 8 s), until `runs` long runs have
    ended; assert that every one ended as attempt 1 and that no lease was lost. Returns a summary line:
    starts, duplicates, and the 1 s slots missed after the first three seconds (the first claims open
    the connections, four round trips)."""
    parts = urlsplit(url)
    ports = {"redis": 6379, "rediss": 6379, "postgresql": 5432, "postgres": 5432}
    default_port = ports.get(parts.scheme, 0)
    with ProxyThread(parts.hostname or "127.0.0.1", parts.port or default_port) as proxy:
        proxy.do(proxy.proxy.latency(delay_s))
        # Start-up over 400 ms round trips (connect, migrate, LISTEN, a second connection for the
        # lease keeper) takes about 30 s on PostgreSQL.
        with Cluster(proxy.url(url), workdir, replicas=3, lease="3s", heartbeat="1s", tick_every="1s",
                     long_every="8s", long_run="6s", ready_within=90) as c:
            since = c.ready_ms + 3000

            def ended() -> list[Event]:
                return [e for e in c.events() if e.event in ("end", "cancelled") and e.job == "long"
                        and e.slot > c.ready_ms]

            deadline = time.monotonic() + 8 * runs + 30
            while len(ended()) < runs:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{len(ended())} of {runs} long runs ended\n{c.output()}")
                time.sleep(0.2)
            until = int(time.time() * 1000) - 2000
            c.assert_one_winner()
            longs = [e for e in c.starts("long") if e.slot > c.ready_ms]
            retried = [e for e in longs if e.attempt > 1]
            cancelled = [e for e in ended() if e.event == "cancelled"]
            assert not retried and not cancelled, f"{retried} {cancelled}\n{c.output()}"
            assert "lease lost" not in c.output(tail=100_000), c.output()
            missed = c.missed("tick", since, until)
            return (f"{delay_s * 1000:.0f} ms each way: {len(c.starts())} starts, 0 duplicates, "
                    f"{len(ended())} long runs all attempt 1, {len(missed)} of "
                    f"{(until - since) // 1000} 1 s slots missed")


FAULT_SCENARIOS = ("outage-refuse", "outage-blackhole", "reset-after-boundary", "partition-held")
"""The scenarios of `check_store_fault`."""

_NOISE = ("Future exception was never retrieved", "Traceback (most recent call last)", "was never awaited")
"""What a replica must never print at its default log level, whatever the network does."""


def _proxy_target(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    ports = {"redis": 6379, "rediss": 6379, "postgresql": 5432, "postgres": 5432}
    return parts.hostname or "127.0.0.1", parts.port or ports.get(parts.scheme, 0)


def check_store_fault(url: str, workdir: Path | str, scenario: str, *, outage_s: float = 30.0) -> str:
    """Run three replicas that reach the store at `url` through one `FaultProxy` (lease 3 s, heartbeat
    1 s, a 1 s `tick` and a `long` job of 6 s every 10 s), inject `scenario`, and assert its outcome:

    - `outage-refuse`, `outage-blackhole`: the store refuses (or swallows) every connection for
      `outage_s`, then heals. The first run after the heal is the current tick slot, within a
      heartbeat (1 s) of the heal when refused, and within a heartbeat plus a tick when black-holed
      (the claim sent just before the heal was swallowed: the next slot's claim is the first sent
      after it); no slot that was already past at the heal runs after it; no tick is missed outside
      the outage.
    - `reset-after-boundary`: every connection is reset 10-20 ms after ten tick boundaries in a row:
      no tick slot is lost.
    - `partition-held`: bytes are held both ways for 6 s (twice the lease) during a long run, then
      delivered: a claim or renewal delivered late revives nothing (no slot past at the heal runs,
      no replica finds a slot held by its own claim that it does not run).

    Always: no (job, slot, attempt) starts twice; the replicas print no traceback and no unretrieved
    future; for an outage, each replica warns once that claims fail and says once that they answer
    again. Returns one line: scenario, backend, starts, duplicates, missed ticks, recovery after heal.
    """
    if scenario not in FAULT_SCENARIOS:
        raise ValueError(f"unknown fault scenario {scenario!r}: use one of {', '.join(FAULT_SCENARIOS)}")
    backend = urlsplit(url).scheme
    with ProxyThread(*_proxy_target(url)) as proxy, Cluster(
        proxy.url(url), workdir, replicas=3, lease="3s", heartbeat="1s", tick_every="1s",
        long_every="10s", long_run="6s",
    ) as c:
        fault = proxy.proxy
        time.sleep(3)  # every replica's connections are open and warm
        hold_s = outage_s
        if scenario == "partition-held":
            hold_s = 6.0
            started = c.wait_for(
                lambda e: e.event == "start" and e.job == "long" and e.t > time.time() - 1, timeout=15)
            time.sleep(max(0.0, started.t + 1 - time.time()))  # one second into a long run
        if scenario == "reset-after-boundary":
            since_ms = int(time.time() * 1000) // 1000 * 1000 + 1000
            for _ in range(10):
                now = time.time()
                time.sleep(1 - now % 1 + 0.010 + 0.010 * ((now * 7919) % 1))  # 10-20 ms after a boundary
                proxy.do(fault.reset())
            time.sleep(3)
            until_ms = int(time.time() * 1000) - 1500
            c.assert_one_winner()
            missed = c.missed("tick", since_ms, until_ms)
            _check_quiet(c)
            assert not missed, f"tick slots lost to resets: {missed}\n{c.output()}"
            return (f"{scenario} on {backend}: {len(c.starts())} starts, 0 duplicates, 0 of "
                    f"{(until_ms - since_ms) // 1000 + 1} ticks missed, recovery n/a (no heal)")
        fault_ms = int(time.time() * 1000)
        proxy.do({"outage-refuse": fault.refuse, "outage-blackhole": fault.blackhole,
                  "partition-held": fault.partition}[scenario]())
        time.sleep(hold_s)
        proxy.do(fault.heal())
        heal_ms = int(time.time() * 1000)
        time.sleep(12)
        end_ms = int(time.time() * 1000) - 1500
        c.assert_one_winner()
        after = [e for e in c.starts() if e.t * 1000 >= heal_ms]
        ticks = sorted((e for e in after if e.job == "tick"), key=lambda e: e.t)
        assert ticks, f"no tick ran after the heal\n{c.output()}"
        first = ticks[0]
        recovery_ms = int(first.t * 1000) - heal_ms
        # The first run is the current slot (its next slot not yet due when it started) ...
        assert first.t * 1000 - first.slot < 1000 + 100, f"first run after the heal is stale: {first}"
        # ... within a heartbeat of the heal: a retry during the outage waits half a heartbeat at
        # most, which leaves the other half for a new connection and the claim. Black-holed, the
        # claim of the slot current at the heal was swallowed and waits for its deadline (10 s), so
        # the first run may be the next slot's, at its boundary: a tick (1 s) later at most.
        bound_ms = 1000 if scenario != "outage-blackhole" else 1000 + 1000
        assert recovery_ms <= bound_ms, f"first run {recovery_ms} ms after the heal\n{c.output()}"
        # No slot that was already past at the heal runs after it (catch_up=0: only the current slot).
        past = [e for e in after if e.slot < _prev_slot(heal_ms, 1000 if e.job == "tick" else 10_000)]
        assert not past, f"slots past at the heal ran after it: {past}\n{c.output()}"
        before = c.missed("tick", c.ready_ms + 3000, fault_ms - 1000)
        later = c.missed("tick", first.slot, end_ms)
        assert not before and not later, f"ticks missed outside the fault: {before} {later}\n{c.output()}"
        _check_quiet(c, outage=scenario.startswith("outage"))
        if scenario == "partition-held":
            # No replica finds a slot held by its own claim that it does not run (a late claim won).
            text = c.output(tail=100_000)
            assert "own unanswered claim" not in text, f"a replica skipped behind itself\n{text}"
        starts = len(c.starts())
        n_missed = len(before) + len(later)
        return (f"{scenario} on {backend}: {starts} starts, 0 duplicates, {n_missed} ticks missed outside "
                f"the {hold_s:.0f} s fault, first run (current slot) {recovery_ms} ms after heal")


def _prev_slot(ms: int, every_ms: int) -> int:
    return ms // every_ms * every_ms


def _check_quiet(c: Cluster, *, outage: bool = False) -> None:
    """No traceback and no unretrieved future from any replica; for an outage, one warning that the
    store looks unreachable and one line that claims answer again, per replica (a single failed claim
    answered by its retry, such as a dead pooled connection's after the heal, is one plain line)."""
    for path in sorted(c.workdir.glob("replica-*.log")):
        text = path.read_text(errors="replace")
        for noise in _NOISE:
            assert noise not in text, f"{path.name} printed {noise!r}:\n{text[-6000:]}"
        if outage:
            warned = text.count("the store looks unreachable")
            back = text.count("answer again")
            assert (warned, back) == (1, 1), (
                f"{path.name}: {warned} warnings that claims fail and {back} lines that they answer again, "
                f"expected one each:\n{text[-6000:]}")


def _cli(*args: str) -> str:
    """Run `anarchon ARGS` in a process of its own (one that registers no jobs); return its stdout."""
    done = subprocess.run([sys.executable, "-m", "anarchon.cli", *args], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, f"anarchon {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def check_stored_schedules(url: str, workdir: Path | str, *, heartbeat_s: float = 0.5,
                           lease_s: float = 2.0) -> None:
    """Three replicas on `url` (two with the task `report`, one with another task only) and schedules added,
    changed and removed from the command line, in processes of their own. Assert:

    1. a schedule added from the CLI runs once per slot, and never on the replica without the task;
    2. changing its interval moves its slots to the new grid within a heartbeat on every replica, and
       no slot runs twice;
    3. `kill -9` of a run's replica is taken over as attempt 2, after the lease;
    4. removing it stops it within a heartbeat;
    5. a restart of every replica loses nothing: a schedule goes on from its next slot.
    """
    slack_s = 0.5
    with Cluster(url, workdir, replicas=2, lease=f"{lease_s}s", heartbeat=f"{heartbeat_s}s",
                 tick_every="1h", long_every="1h", tasks=["report"]) as c:
        lacking = c.spawn(tasks=["cleanup"])  # an older deploy: another task, not this one
        ns = c.namespace
        _cli("schedules", "add", url, "s1", "--task", "report", "--every", "2s", "--namespace", ns)
        added = time.time()
        c.wait_for(lambda e: e.event == "start" and e.job == "s1" and e.t > added + 4.5, timeout=20)

        got = json.loads(_cli("schedules", "get", url, "s1", "--namespace", ns, "--json"))
        _cli("schedules", "update", url, "s1", "--version", str(got["version"]), "--every", "3s",
             "--namespace", ns)
        changed_ms = int(time.time() * 1000)
        c.wait_for(lambda e: e.event == "start" and e.job == "s1" and e.t * 1000 > changed_ms + 6500,
                   timeout=20)
        late = [e.slot for e in c.starts("s1") if e.slot > changed_ms + (heartbeat_s + slack_s) * 1000
                and e.slot % 3000]
        assert not late, f"slots on the old grid after the change was in force: {late}\n{c.output()}"

        _cli("schedules", "add", url, "s2", "--task", "report", "--every", "20s", "--args", '{"seconds": 8}',
             "--namespace", ns)
        first = c.wait_for(lambda e: e.event == "start" and e.job == "s2", timeout=30)
        killed = time.time()
        c.kill(first.pid)
        taken = c.wait_for(lambda e: e.event == "start" and e.job == "s2" and e.slot == first.slot
                           and e.attempt == 2, timeout=lease_s + 10)
        assert taken.t - killed >= lease_s - heartbeat_s - slack_s, "taken over before the lease ran out"

        _cli("schedules", "rm", url, "s1", "--namespace", ns)
        removed_ms = int(time.time() * 1000)
        time.sleep(4)
        after = [e.slot for e in c.starts("s1") if e.slot > removed_ms + (heartbeat_s + slack_s) * 1000]
        assert not after, f"s1 ran after it was removed: {after}\n{c.output()}"

        for pid in c.alive():
            c.stop(pid)
        restarted_ms = int(time.time() * 1000)
        c.spawn()
        c.spawn()
        c.wait_for(lambda e: e.event == "start" and e.job == "s2" and e.t * 1000 > restarted_ms, timeout=30)

        c.assert_one_winner()
        assert not [e for e in c.starts() if e.pid == lacking], "the replica without the task ran one"
        assert "task 'report' is not registered on this replica" in c.log_of(lacking), c.log_of(lacking)


def check_history(url: str, workdir: Path | str, *, keep: int = 3) -> None:
    """Run three replicas with `history=keep` on `url` and read the store from the `anarchon` command line:

    1. once more than `keep` runs of the 1 s job have ended, `anarchon history --json` lists at most
       `keep` runs, newest first, each slot once, each one a slot that a replica ran to its end;
    2. `anarchon status --json` lists the job that never ran (`later`, due in 2100) with its next run,
       and the 1 s job with its last outcome.
    """
    workdir = Path(workdir)
    with Cluster(url, workdir, replicas=3, heartbeat="0.5s", tick_every="1s", long_every="1h",
                 history=keep, later=True) as c:
        ns = c.namespace
        deadline = time.monotonic() + 15
        while len([e for e in c.events() if e.event == "end" and e.job == "tick"]) < keep + 2:
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {keep + 2} runs of tick within 15 s:\n{c.output()}")
            time.sleep(0.1)
        time.sleep(1.5)  # ended runs are written within a second
        runs = json.loads(_cli("history", url, "tick", "--namespace", ns, "--json", "--limit", "100"))
        ended = {e.slot for e in c.events() if e.event == "end" and e.job == "tick"}
        slots = [r["slot_ms"] for r in runs]
        assert 1 <= len(runs) <= keep, f"history keeps at most {keep} runs: {runs}"
        assert slots == sorted(set(slots), reverse=True), f"newest first, each slot once: {slots}"
        assert set(slots) <= ended, f"runs no replica ended: {set(slots) - ended}"
        assert all(r["outcome"] == "done" and r["error"] == "" for r in runs), runs
        rows = {r["job"]: r for r in json.loads(_cli("status", url, "--namespace", ns, "--json"))}
        later = rows.get("later")
        assert later is not None, f"a job that never ran is listed: {rows}"
        assert later["status"] == "never run" and later["next_run"] == "2100-01-01T00:00:00Z", later
        assert len(later["instances"]) == 3, f"each replica published it: {later}"
        tick = rows["tick"]
        assert tick["last_outcome"] == "done" and tick["next_run_ms"] is not None, tick
        c.assert_one_winner()


def check_controls(url: str, workdir: Path | str, *, heartbeat_s: float = 0.5, slack_s: float = 0.3,
                   pushed: bool = False) -> None:
    """Run three replicas on `url` and control their 1 s job from the `anarchon` command line:

    1. `pause`: no replica starts a slot due more than a heartbeat (plus `slack_s`: the jitter, a poll's
       and a claim's round trips) after it, and every replica logs its paused slots as skipped;
    2. `trigger` of the paused job: it runs exactly once, within a heartbeat, under the trigger's id;
    3. `resume`: the schedule runs again from the next slots.

    With `pushed` (a store that pushes control changes), the replicas' heartbeat is 5 s and each
    control must take effect within `slack_s` alone: the push, not a poll, brings it.
    """
    workdir = Path(workdir)
    react_s = slack_s if pushed else heartbeat_s + slack_s
    if pushed:
        heartbeat_s = 5.0
    with Cluster(url, workdir, replicas=3, heartbeat=f"{heartbeat_s}s", lease=f"{max(2.0, 3 * heartbeat_s)}s",
                 tick_every="1s", long_every="1h") as c:
        ns = c.namespace
        c.wait_for(lambda e: e.event == "start" and e.job == "tick" and e.slot > c.ready_ms, timeout=10)

        _cli("pause", url, "tick", "--namespace", ns)
        paused_ms = int(time.time() * 1000)
        time.sleep(2.5)
        bound = paused_ms + react_s * 1000
        late = [e.slot for e in c.starts("tick") if e.slot > bound]
        assert not late, f"slots run more than {react_s} s after the pause: {late}\n{c.output()}"
        for log in sorted(workdir.glob("replica-*.log")):
            assert "tick paused: its slots are skipped" in log.read_text(), (
                f"{log.name} does not say that tick is paused:\n{c.output()}")

        out = _cli("trigger", url, "tick", "--namespace", ns)  # a paused job can still be triggered
        found = re.search(r"trigger (\d+)", out)
        assert found, out
        trigger = int(found.group(1))
        ran = c.wait_for(lambda e: e.event == "start" and e.slot == trigger, timeout=5)
        assert ran.t * 1000 - trigger <= react_s * 1000, (ran, trigger)
        time.sleep(max(1.0, 2 * react_s))
        after = [e.slot for e in c.starts("tick") if e.slot > bound]
        assert after == [trigger], f"the trigger runs once and the paused schedule not at all: {after}"

        _cli("resume", url, "tick", "--namespace", ns)
        resumed_ms = int(time.time() * 1000)
        back = c.wait_for(lambda e: e.event == "start" and e.job == "tick" and e.slot > resumed_ms,
                          timeout=5)
        assert back.slot - resumed_ms <= 1000 + react_s * 1000, (back, resumed_ms)
        c.assert_one_winner()
