"""Chaos runs: replicas killed, frozen and stopped at random on a real store, then every start checked.

    python -m anarchon_testkit.chaos URL [--seconds 120] [--replicas 3] [--seed N] [--workdir DIR]

Three replicas (`anarchon_testkit._replica`: a 1 s `tick` that returns at once and a `long` job that runs 2 s
of every 4 s) share the store at URL, with a 2 s lease and a 0.5 s heartbeat. Every 1.5 to 4 s one of
them, never the last healthy one, is killed (SIGKILL), stopped gracefully (SIGTERM) or frozen
(SIGSTOP for 0.5 to 5 s, then SIGCONT); a killed or stopped replica is replaced. Then `check` holds the
start log to what docs/guarantees.md promises, and the command exits 1 on any violation:

- no (job, slot, attempt) starts twice;
- a slot starts again (attempt n+1) only after something happened to the replica running attempt n
  (a kill, a stop or a freeze), and on a claim-only backend never;
- two attempts of one slot overlap in time only when the earlier one's replica was frozen;
- no `tick` goes unstarted for longer than lease + heartbeat + 2 s (a dead holder's lease, then the
  takeover), or 2 s on claim-only backends; on SQLite, plus the length of a freeze in the gap (a
  frozen replica may hold the database's write lock).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from anarchon import AnarchonError, Capability, backend_for_url
from anarchon.backends import redact_url

from .cluster import Cluster, Event

__all__ = ["Action", "ChaosReport", "check", "main", "run"]

LEASE_MS = 2000
HEARTBEAT_MS = 500
TICK_MS = 1000


@dataclass(frozen=True, slots=True)
class Action:
    """One thing done to a replica: `kill`, `stop` (SIGTERM) or `freeze` (SIGSTOP until `until`)."""

    t: float
    """Wall time, epoch seconds."""
    pid: int
    kind: str
    until: float = 0.0
    """For `freeze`: when the replica was resumed."""


@dataclass
class ChaosReport:
    """What a chaos run saw, and what it found wrong."""

    starts: int = 0
    reruns: int = 0
    """Attempts after the first, each explained by an action on the earlier attempt's replica."""
    overlaps: int = 0
    """Reruns that began while the earlier attempt still ran (on a frozen replica)."""
    missed_ticks: int = 0
    longest_tick_gap_ms: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One paragraph for a person."""
        acts = ", ".join(f"{n} {k}" for k, n in sorted(self.actions.items())) or "none"
        verdict = "OK" if not self.violations else f"{len(self.violations)} VIOLATION(S)"
        return (f"{verdict}: {self.starts} starts, {self.reruns} reruns after a fault ({self.overlaps} "
                f"overlapping a frozen run), {self.missed_ticks} tick slots missed, longest tick gap "
                f"{self.longest_tick_gap_ms} ms; actions: {acts}")


def _ended(events: Sequence[Event], pid: int, job: str, slot: int, attempt: int, started: float) -> float:
    """When an attempt's handler stopped running: its end or cancellation, else its replica's death."""
    for e in events:
        if (e.pid == pid and e.job == job and e.slot == slot and e.attempt == attempt
                and e.event in ("end", "cancelled") and e.t >= started):
            return e.t
    return float("inf")


def check(
    events: Sequence[Event], actions: Sequence[Action], *, leases: bool, since_ms: int, until_ms: int,
    lease_ms: int = LEASE_MS, heartbeat_ms: int = HEARTBEAT_MS, tick_ms: int = TICK_MS,
    freezes_block_store: bool = False,
) -> ChaosReport:
    """Hold a chaos run's events to the guarantees (see the module's docstring).

    `freezes_block_store`: a frozen replica may hold the store's one write lock (SQLite: the
    transaction runs in the replica's process), so a tick gap may also last as long as a freeze
    that overlaps it.
    """
    report = ChaosReport()
    for a in actions:
        report.actions[a.kind] = report.actions.get(a.kind, 0) + 1
    starts = [e for e in events if e.event == "start"]
    report.starts = len(starts)
    deaths = {a.pid: a.t for a in actions if a.kind == "kill"}
    by_slot: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for e in starts:
        by_slot[(e.job, e.slot)].append(e)
    for (job, slot), runs in sorted(by_slot.items()):
        runs.sort(key=lambda e: (e.attempt, e.t))
        for prev, nxt in itertools.pairwise(runs):
            where = f"{job} slot={slot}: attempt {prev.attempt} (pid {prev.pid})"
            if nxt.attempt == prev.attempt:
                report.violations.append(f"{where} started twice (pids {prev.pid} and {nxt.pid})")
                continue
            if not leases:
                report.violations.append(
                    f"{where} ran again as attempt {nxt.attempt} on a claim-only backend")
                continue
            causes = [a for a in actions if a.pid == prev.pid and prev.t - 0.05 <= a.t <= nxt.t]
            if not causes:
                report.violations.append(f"{where} ran again as attempt {nxt.attempt} (pid {nxt.pid}) "
                                         "with nothing done to its replica")
                continue
            report.reruns += 1
            ended = min(_ended(events, prev.pid, job, slot, prev.attempt, prev.t),
                        deaths.get(prev.pid, float("inf")))
            if nxt.t < ended:
                frozen = [a for a in causes if a.kind == "freeze" and a.t <= nxt.t]
                if frozen:
                    report.overlaps += 1
                else:
                    report.violations.append(
                        f"{where} still ran when attempt {nxt.attempt} started (pid {nxt.pid}), "
                        "and its replica was not frozen")
    ticks = sorted({e.slot for e in starts if e.job == "tick" and since_ms <= e.slot <= until_ms})
    first = -(-since_ms // tick_ms) * tick_ms
    grid = range(first, until_ms + 1, tick_ms)
    started = set(ticks)
    report.missed_ticks = sum(1 for s in grid if s not in started)
    previous = first - tick_ms
    base_bound = (lease_ms + heartbeat_ms if leases else 0) + 2000
    for s in [*ticks, until_ms + tick_ms]:
        gap = s - previous - tick_ms
        report.longest_tick_gap_ms = max(report.longest_tick_gap_ms, gap)
        bound = base_bound
        if freezes_block_store:
            bound += max((int((a.until - a.t) * 1000) for a in actions if a.kind == "freeze"
                          and a.t * 1000 <= s and a.until * 1000 >= previous), default=0)
        if gap > bound:
            report.violations.append(
                f"tick went {gap} ms without a start after slot {previous} (bound {bound} ms)")
        previous = s
    return report


def run(url: str, workdir: Path, *, seconds: float, replicas: int = 3, seed: int | None = None,
        quiet: bool = False) -> ChaosReport:
    """Run a chaos run against `url` for `seconds` and check it."""
    rng = random.Random(seed)
    leases = Capability.LEASE in backend_for_url(url).capabilities
    actions: list[Action] = []
    frozen: dict[int, tuple[float, float]] = {}  # pid -> (frozen at, resume at)
    stopping: set[int] = set()

    def say(msg: str) -> None:
        if not quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def thaw(cluster: Cluster, *, all_now: bool = False) -> None:
        now = time.time()
        for pid, (at, until) in list(frozen.items()):
            if all_now or now >= until:
                os.kill(pid, signal.SIGCONT)
                del frozen[pid]
                actions.append(Action(at, pid, "freeze", now))
                say(f"resumed {pid} after {now - at:.1f} s")

    with Cluster(url, workdir, replicas=replicas, lease=f"{LEASE_MS}ms", heartbeat=f"{HEARTBEAT_MS}ms",
                 tick_every=f"{TICK_MS}ms", long_every="4s", long_run="2s", stop_timeout="3s") as cluster:
        since_ms = cluster.ready_ms + 2000
        end = time.monotonic() + seconds
        next_action = time.monotonic() + rng.uniform(1.5, 4)
        try:
            while time.monotonic() < end:
                time.sleep(0.05)
                thaw(cluster)
                if time.monotonic() < next_action:
                    continue
                next_action = time.monotonic() + rng.uniform(1.5, 4)
                healthy = [p for p in cluster.alive() if p not in frozen and p not in stopping]
                if len(healthy) < 2:
                    continue
                # Half the time, hit the replica running the newest `long` run: a fault mid-run.
                longs = [e.pid for e in cluster.starts("long") if e.pid in healthy]
                pid = longs[-1] if longs and rng.random() < 0.5 else rng.choice(healthy)
                kind = rng.choice(("kill", "kill", "stop", "freeze"))
                now = time.time()
                if kind == "freeze":
                    os.kill(pid, signal.SIGSTOP)
                    frozen[pid] = (now, now + rng.uniform(0.5, 5.0))
                    say(f"froze {pid}")
                    continue
                if kind == "kill":
                    cluster.procs[pid].kill()
                else:
                    cluster.procs[pid].send_signal(signal.SIGTERM)
                    stopping.add(pid)
                actions.append(Action(now, pid, kind))
                say(f"{kind} {pid}; starting a replacement")
                cluster.spawn(wait=False)
        finally:
            thaw(cluster, all_now=True)
        until_ms = int(time.time() * 1000) - LEASE_MS - 2000
        time.sleep((LEASE_MS + 1000) / 1000)  # let takeovers of the last faults happen before the stop
    return check(cluster.events(), actions, leases=leases, since_ms=since_ms, until_ms=until_ms,
                 freezes_block_store=url.startswith("sqlite"))


def main(argv: Sequence[str] | None = None) -> int:
    """The `python -m anarchon_testkit.chaos` command; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m anarchon_testkit.chaos", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="the store, as for Scheduler.from_url (give each run its own namespace or "
                                "database; the replicas use a fresh namespace anyway)")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None, help="repeat a run's choice of faults")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where the replicas' logs go (default: a temp dir)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="anarchon-chaos-"))
    try:
        backend_for_url(args.url)  # an unknown scheme or a bad option fails here, before any replica starts
    except AnarchonError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    print(f"chaos on {redact_url(args.url)} for {args.seconds:.0f} s, seed {seed}, "
          f"logs in {workdir}", flush=True)
    report = run(args.url, workdir, seconds=args.seconds, replicas=args.replicas, seed=seed)
    print(report.summary())
    for v in report.violations:
        print(f"  - {v}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
