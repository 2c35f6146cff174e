"""A test replica: `python -m anarchon_testkit._replica CONFIG_JSON`, used by `anarchon_testkit.cluster`.

It runs two jobs on the backend at `url` and appends one JSON line per handler start and end, and
one when it is ready, when SIGTERM arrives (`stopping`) and when it exits, to
`<workdir>/events-<pid>.jsonl`:
- `tick`, every `tick_every`: starts and ends at once;
- `long`, every `long_every`: runs `long_run`, checking its cancellation signal every 100 ms;
- with `extra_ticks` = n, `tick-0` ... `tick-<n-1>`, like `tick` (jobs whose keys spread over a
  sharded store);
- with `later`, `later`: due once, in 2100 (a job that never runs while the cluster does);
- with `history` = n, `Scheduler(history=n)`;
- with `block_for` (a list of seconds), `block`, every `block_every`: an `async def` that blocks its
  event loop with `time.sleep`, the n-th such run in the cluster for `block_for[n]` seconds, then no more;
- with `tasks` = [name, ...], those tasks for stored schedules: each runs `seconds` (the schedule's
  argument, 0 by default) like `long`;
- with `stubborn` = {"at": epoch seconds, "kind": "thread" or "async", "seconds": s}, `stubborn`, due
  once at `at`: a handler that ignores its cancellation signal and runs for `s` seconds (a plain
  function that sleeps in its worker thread, or an `async def` that awaits short sleeps; a cancelled
  one writes `cancelled`). The replica then runs with `Scheduler.run()`, the product's own signal
  handling: SIGINT or SIGTERM stops it gracefully, and a second one exits at once. With "every" (a
  duration) and "overlap" in it, `stubborn` is due every `every` from `at` on, under that overlap.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from anarchon import Capability, JobContext, RunCancelled, Scheduler, backend_for_url
from anarchon.testing import probe


def main(argv: list[str]) -> None:
    """Run one replica until SIGTERM/SIGINT."""
    config: dict[str, Any] = json.loads(argv[1])
    out = Path(config["workdir"]) / f"events-{os.getpid()}.jsonl"
    fh = out.open("a", buffering=1)

    def emit(event: str, ctx: JobContext, **extra: Any) -> None:
        record = {"event": event, "job": ctx.name, "slot": ctx.slot, "attempt": ctx.attempt,
                  "pid": os.getpid(), "t": time.time(), **extra}
        fh.write(json.dumps(record) + "\n")

    backend = backend_for_url(config["url"])
    settings: dict[str, Any] = {"namespace": config["namespace"], "log": True,
                                "stop_timeout": config.get("stop_timeout", "5s")}
    if Capability.LEASE in backend.capabilities:
        settings.update(lease=config["lease"], heartbeat=config["heartbeat"])
        if config.get("block_limit"):
            settings["block_limit"] = config["block_limit"]
    if config.get("history") is not None:
        settings["history"] = config["history"]
    scheduler: Scheduler[Any] = Scheduler(backend, **settings)
    long_run = float(config["long_run"])

    async def tick(ctx: JobContext) -> None:
        emit("start", ctx)
        emit("end", ctx)

    async def long(ctx: JobContext) -> None:
        emit("start", ctx)
        deadline = time.monotonic() + long_run
        try:
            while time.monotonic() < deadline:
                await ctx.sleep(0.1)
        except RunCancelled as exc:
            emit("cancelled", ctx, reason=exc.reason)
            raise
        emit("end", ctx)

    async def block(ctx: JobContext) -> None:
        emit("start", ctx)
        seconds = _next_block(Path(config["workdir"]), config["block_for"])
        if seconds:
            time.sleep(seconds)  # noqa: ASYNC251 - the point: this replica's event loop is blocked
        emit("end", ctx)

    options: dict[str, Any] = {"catch_up": 0} if scheduler.leases else {}
    scheduler.every("tick", config["tick_every"], tick, **options)
    scheduler.every("long", config["long_every"], long, **options)
    for i in range(int(config.get("extra_ticks", 0))):
        scheduler.every(f"tick-{i}", config["tick_every"], tick, **options)
    if config.get("block_for"):
        scheduler.every("block", config["block_every"], block, **options)
    if config.get("later"):
        scheduler.at("later", datetime(2100, 1, 1, tzinfo=UTC), tick)
    if config.get("tasks"):
        _add_tasks(scheduler, config["tasks"], emit)
    stubborn = config.get("stubborn")
    if stubborn:
        _add_stubborn(scheduler, stubborn, emit)
        # Ready once started: `run()` owns the loop, so a thread watches for the start.
        def ready() -> None:
            while not scheduler.running:
                time.sleep(0.01)
            fh.write(json.dumps({"event": "ready", "pid": os.getpid(), "t": time.time(),
                                 "instance": scheduler.instance_id, "keeper": ""}) + "\n")

        threading.Thread(target=ready, daemon=True).start()
        scheduler.run()
        fh.write(json.dumps({"event": "exit", "pid": os.getpid(), "t": time.time()}) + "\n")
        return

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        async with scheduler:
            # Ready only once started: every slot after this moment has this replica as a claimant.
            fh.write(json.dumps({"event": "ready", "pid": os.getpid(), "t": time.time(),
                                 "instance": scheduler.instance_id, "keeper": probe(scheduler).keeper})
                     + "\n")
            await done.wait()
            fh.write(json.dumps({"event": "stopping", "pid": os.getpid(), "t": time.time()}) + "\n")

    asyncio.run(serve())
    fh.write(json.dumps({"event": "exit", "pid": os.getpid(), "t": time.time()}) + "\n")


def _add_tasks(scheduler: Scheduler[Any], tasks: list[str], emit: Any) -> None:
    """Tasks for stored schedules, each like `long`: it runs `seconds` (a schedule's argument; 0 by
    default), checking its signal, and writes start, end or cancelled."""
    for name in tasks:
        async def task(ctx: JobContext, seconds: float = 0.0) -> None:
            emit("start", ctx)
            try:
                if seconds:
                    await ctx.sleep(seconds)
            except RunCancelled as exc:
                emit("cancelled", ctx, reason=exc.reason)
                raise
            emit("end", ctx)

        scheduler.task(name)(task)


def _add_stubborn(scheduler: Scheduler[Any], config: dict[str, Any], emit: Any) -> None:
    """The `stubborn` job: it ignores its signal for `seconds`."""
    seconds = float(config["seconds"])
    if config["kind"] == "thread":
        def stubborn_thread(ctx: JobContext) -> None:
            emit("start", ctx)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(0.05)
            emit("end", ctx)

        _schedule(scheduler, config, stubborn_thread)
        return

    async def stubborn_async(ctx: JobContext) -> None:
        emit("start", ctx)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:  # noqa: ASYNC110 - the point: it never looks at ctx
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            emit("cancelled", ctx, reason="cancelled")
            raise
        emit("end", ctx)

    _schedule(scheduler, config, stubborn_async)


def _schedule(scheduler: Scheduler[Any], config: dict[str, Any], handler: Any) -> None:
    """Register the `stubborn` job: once at `at`, or with "every", every `every` under "overlap"."""
    if "every" in config:
        scheduler.every("stubborn", config["every"], handler, overlap=config["overlap"], catch_up=0)
    else:
        scheduler.at("stubborn", float(config["at"]), handler)


def _next_block(workdir: Path, block_for: list[float]) -> float:
    """How long this run blocks: the n-th blocking run of the cluster (a marker file each) blocks for
    `block_for[n]` seconds; once the list is used up, runs do not block."""
    for n, seconds in enumerate(block_for):
        try:
            os.close(os.open(workdir / f"blocked-{n}", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        return float(seconds)
    return 0.0


if __name__ == "__main__":
    main(sys.argv)
