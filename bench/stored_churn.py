"""Stored schedules under churn: M2's hourly schedules, while another process adds, updates and removes
schedules at a steady rate.

    python bench/stored_churn.py redis://127.0.0.1:6379/14 postgresql://postgres@127.0.0.1:5432/test \\
        --count 1000000 --rate 1000 --seconds 60

For each URL: a process of its own writes N hourly schedules spread over the hour, as
`stored_spread.py` does (about N / 3600 slots due a second); `--replicas` replica processes (default
lease, heartbeat and jitter; `--heartbeat` to change it) start, and after `--warmup` seconds
`--writers` writer processes of their own (2) make `--rate` changes a second between them for
`--seconds` through `Schedules`, a third of each kind: adds of new hourly schedules whose first slot
is 2 to 30 s away; updates (compare-and-set on the version) of schedules due within 30 s, half
moving the slot to 2 to 30 s from now, half changing the arguments only; removes of schedules due
within 30 s. Half the updates and removes go to a schedule the writer added or changed before, half
to one of the N. A writer logs each change with the time it was sent and the time it was answered;
each replica logs each start (schedule, slot, attempt, the argument `n`, wall time).

A change is in force from one heartbeat after its answer until the next change of that schedule is
sent; in between, either definition may run. Judged over the slots due in the measured seconds (but
the last 5 s):
- lost: a slot of a definition in force that never started, but those due less than `--grace` (1 s)
  before the next change of their schedule: the change may drop such a slot when it comes before
  the slot's claim (counted as raced);
- duplicates: a (schedule, slot, attempt) started twice;
- late after change: a start of a slot that no definition in force or in transition has (a removed
  schedule's, or an old time's, more than a heartbeat after the change), or with arguments that had
  been replaced more than a heartbeat before the slot.
Also printed: the changes a second achieved, the writer's conflicts, start latency (start minus slot)
at p50 and p99, each replica's CPU over the measured seconds. Exits 1 on a lost or duplicate start.
The namespace is removed afterwards (unless `--keep`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stored_herd import _clean, _replicas, history_settings
from stored_spread import HOUR_S, _due_between, _offset_ms

HOUR_MS = HOUR_S * 1000
WORKERS = 192
"""The writer's concurrent changes at most (each is one to three round trips, slower on a loaded
store: at 64, PostgreSQL's writers reached about 700 of 1,000 changes a second)."""
EXAMPLES = 10
"""Lost and late starts listed in the verdict, each with its schedule's changes, for a closer look."""


def _replica(url: str, namespace: str, start: float, end: float, out: str, settings: dict[str, Any]) -> None:
    """One replica: log every start with its argument `n`; at `end`, print its CPU since `start`."""
    from anarchon import JobContext, Scheduler

    scheduler: Scheduler[Any] = Scheduler.from_url(url, namespace=namespace, **settings)
    fh = open(out, "a", buffering=1 << 16)  # noqa: SIM115 - closed at the end of main()

    @scheduler.task("hourly")
    async def hourly(ctx: JobContext, n: int) -> None:
        fh.write(f"{ctx.name} {ctx.slot} {ctx.attempt} {n} {time.time():.4f}\n")

    async def main() -> None:
        async with scheduler:
            await asyncio.sleep(max(0.0, start - time.time()))
            usage = resource.getrusage(resource.RUSAGE_SELF)
            before = usage.ru_utime + usage.ru_stime
            await asyncio.sleep(max(0.0, end - time.time()))
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime - before
        fh.close()
        print(json.dumps({"cpu_s": cpu, "peak_mb": usage.ru_maxrss / 1024}), flush=True)

    asyncio.run(main())


# -- the writer ----------------------------------------------------------------------------------------


class _Writer:
    """Makes the changes at a steady rate and logs each (one JSON line: id, kind, sent, done, the new
    offset and `n`, or the error)."""

    def __init__(self, schedules: Any, count: int, rate: float, log: Any, part: int = 0, parts: int = 1
                 ) -> None:
        """`part` of `parts`: this writer makes changes k = part (mod parts) and changes only the N
        schedules whose i = part (mod parts), so that writers never change one schedule both."""
        self.schedules = schedules
        self.count = count
        self.rate = rate
        self.log = log
        self.part, self.parts = part, parts
        self.rng = random.Random(part + 1)
        self.known: dict[str, tuple[int, int, int]] = {}
        """The schedules this writer added or changed and that still exist: id -> (version, offset, n)."""
        self.mine: list[str] = []
        """The ids of `known`, to pick one at random."""
        self.touched: set[str] = set()
        """The N schedules changed or removed so far (not picked again as one of the N)."""
        self.busy: set[str] = set()
        self.done = 0
        self.conflicts = 0
        self.skipped = 0
        """Changes not made: no schedule free to change."""

    def _original_due_soon(self) -> str | None:
        """One of the N schedules, untouched, whose slot is 2 to 30 s from now, or failing that (all
        those are touched already) any untouched one."""
        due_ms = int((time.time() + self.rng.uniform(2, 30)) * 1000) % HOUR_MS
        i = (due_ms * self.count + HOUR_MS - 1) // HOUR_MS
        i += (self.part - i) % self.parts
        picks = [*range(i, i + 100 * self.parts, self.parts),
                 *(self.rng.randrange(self.count) // self.parts * self.parts + self.part for _ in range(100))]
        for j in picks:
            name = f"s-{j % self.count:07d}"
            if name not in self.touched and name not in self.busy:
                return name
        return None

    def _target(self) -> str | None:
        if self.rng.random() < 0.5:
            for _ in range(5):
                k = self.rng.randrange(len(self.mine)) if self.mine else None
                if k is None:
                    break
                name = self.mine[k]
                if name not in self.known:  # removed meanwhile: drop it from the list
                    self.mine[k] = self.mine[-1]
                    self.mine.pop()
                elif name not in self.busy:
                    return name
        return self._original_due_soon()

    def _keep(self, name: str, version: int, offset: int, n: int) -> None:
        if name not in self.known:
            self.mine.append(name)
        self.known[name] = (version, offset, n)

    def _soon_offset(self) -> int:
        return int((time.time() + self.rng.uniform(2, 30)) * 1000) % HOUR_MS

    async def change(self, k: int) -> None:
        """Change number `k`: an add, an update or a remove."""
        from anarchon import ScheduleConflict, ScheduleNotFound

        kind = ("add", "update", "remove")[k % 3]
        name = f"c-{k:07d}" if kind == "add" else self._target()
        if name is None:
            self.skipped += 1
            return
        self.busy.add(name)
        entry: dict[str, Any] = {"id": name, "kind": kind}
        try:
            if kind == "add":
                offset = self._soon_offset()
                entry.update(offset=offset, n=k, sent=time.time())
                done = await self.schedules.add(name, "hourly", every=f"{HOUR_S}s", offset=f"{offset}ms",
                                                args={"n": k})
                self._keep(name, done.version, offset, k)
            else:
                if name in self.known:
                    version, offset, n = self.known[name]
                else:  # one of the N: its version is read first
                    current = await self.schedules.get(name)
                    if current is None:
                        raise ScheduleNotFound(name)
                    version, offset, n = current.version, current.schedule.offset_ms, current.args["n"]
                    self.touched.add(name)
                if kind == "remove":
                    entry.update(sent=time.time())
                    await self.schedules.remove(name, version=version)
                    self.known.pop(name, None)
                else:
                    if self.rng.random() < 0.5:  # a new time
                        offset = self._soon_offset()
                        entry.update(offset=offset, n=n, sent=time.time())
                        done = await self.schedules.update(name, version=version, every=f"{HOUR_S}s",
                                                           offset=f"{offset}ms")
                    else:  # new arguments, the same time
                        n = 10_000_000 + k
                        entry.update(offset=offset, n=n, sent=time.time())
                        done = await self.schedules.update(name, version=version, args={"n": n})
                    self._keep(name, done.version, offset, n)
            entry["done"] = time.time()
            self.done += 1
        except (ScheduleConflict, ScheduleNotFound) as exc:
            self.conflicts += 1
            entry["error"] = type(exc).__name__
        finally:
            self.busy.discard(name)
        self.log.write(json.dumps(entry) + "\n")

    async def run(self, start: float, end: float) -> float:
        """Make `rate` changes a second from `start` to `end`; return when the last one was answered."""
        await asyncio.sleep(max(0.0, start - time.time()))
        total = int(self.rate * (end - start))
        counter = iter(range(self.part, total, self.parts))

        async def worker() -> None:
            for k in counter:
                await asyncio.sleep(max(0.0, start + k / self.rate - time.time()))
                await self.change(k)

        await asyncio.gather(*(worker() for _ in range(WORKERS)))
        return time.time()


async def _churn(url: str, namespace: str, count: int, start: float, end: float, rate: float,
                 out: str, part: int, parts: int) -> dict[str, Any]:
    from anarchon import Schedules

    with open(out, "w") as log:  # noqa: ASYNC230 - opened before the changes begin
        async with Schedules.from_url(url, namespace=namespace) as schedules:
            writer = _Writer(schedules, count, rate, log, part, parts)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            before = usage.ru_utime + usage.ru_stime
            last = await writer.run(start, end)
            usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"changes": writer.done, "conflicts": writer.conflicts, "skipped": writer.skipped,
            "last": last, "cpu_s": usage.ru_utime + usage.ru_stime - before}


# -- the judge -----------------------------------------------------------------------------------------

Definition = tuple[int, int] | None
"""An hourly schedule's (offset ms, argument n), or None: no schedule."""


@dataclass(frozen=True, slots=True)
class Change:
    """One change the writer made, as it logged it (times in ms)."""

    id: str
    definition: Definition
    sent: int
    done: int


def _slots(offset: int, lo: int, hi: int) -> Iterator[int]:
    slot = (lo - offset + HOUR_MS - 1) // HOUR_MS * HOUR_MS + offset
    while slot < hi:
        yield slot
        slot += HOUR_MS


def read_changes(lines: Iterable[str]) -> list[Change]:
    """The changes the writer answered, from its log (the refused ones left out)."""
    changes = []
    for line in lines:
        e = json.loads(line)
        if "error" in e:
            continue
        definition = None if e["kind"] == "remove" else (e["offset"], e["n"])
        changes.append(Change(e["id"], definition, int(e["sent"] * 1000), int(e["done"] * 1000)))
    return changes


def judge(count: int, changes: list[Change], starts: list[tuple[str, int, int, int, float]], lo: int, hi: int,
          heartbeat_ms: int, grace_ms: int = 1000) -> dict[str, Any]:
    """Lost, duplicate and late starts of the slots due in [lo, hi) ms, the N schedules (`s-<i>`, offset
    `_offset_ms(i)`, n = i) changed as `changes` say; `starts`: (schedule, slot, attempt, n, wall s).

    A slot due less than `grace_ms` before the next change of its schedule was sent may be dropped by
    that change (its claim raced the write): such a slot that did not start is counted as raced, not
    lost."""
    by_id: dict[str, list[Change]] = {}
    for c in sorted(changes, key=lambda c: c.sent):
        by_id.setdefault(c.id, []).append(c)
    expected = {key for key in _due_between(count, lo, hi) if key[0] not in by_id}
    raced: set[tuple[str, int]] = set()
    allowed: dict[tuple[str, int], set[int]] = {(name, slot): {int(name[2:])} for name, slot in expected}
    inf = 1 << 62
    for name, mine in by_id.items():
        original = name.startswith("s-") and name[2:].isdigit() and int(name[2:]) < count
        first: Definition = (_offset_ms(int(name[2:]), count), int(name[2:])) if original else None
        # Each definition's span: may run from `sent` to the next `done` + heartbeat; must run from
        # `done` + heartbeat to the next `sent`.
        spans = [(first, -inf, -inf)] + [(c.definition, c.sent, c.done + heartbeat_ms) for c in mine]
        for k, (definition, may_lo, must_lo) in enumerate(spans):
            if definition is None:
                continue
            offset, n = definition
            nxt = spans[k + 1] if k + 1 < len(spans) else (None, inf, inf)
            must_hi, may_hi = nxt[1], nxt[2]
            for slot in _slots(offset, max(lo, may_lo), min(hi, may_hi)):
                allowed.setdefault((name, slot), set()).add(n)
                if must_lo <= slot < must_hi - grace_ms:
                    expected.add((name, slot))
                elif must_lo <= slot < must_hi:
                    raced.add((name, slot))
    measured = [s for s in starts if lo <= s[1] < hi]
    keys = [(name, slot, attempt) for name, slot, attempt, _, _ in measured]
    late = stale_args = 0
    for name, slot, _, n, _ in measured:
        ok = allowed.get((name, slot))
        if ok is None:
            late += 1
        elif n not in ok:
            stale_args += 1
    latencies = sorted(t * 1000 - slot for _, slot, _, _, t in measured)

    def pct(p: float) -> float | None:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else None

    started = {(name, slot) for name, slot, _ in keys}
    lost = sorted(expected - started)

    def timeline(name: str) -> list[dict[str, Any]]:
        return [{"definition": c.definition, "sent": c.sent, "done": c.done} for c in by_id.get(name, [])]

    examples = ([{"lost": [name, slot], "changes": timeline(name)} for name, slot in lost[:EXAMPLES]]
                + [{"late": [name, slot, n, t], "allowed": sorted(allowed.get((name, slot), ())),
                    "changes": timeline(name)}
                   for name, slot, _, n, t in measured if allowed.get((name, slot)) is None
                   or n not in allowed[(name, slot)]][:EXAMPLES])
    return {"due": len(expected), "starts": len(measured), "duplicates": len(keys) - len(set(keys)),
            "lost": len(lost), "raced": len(raced - started),
            "late_after_change": late + stale_args, "late_removed_or_moved": late, "stale_args": stale_args,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "examples": examples}


def _read_starts(work: Path) -> list[tuple[str, int, int, int, float]]:
    starts = []
    for path in work.glob("starts-*.txt"):
        for line in path.read_text().splitlines():
            name, slot, attempt, n, t = line.split()
            starts.append((name, int(slot), int(attempt), int(n), float(t)))
    return starts


def _run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    namespace = f"churn-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="anarchon-churn-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    settings = {"heartbeat": f"{args.heartbeat}s", **history_settings(args.history)}
    try:
        spread = str(Path(__file__).resolve().parent / "stored_spread.py")
        done = subprocess.run([sys.executable, spread, "--populate", url, namespace, str(args.count)],
                              capture_output=True, text=True, check=True, env=env)
        populate_s = float(done.stdout.strip().splitlines()[-1])
        start = time.time() + args.warmup
        end = start + args.seconds
        writers = [subprocess.Popen([sys.executable, __file__, "--churn", url, namespace, str(args.count),
                                     str(start), str(end), str(args.rate), str(work / f"changes-{w}.jsonl"),
                                     str(w), str(args.writers)], stdout=subprocess.PIPE, text=True, env=env)
                   for w in range(args.writers)]
        try:
            results = _replicas([[__file__, "--replica", url, namespace, str(start), str(end),
                                  str(work / f"starts-{k}.txt"), json.dumps(settings)]
                                 for k in range(args.replicas)],
                                timeout=args.warmup + args.seconds + 600, env=env)
            each = [json.loads(w.communicate(timeout=120)[0].strip().splitlines()[-1]) for w in writers]
        finally:
            for w in writers:
                w.kill()
        wrote = {key: sum(e[key] for e in each) for key in ("changes", "conflicts", "skipped", "cpu_s")}
        wrote["changes_per_s"] = wrote["changes"] / (max(e["last"] for e in each) - start)
        wrote["seconds"] = args.seconds
    finally:
        if not args.keep:
            asyncio.run(_clean(url, namespace))
    logs = work.glob("changes-*.jsonl")
    changes = read_changes(line for path in logs for line in path.read_text().splitlines())
    verdict = judge(args.count, changes, _read_starts(work), int(start * 1000), int((end - 5) * 1000),
                    int(args.heartbeat * 1000), int(args.grace * 1000))
    return {"url": url, "count": args.count, "replicas": args.replicas, "populate_s": populate_s,
            "history": args.history, **wrote, **verdict,
            "cpu_pct": [r["cpu_s"] / args.seconds * 100 for r in results if "cpu_s" in r],
            "peak_mb": [r["peak_mb"] for r in results if "peak_mb" in r], "work": str(work),
            "crashed": sum(1 for r in results if r.get("crashed"))}


def table(rows: list[dict[str, Any]]) -> str:
    """The printed table."""
    lines = [f"{'store':<40} {'count':>8} {'changes/s':>9} {'conflicts':>9} {'due':>6} {'dup':>4} "
             f"{'lost':>5} {'raced':>5} {'late':>5} {'p50 ms':>7} {'p99 ms':>7} {'CPU % (min-max)':>16} "
             f"{'writer CPU %':>12}"]
    for r in rows:
        cpu = f"{min(r['cpu_pct']):.1f}-{max(r['cpu_pct']):.1f}"
        lines.append(
            f"{r['url'][:40]:<40} {r['count']:>8} {r['changes_per_s']:>9.0f} {r['conflicts']:>9} "
            f"{r['due']:>6} {r['duplicates']:>4} {r['lost']:>5} {r['raced']:>5} {r['late_after_change']:>5} "
            f"{r['p50_ms'] or 0:>7.0f} {r['p99_ms'] or 0:>7.0f} {cpu:>16} "
            f"{r['cpu_s'] / r['seconds'] * 100:>12.0f}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Entry point (a replica or the writer when `--replica`, `--churn` or `--populate` comes first)."""
    if argv and argv[0] == "--churn":
        import logging

        logging.getLogger("anarchon").setLevel(logging.ERROR)
        url, namespace, count, start, end, rate, out, part, parts = argv[1:10]
        print(json.dumps(asyncio.run(_churn(url, namespace, int(count), float(start), float(end), float(rate),
                                            out, int(part), int(parts)))))
        return 0
    if argv and argv[0] == "--replica":
        _replica(argv[1], argv[2], float(argv[3]), float(argv[4]), argv[5], json.loads(argv[6]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("urls", nargs="+")
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--rate", type=float, default=1000.0, help="changes a second")
    ap.add_argument("--writers", type=int, default=2, help="writer processes that share the rate")
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--heartbeat", type=float, default=5.0, help="the replicas' heartbeat, seconds")
    ap.add_argument("--grace", type=float, default=1.0,
                    help="seconds before a change in which a slot due may be dropped by it (its claim races)")
    ap.add_argument("--history", default="on", help="on, or off: run the replicas with history=0")
    ap.add_argument("--keep", action="store_true", help="leave the namespace in the store")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [_run(url, args) for url in args.urls]
    print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 1 if any(r["duplicates"] or r["lost"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
