"""The CPU a replica spends per claim attempt, counted in instructions: repeatable on a busy machine.

    python bench/profile_claims.py memory [--jobs 2000] [--rounds 5] [--replicas 3]
    python bench/profile_claims.py redis://127.0.0.1:6379/13 --callgrind
    python bench/profile_claims.py postgresql://postgres@127.0.0.1:5432/test --cprofile
    python bench/profile_claims.py memory --callgrind --block prometheus,opentelemetry

`--replicas` schedulers in this one process share the store (one `MemoryStore` for "memory"); each has
`--jobs` jobs due every second whose handlers return at once. The schedulers' clock, and the event
loop's, are stepped by the script: a round is one slot, walked in 5 ms steps across the jitter window,
each step waiting until every claim, run and release it set off has ended (the loop waits for real I/O
only). So each replica makes `jobs` claim attempts per round (one wins, the others find the slot taken),
and every timer (renewals, the lag watch) fires at the same point of the work however slowly the process
runs: the counts do not depend on the machine's load. The first `--warmup` rounds are left out. Each
run uses a namespace of its own (`max_skew` is an hour, since the stepped clock runs ahead of the
store's) and deletes its records at the end.

- `--callgrind` re-runs this script under `valgrind --tool=callgrind`, which splits its profile at the
  measured rounds' start and end, then prints the instructions per claim attempt: the same count on a
  busy machine as on an idle one. With an interpreter that has symbols it also prints the C functions
  with the most instructions. Takes minutes: 2,000 jobs x 3 replicas x (2 + 3) rounds is about 5.
- `--cprofile` prints the Python functions with the most own time over the measured rounds, with
  their call counts (exact, unlike the times).
- Otherwise it prints the process CPU time per claim attempt (noisy on a shared machine).
- Every mode also prints the garbage collector's collections per 1,000 claim attempts, by generation,
  and its CPU time. The collections follow the tracked objects that the claims, runs and releases
  keep alive while others are made, so they repeat under `--seed`: fewer young collections, and fewer
  full ones, which traverse every object of the process (a pause of tens of ms in a replica).
- `--seed N` seeds the jitter draws: the count then repeats to within a few hundredths of a percent,
  where it moves by a percent or two unseeded. Use it to compare two versions of the code.

The schedulers run on the stepped clock, so a lease backend's keeper stays on the event loop (no
keeper thread): the renewals' share is not what it is in production, the claim path's is.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import glob
import itertools
import math
import os
import pstats
import random
import re
import selectors
import subprocess
import sys
import tempfile
import time
from typing import Any

from anarchon import MemoryBackend, Scheduler, backend_for_url, plugin_manager
from anarchon.backends import Capability, MemoryStore
from anarchon.testing import probe

_REAL_WAIT_S = 1.0
"""How long the loop waits for I/O before it moves the stepped clock to its next timer: only when
everything waits for a timer (a retry after a store error, say), never in a normal step."""
_STEP_MS = 5
_WINDOW_MS = 60
"""The steps of a round cover the default jitter (at most 50 ms) with room to spare."""
_AHEAD_S = 600
"""How far the stepped clock starts ahead of the store's clock (see `main`)."""


class SteppedClock:
    """A wall clock that moves only when the script says: slot by slot, step by step."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        """The stepped time, epoch ms."""
        return self.now


class _SteppedSelector(selectors.DefaultSelector):
    """Waits for real I/O; only after a second without any does a wait for a timer move the clock."""

    def __init__(self, clock: SteppedClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:
            return super().select(0)
        ready = super().select(_REAL_WAIT_S)
        if not ready and timeout is not None:
            self._clock.now += max(1, math.ceil(timeout * 1000))
        return ready


class _SteppedLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is the stepped clock's."""

    def __init__(self, clock: SteppedClock) -> None:
        super().__init__(_SteppedSelector(clock))
        self._stepped = clock

    def time(self) -> float:
        return self._stepped.now / 1000


def _seed_random(seed: int) -> None:
    """Seed every `random.Random()` made from now on (each scheduler's planner makes one), in the
    order they are made. The jitter draws decide which replica claims first and how claims batch,
    so unseeded counts move by a percent or two from run to run; seeded, they repeat."""
    seeds = itertools.count(seed)

    class Seeded(random.Random):
        def __init__(self, x: Any = None) -> None:
            super().__init__(next(seeds) if x is None else x)

    random.Random = Seeded  # type: ignore[misc]


class GcMeter:
    """The garbage collector's collections by generation, and its CPU time, while it is on.

    Collections follow the tracked objects allocated and kept: a claim path that keeps fewer of them
    alive across a collection triggers fewer collections, and fewer full ones, which traverse every
    object of the process (the pause a claim in flight then waits for)."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._began = 0.0
        self._on = False
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if not self._on:
            return
        if phase == "start":
            self._began = time.thread_time()
        else:
            self.collections[info["generation"]] += 1
            self.seconds += time.thread_time() - self._began

    def start(self) -> None:
        """Count from now on."""
        self._on = True

    def stop(self) -> None:
        """Count no more."""
        self._on = False


def _mark() -> None:
    """Where callgrind splits its profile (`--dump-before=os_getppid`)."""
    os.getppid()


async def _settled(schedulers: list[Scheduler[Any]]) -> None:
    """Wait until no claim, run or release of any scheduler is in flight (no polling: the work
    counted must not depend on how fast the process runs)."""
    while True:
        pending = [t for s in schedulers for t in probe(s).busy("claim", "run", "send")]
        if not pending:
            await asyncio.sleep(0)  # callbacks scheduled by the last task to end run too
            if not any(probe(s).busy("claim", "run", "send") for s in schedulers):
                return
            continue
        await asyncio.wait(pending)


async def _round(schedulers: list[Scheduler[Any]], clock: SteppedClock, slot: int) -> None:
    for t in range(slot, slot + _WINDOW_MS + 1, _STEP_MS):
        clock.now = t
        for s in schedulers:
            probe(s).wake()
        await asyncio.sleep(0)
        await _settled(schedulers)


async def _forget(backend: Any, namespace: str) -> None:
    """Delete the run's records (Redis and PostgreSQL; the memory store goes with the process)."""
    if hasattr(backend, "keys") and hasattr(backend, "client"):
        client = backend.client
        async for key in client.scan_iter(match=f"*{backend.keys.prefix}:{namespace}*", count=1000):
            await client.delete(key)
    elif hasattr(backend, "sql") and hasattr(backend, "pool"):
        await backend.pool.execute(f"DELETE FROM {backend.sql.qualified} WHERE namespace = $1", namespace)


async def profile(url: str, jobs: int, rounds: int, warmup: int, replicas: int,
                  profiler: cProfile.Profile | None, clock: SteppedClock, meter: GcMeter
                  ) -> tuple[int, float, int]:
    """Run the rounds; return (claim attempts, CPU seconds, runs) of the measured ones."""
    start = clock.now
    namespace = f"anarchon-profile-{os.getpid()}-{start}"
    store = MemoryStore(clock) if url == "memory" else None
    runs = 0

    async def handler() -> None:
        nonlocal runs
        runs += 1

    schedulers: list[Scheduler[Any]] = []
    for i in range(replicas):
        settings: dict[str, Any] = {"namespace": namespace, "instance_id": f"p{i}", "clock": clock,
                                    "block_limit": "1h", "max_skew": "1h"}
        backend = MemoryBackend(store) if store is not None else backend_for_url(url)
        if Capability.LEASE not in backend.capabilities:
            settings.pop("block_limit")  # a claim-only backend (RabbitMQ, NATS) has no lease keeper
        s: Scheduler[Any] = Scheduler(backend, **settings)
        options: dict[str, Any] = {"catch_up": 0} if s.leases else {}
        for j in range(jobs):
            s.every(f"j{j}", "1s", handler, **options)
        schedulers.append(s)
    for s in schedulers:
        await s.start()
    try:
        slot = start + 1000
        for _ in range(warmup):
            await _round(schedulers, clock, slot)
            slot += 1000
        runs0 = runs
        _mark()
        if profiler is not None:
            profiler.enable()
        cpu0 = time.process_time()
        meter.start()
        for _ in range(rounds):
            await _round(schedulers, clock, slot)
            slot += 1000
        meter.stop()
        cpu = time.process_time() - cpu0
        if profiler is not None:
            profiler.disable()
        _mark()
    finally:
        for s in schedulers:
            await s.stop()
        if store is None:
            await schedulers[0].backend.open()
            try:
                await _forget(schedulers[0].backend, namespace)
            finally:
                await schedulers[0].backend.close()
    return jobs * replicas * rounds, cpu, runs - runs0


def _callgrind(args: argparse.Namespace) -> None:
    out = tempfile.mkdtemp(prefix="anarchon-callgrind-")
    cmd = ["valgrind", "--tool=callgrind", "--dump-before=os_getppid",
           f"--callgrind-out-file={out}/cg.out", sys.executable, __file__, args.url,
           "--jobs", str(args.jobs), "--rounds", str(args.rounds), "--warmup", str(args.warmup),
           "--replicas", str(args.replicas), "--block", args.block,
           *(["--seed", str(args.seed)] if args.seed is not None else [])]
    print("$", " ".join(cmd), flush=True)
    child = subprocess.run(cmd, capture_output=True, text=True)
    print(child.stdout, end="")
    if child.returncode != 0:
        print(child.stderr[-3000:], file=sys.stderr)
        raise SystemExit(child.returncode)
    attempts = int(re.search(r"attempts=(\d+)", child.stdout).group(1))  # type: ignore[union-attr]
    # Part 1: start-up and warm-up; part 2: the measured rounds; the last file: the stop.
    measured = sorted(glob.glob(f"{out}/cg.out.*"))
    part = next(p for p in measured if p.endswith(".2"))
    with open(part) as f:
        total = int(next(line for line in f if line.startswith("summary:")).split()[1])
    print(f"callgrind: {total:,} instructions over {attempts:,} claim attempts: "
          f"{total / attempts:,.0f} instructions per claim attempt  (profile: {part})")
    # The top functions by own instructions, when the interpreter has symbols (a stripped one shows
    # everything under one function: use --cprofile for the shape then).
    # (--threshold=100: the default stops at 99 % of the total, which a split part reaches with the
    # frames that were on the stack when it began, shown at 100 % each and left out here.)
    annotate = subprocess.run(["callgrind_annotate", "--threshold=100", part], capture_output=True, text=True)
    rows = [line.strip() for line in annotate.stdout.splitlines()
            if re.match(r"\s*[\d,]+ \(", line) and "(100.0%)" not in line]
    if len(rows) > 1:
        print("top functions (own instructions):")
        for line in rows[:args.top]:
            print("  " + re.sub(r"\S*/Python-[\d.]+/| \[\S*\]$", "", line)[:150])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help='"memory", or a store URL (redis://…, postgresql://…)')
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds (slots)")
    ap.add_argument("--warmup", type=int, default=2, help="rounds left out first")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--block", default="", help="plugins to leave out, comma-separated (e.g. "
                    "prometheus,opentelemetry: observers that a development venv loads by itself)")
    ap.add_argument("--seed", type=int, help="seed the jitter draws, so that the count repeats run to run "
                    "(to compare two versions of the code)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--callgrind", action="store_true", help="count instructions under valgrind")
    mode.add_argument("--cprofile", action="store_true", help="the Python functions with the most time")
    args = ap.parse_args()
    for name in filter(None, args.block.split(",")):
        plugin_manager().set_blocked(name)
    if args.callgrind:
        _callgrind(args)
        return
    if args.seed is not None:
        _seed_random(args.seed)
    profiler = cProfile.Profile() if args.cprofile else None
    meter = GcMeter()
    # Ten minutes ahead of the store's clock: however long the start and the rounds take, a claim
    # reaches a store whose clock is before its slot's `stale_after` (else every claim is stale).
    clock = SteppedClock((time.time_ns() // 1_000_000 // 1000 + _AHEAD_S) * 1000)
    with asyncio.Runner(loop_factory=lambda: _SteppedLoop(clock)) as runner:
        attempts, cpu, runs = runner.run(profile(args.url, args.jobs, args.rounds, args.warmup,
                                                 args.replicas, profiler, clock, meter))
    expected = args.jobs * args.rounds
    print(f"attempts={attempts} runs={runs} (of {expected} slots) "
          f"cpu={cpu:.3f}s: {cpu / attempts * 1e6:.1f} us per claim attempt", flush=True)
    per = [f"{n * 1000 / attempts:.2f}" for n in meter.collections]
    print(f"gc: {'/'.join(per)} collections (generation 0/1/2) per 1,000 claim attempts, "
          f"{meter.seconds:.3f}s of the cpu in them", flush=True)
    if runs != expected:
        print(f"warning: {runs} runs, expected {expected}", file=sys.stderr)
    if profiler is not None:
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
