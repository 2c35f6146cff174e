"""A store's container is stopped and started again while two schedulers run on it: what
docs/guarantees.md promises for a store restart, on each lease backend that has a server.

Run by `make test-containers` (it needs a docker engine and the images; `--anarchon-image` and
`$ANARCHON_<NAME>_IMAGE` choose them as for the conformance kit). Each case prints one line of what it saw.

- Every store: both schedulers keep running through the outage (their claims fail and are retried),
  the 0.5 s job runs again soon after the store is back, and within the run no (job, slot, attempt)
  starts twice where the store kept its records.
- Redis and Valkey without persistence forget every record: the fencing tokens start again at 1.
- PostgreSQL keeps what it commits, NATS JetStream's file storage keeps its buckets: tokens keep rising
  across the restart, and no slot runs again except as a takeover (attempt + 1).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from anarchon import JobContext, Scheduler
from anarchon.testing import unused_port
from anarchon_conformance._containers import parse_images, start_container

LEASE = "2s"
HEARTBEAT = "0.4s"


@dataclass(frozen=True, slots=True)
class Case:
    """A lease backend on the server of `service`: its URL, whether it keeps records, how it starts."""

    service: str
    backend_url: Callable[[str], str]
    keeps_records: bool
    command: tuple[str, ...] | None = None


def _scheme(scheme: str, query: str = "") -> Callable[[str], str]:
    return lambda url: f"{scheme}://{url.split('://', 1)[1]}{query}"


# Redis and Valkey as this machine runs Redis: no persistence (the public images would save on SIGTERM).
_NO_PERSISTENCE = ("--protected-mode", "no", "--save", "", "--appendonly", "no")
CASES = {
    "redis": Case("redis", _scheme("redis"), False, ("redis-server", *_NO_PERSISTENCE)),
    "valkey": Case("valkey", _scheme("valkey"), False, ("valkey-server", *_NO_PERSISTENCE)),
    "postgres": Case("postgres", _scheme("postgresql"), True),
    "nats-kv": Case("nats", _scheme("nats-kv", f"?bucket=restart&lease={LEASE}"), True),
}


@dataclass(frozen=True, slots=True)
class Start:
    job: str
    slot: int
    attempt: int
    token: int
    instance: str
    at: float


@pytest.mark.parametrize("case_name", sorted(CASES))
async def test_store_restart(case_name: str, request: pytest.FixtureRequest) -> None:
    case = CASES[case_name]
    images = parse_images(request.config.getoption("--anarchon-image"))
    store = await asyncio.to_thread(start_container, case.service, images, host_port=unused_port(),
                                    command=case.command)
    starts: list[Start] = []

    async def record(ctx: JobContext) -> None:
        starts.append(Start(ctx.name, ctx.slot, ctx.attempt, ctx.token, ctx.instance_id, time.monotonic()))
        if ctx.name == "long":
            await ctx.sleep(2.5)

    schedulers: list[Scheduler[Any]] = []
    try:
        for i in range(2):
            scheduler = Scheduler.from_url(case.backend_url(store.url), namespace=f"restart-{case_name}",
                                           instance_id=f"r{i}", lease=LEASE, heartbeat=HEARTBEAT)
            scheduler.every("tick", "0.5s", record, catch_up=0)
            scheduler.every("long", "4s", record, catch_up=0)
            schedulers.append(scheduler)
            await scheduler.start()
        await asyncio.sleep(2.5)
        down_at = time.monotonic()
        await asyncio.to_thread(store.stop_server)
        stopped_at = time.monotonic()  # the container has exited: a start after this is after the restart
        await asyncio.sleep(1.0)
        await asyncio.to_thread(store.start_server)
        up_at = time.monotonic()
        await asyncio.sleep(4.0)
        assert all(s.running for s in schedulers), "a scheduler died with the store"
    finally:
        for scheduler in schedulers:
            await scheduler.stop()
        await asyncio.to_thread(store.stop)

    ticks_before = [s for s in starts if s.job == "tick" and s.at < down_at]
    # The store may answer a claim between its start and `up_at` (when its readiness was seen).
    ticks_after = [s for s in starts if s.job == "tick" and s.at > stopped_at]
    assert ticks_before, f"no tick before the restart: {starts}"
    assert ticks_after, f"no tick after the store came back: {starts}"
    resumed = max(0.0, ticks_after[0].at - up_at)
    assert resumed < 3.0, f"the first tick after the restart came {resumed:.1f} s after the store was back"
    twice = [k for k, n in Counter((s.job, s.slot, s.attempt) for s in starts).items() if n > 1]
    before, after = max(s.token for s in ticks_before), min(s.token for s in ticks_after)
    if case.keeps_records:
        assert not twice, f"(job, slot, attempt) started twice across a restart of a durable store: {twice}"
        assert after > before, f"tokens went back from {before} to {after}: the store lost its records"
    else:
        # The counter starts afresh; a claim answered after its next slot was due is released unrun,
        # so the first tick after the restart may hold token 2 or more, still below the old ones.
        assert after < before, f"tokens {before} -> {after}: the restarted store still had its records"
    runs_again = sorted({(job, slot) for job, slot, _ in twice})
    print(f"\nrestart[{case_name}] on {store.image}: outage {up_at - down_at:.1f} s, first tick "
          f"{resumed:.2f} s after the store was seen back, tick tokens {before} -> {after} "
          f"({'kept' if case.keeps_records else 'forgotten'}), {len(starts)} starts, "
          f"(job, slot, attempt) started twice: {runs_again or 'none'}")
