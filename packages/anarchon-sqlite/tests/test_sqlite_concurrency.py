"""Locks, cancellation and races: a held write lock, a cancelled claim, several schedulers and processes."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from anarchon import BackendUnavailable, ClaimRequest, JobContext, Scheduler
from anarchon_sqlite import SqliteBackend


def _slot() -> int:
    return time.time_ns() // 1_000_000 - 10_000


@contextmanager
def write_lock(path: Path, seconds: float) -> Iterator[threading.Event]:
    """Hold the file's write lock (BEGIN IMMEDIATE) from another connection for `seconds`."""
    taken = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        taken.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait(5)
    try:
        yield taken
    finally:
        thread.join()


async def _opened(path: Path, **kwargs: str) -> SqliteBackend:
    backend = SqliteBackend(path, **kwargs)
    await backend.open()
    return backend


async def test_locked_beyond_busy_timeout_is_retried_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jobs.db"
    backend = await _opened(path, busy_timeout="100ms")
    caplog.set_level(logging.WARNING, logger="anarchon.sqlite")
    try:
        with write_lock(path, 0.6):
            result = await backend.claim(ClaimRequest("ns", "job", _slot(), "a"))
        assert result.won
        retries = [r for r in caplog.records if "locked" in r.getMessage() and "retrying" in r.getMessage()]
        assert retries, caplog.text
        assert "busy_timeout=100 ms" in retries[0].getMessage()
    finally:
        await backend.close()


async def test_a_lock_that_never_ends_becomes_backend_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = await _opened(path, busy_timeout="0s")
    try:
        with write_lock(path, 2.5), pytest.raises(BackendUnavailable, match="stayed locked"):
            await backend.claim(ClaimRequest("ns", "job", _slot(), "a"))
        assert (await backend.claim(ClaimRequest("ns", "job", _slot(), "a"))).won
    finally:
        await backend.close()


async def test_a_cancelled_claim_never_leaves_a_transaction_open(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = await _opened(path, busy_timeout="5s")
    slot = _slot()
    try:
        with write_lock(path, 0.5):
            # The claim waits for the lock on the connection's thread; its caller gives up.
            task = asyncio.create_task(backend.claim(ClaimRequest("ns", "job", slot, "a")))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        # The transaction runs to COMMIT on the connection's thread (this read queues behind it):
        # the record is whole, and the lock is free.
        state = await backend.inspect("ns", "job")
        assert state is not None
        assert (state.owner, state.slot, state.attempt) == ("a", slot, 1)
        other = await _opened(path, busy_timeout="1s")
        try:
            result = await other.claim(ClaimRequest("ns", "job", slot, "b"))
            assert (result.outcome.value, result.holder) == ("taken", "a")
        finally:
            await other.close()
        assert (await backend.claim(ClaimRequest("ns", "job2", slot, "a"))).won
        with sqlite3.connect(path, timeout=0.1, isolation_level=None) as conn:
            conn.execute("BEGIN IMMEDIATE")  # would fail with 'locked' if a transaction were left open
            conn.execute("ROLLBACK")
    finally:
        await backend.close()


async def test_cancelling_many_operations_keeps_the_store_consistent(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    backend = await _opened(path)
    try:
        base = _slot() - 100_000
        for i in range(40):
            task = asyncio.create_task(backend.claim(ClaimRequest("ns", f"j{i % 4}", base + i, "a", 0)))
            await asyncio.sleep(0)
            if i % 2:
                task.cancel()
            with pytest.raises(asyncio.CancelledError) if i % 2 else _nothing():
                await task
        states = {state.job: state for state in await backend.jobs("ns")}
        # The claims not cancelled (j0, j2) landed in order; a cancelled one (j1, j3) landed whole
        # when its thread had begun it, and not at all when it was still queued.
        assert {j: states[j].slot for j in ("j0", "j2")} == {"j0": base + 36, "j2": base + 38}
        for job in ("j1", "j3"):
            if job in states:
                k = int(job[1:])
                assert states[job].slot in {base + i for i in range(k, 40, 4)}
                assert (states[job].owner, states[job].attempt) == ("a", 1)
    finally:
        await backend.close()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


async def test_three_schedulers_in_one_process_run_each_slot_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"
    runs: list[tuple[int, str]] = []

    def make(i: int) -> Scheduler[SqliteBackend]:
        scheduler: Scheduler[SqliteBackend] = Scheduler(
            SqliteBackend(url), instance_id=f"s{i}", lease="2s", heartbeat="0.5s", jitter=0,
        )

        @scheduler.every("tick", "0.5s", catch_up=0)
        async def tick(ctx: JobContext) -> None:
            runs.append((ctx.slot, ctx.instance_id))

        return scheduler

    schedulers = [make(i) for i in range(3)]
    for s in schedulers:
        await s.start()
    await asyncio.sleep(3.2)
    for s in schedulers:
        await s.stop()
    per_slot = Counter(slot for slot, _ in runs)
    assert len(per_slot) >= 4, runs
    assert max(per_slot.values()) == 1, per_slot
    slots = sorted(per_slot)
    assert all(b - a == 500 for a, b in itertools.pairwise(slots)), slots  # none missed


_RACER = """
import asyncio, json, sys, time
from anarchon import ClaimRequest, Overlap
from anarchon_sqlite import SqliteBackend
async def main():
    path, me, start, base = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    backend = SqliteBackend(path)
    await backend.open()
    time.sleep(max(0.0, start - time.time()))
    won = []
    for i in range(60):
        request = ClaimRequest("ns", f"job{i % 3}", base + i * 1000, me, 0, 99, Overlap.SKIP)
        if i % 4 == 0:
            results = await backend.claim_many([request])
        else:
            results = [await backend.claim(request)]
        for result in results:
            if result.lease is not None:
                won.append([result.job, result.slot, result.lease.attempt, result.lease.token])
    await backend.close()
    print(json.dumps(won))
asyncio.run(main())
"""


def test_processes_racing_on_one_file_get_one_winner_per_slot_and_attempt(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    subprocess.run([sys.executable, "-c", "import asyncio; from anarchon_sqlite import SqliteBackend as B; "
                    f"b = B({str(path)!r}); asyncio.run(b.open()); asyncio.run(b.close())"], check=True)
    base = time.time_ns() // 1_000_000 - 200_000
    start = time.time() + 1.0
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(path), f"p{i}", str(start), str(base)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    wins: list[tuple[str, int, int, int, str]] = []
    for i, proc in enumerate(procs):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        wins += [(job, slot, attempt, token, f"p{i}") for job, slot, attempt, token in json.loads(out)]
    keys = Counter((job, slot, attempt) for job, slot, attempt, _t, _p in wins)
    assert keys
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    tokens = Counter((job, token) for job, _s, _a, token, _p in wins)
    assert max(tokens.values()) == 1  # fencing tokens are never handed out twice
    # Leases of 0 ms expire at once, so slots are taken over: attempts above 1 did happen.
    assert any(attempt > 1 for _j, _s, attempt, _t, _p in wins)
    assert {slot for _j, slot, _a, _t, _p in wins} == {base + i * 1000 for i in range(60)}
