"""NatsKVBackend against the real server, row by row against MemoryBackend (the claim table)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.api
import nats.js.errors
import pytest

from anarchon import ConfigError, Scheduler, SchemaMismatch
from anarchon.backends import (
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobStatus,
    Lease,
    LeaseBackend,
    MemoryBackend,
    Overlap,
    ReleaseOutcome,
)
from anarchon.testing import require_service
from anarchon_nats import NatsKVBackend, _common
from anarchon_nats._common import request_joined
from anarchon_testkit.cluster import Cluster
from anarchon_testkit.faultproxy import FaultProxy

URL = os.environ.get("ANARCHON_NATS_URL", "nats://127.0.0.1:4222")
LEASE_MS = 1000

pytestmark = pytest.mark.services


@pytest.fixture
def url() -> str:
    require_service("NATS", URL, 4222)
    return URL


@pytest.fixture
async def bucket(url: str) -> AsyncIterator[str]:
    """A unique bucket name; both of its streams are deleted afterwards."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    nc = await nats.connect(url)
    js = nc.jetstream()
    for stream in (f"KV_{name}", f"KV_{name}_state"):
        try:
            await js.delete_stream(stream)
        except Exception:
            pass
    await nc.close()


@pytest.fixture
async def kv(url: str, bucket: str) -> AsyncIterator[NatsKVBackend]:
    b = NatsKVBackend(url, bucket=bucket, lease=f"{LEASE_MS}ms")
    await b.open()
    yield b
    await b.close()


def _now_slot() -> int:
    return int(time.time() * 1000) // 1000 * 1000


def _req(slot: int, owner: str, job: str = "job", **kw: Any) -> ClaimRequest:
    return ClaimRequest("ns", job, slot, owner, lease_ms=LEASE_MS, **kw)


def test_a_replicated_bucket_declares_that_its_leases_may_end_late() -> None:
    # The conformance kit waits `expiry_slack_ms` longer for a lease to run out.
    assert NatsKVBackend("nats://127.0.0.1:4222", replicas=3).expiry_slack_ms == 1_000
    assert NatsKVBackend("nats://127.0.0.1:4222").expiry_slack_ms == 0


async def test_a_batch_runs_one_jobs_items_in_order_and_jobs_side_by_side(kv: NatsKVBackend) -> None:
    # Different jobs are claimed concurrently; one job's items keep the batch's order, so the
    # second claim of a slot always sees the first one's lease.
    slot = _now_slot()
    jobs = [f"j{i}" for i in range(20)]
    batch = [r for job in jobs for r in (_req(slot, "a", job), _req(slot, "b", job))]
    results = await kv.claim_many(batch)
    assert [r.outcome for r in results] == [ClaimOutcome.WON, ClaimOutcome.TAKEN] * len(jobs)
    assert [r.job for r in results] == [r.job for r in batch]
    leases = [r.lease for r in results if r.lease is not None]
    renewed = await kv.renew_many([(lease, LEASE_MS) for lease in leases])
    assert all(r is not None for r in renewed)
    released = await kv.release_many([(lease, ReleaseOutcome.DONE) for lease in leases]
                                     + [(leases[0], ReleaseOutcome.DONE)])
    assert released == [True] * len(leases) + [False]


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every batch of requests sent (`_common.request_all`) while the test runs."""
    sizes: list[int] = []
    send = _common.request_all

    async def counted(client: Any, requests: Any, within: float) -> Any:
        sizes.append(len(requests))
        return await send(client, requests, within)

    monkeypatch.setattr(_common, "request_all", counted)
    return sizes


async def test_requests_asked_in_one_turn_go_in_one_batch_each_caller_its_replies(
    kv: NatsKVBackend, batches: list[int],
) -> None:
    # Three tasks ask at once: one batch carries them (one reply wait), each gets its own answers,
    # and a caller cancelled while waiting leaves the others their replies.
    info = (f"$JS.API.STREAM.INFO.KV_{kv.bucket}", b"", None)
    state = (f"$JS.API.STREAM.INFO.KV_{kv.state_bucket}", b"", None)
    nobody = ("nobody.listens.here", b"", None)
    cancelled = asyncio.ensure_future(request_joined(kv.client, [info], 5.0))
    first, second, _ = await asyncio.gather(
        request_joined(kv.client, [info, nobody], 5.0), request_joined(kv.client, [state], 5.0),
        _cancel_soon(cancelled))
    assert batches == [4]
    assert cancelled.cancelled()
    assert [type(r) for r in first][1] is nats.errors.NoRespondersError
    assert not isinstance(first[0], Exception) and f'"KV_{kv.bucket}"'.encode() in first[0].data
    assert not isinstance(second[0], Exception) and f'"KV_{kv.state_bucket}"'.encode() in second[0].data


async def test_the_claims_of_a_batch_take_each_step_together(kv: NatsKVBackend, batches: list[int]) -> None:
    # 20 jobs nobody holds: every job's reads go in one batch, every lease entry's write (with its
    # read) in the next, every record's write in the last; not three batches per job.
    results = await kv.claim_many([_req(_now_slot(), "a", f"j{i}") for i in range(20)])
    assert all(r.won for r in results)
    assert batches == [40, 40, 20]


async def test_claims_of_jobs_released_elsewhere_skip_the_reads(
    url: str, bucket: str, kv: NatsKVBackend, batches: list[int],
) -> None:
    # `kv` has claimed the 20 jobs before; another replica wins their next slots and releases them,
    # announcing what it wrote. `kv` then claims the slots after those with the writes alone: the
    # lease entries' writes (each with its read) in one batch, the records' in the next, no reads.
    other = NatsKVBackend(url, bucket=bucket, lease=f"{LEASE_MS}ms")
    await other.open()
    try:
        slot = _now_slot()
        jobs = [f"j{i}" for i in range(20)]
        first = await kv.claim_many([_req(slot, "a", job) for job in jobs])
        assert all(await kv.release_many([(r.lease, ReleaseOutcome.DONE) for r in first if r.lease]))
        before = dict(kv._known)
        theirs = await other.claim_many([_req(slot + 1, "b", job) for job in jobs])
        assert all(r.won for r in theirs)
        assert all(await other.release_many([(r.lease, ReleaseOutcome.DONE) for r in theirs if r.lease]))
        await other.client.flush()
        await kv.client.flush()  # the announcement has reached `kv`
        # ... and its callback has run (on the subscription's own task: a busy machine delays it).
        for _ in range(500):
            if all(kv._known.get(key) is not known for key, known in before.items()):
                break
            await asyncio.sleep(0.01)
        assert all(kv._known.get(key) is not known for key, known in before.items())
        batches.clear()
        mine = await kv.claim_many([_req(slot + 2, "a", job) for job in jobs])
        assert [r.outcome for r in mine] == [ClaimOutcome.WON] * 20
        assert all(r.lease is not None and r.lease.token == 3 for r in mine)
        assert batches == [40, 20], f"the claims read first: {batches}"
    finally:
        await other.close()


async def test_what_a_claim_knew_is_checked_by_its_writes(url: str, bucket: str, kv: NatsKVBackend) -> None:
    # `kv` last saw its own slot done; another replica has since won the next slot without `kv`
    # hearing of it. The claim `kv` decides on what it knew fails its compare-and-set, and fresh
    # reads answer it; the next claim, on what those reads showed (a live lease), writes nothing and
    # reads afresh. Both answers are MemoryBackend's.
    other = NatsKVBackend(url, bucket=bucket, lease=f"{LEASE_MS}ms")
    memory = MemoryBackend()
    await other.open()
    try:
        slot = _now_slot()
        for backend in (kv, memory):
            won = await backend.claim(_req(slot, "a"))
            assert won.lease is not None and await backend.release(won.lease, ReleaseOutcome.DONE)
        for backend in (other, memory):
            assert (await backend.claim(_req(slot + 1, "b"))).won
        sent = _count_requests(kv)
        for late, outcome in ((slot + 1, ClaimOutcome.TAKEN), (slot + 2, ClaimOutcome.SKIPPED)):
            got, want = await kv.claim(_req(late, "a")), await memory.claim(_req(late, "a"))
            assert (got.outcome, got.holder) == (want.outcome, want.holder) == (outcome, "b")
        kinds = ["write" if s.startswith("$KV.") else "read" for s in sent]
        assert kinds == ["write", "read", "read", "read", "read", "read"], (
            f"a write on what it knew, then reads; then reads alone: {sent}")
    finally:
        await other.close()


async def test_releases_of_its_own_leases_are_one_batch_without_a_task_each(
    kv: NatsKVBackend, batches: list[int],
) -> None:
    # 20 runs end together: their records' writes go out in one batch, and the batch does not
    # start a task per release (the batch's send is the one task).
    results = await kv.claim_many([_req(_now_slot(), "a", f"j{i}") for i in range(20)])
    leases = [r.lease for r in results if r.lease is not None]
    loop = asyncio.get_running_loop()
    started: list[object] = []
    factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        started.append(coro)
        if factory is not None:
            return factory(loop, coro, **kwargs)  # type: ignore[return-value]
        return asyncio.Task(coro, loop=loop, **kwargs)

    batches.clear()
    loop.set_task_factory(counting)
    try:
        assert await kv.release_many([(lease, ReleaseOutcome.DONE) for lease in leases]) == [True] * 20
    finally:
        loop.set_task_factory(factory)
    assert batches == [20]
    assert len(started) == 1, f"a task per release: {len(started)} tasks for 20 releases"
    # Each release was decided by its own compare-and-set: a second release of the same leases fails.
    assert await kv.release_many([(lease, ReleaseOutcome.DONE) for lease in leases[:3]]) == [False] * 3


async def _cancel_soon(task: asyncio.Future[Any]) -> None:
    await asyncio.sleep(0)
    task.cancel()


def _count_requests(kv: NatsKVBackend) -> list[str]:
    """Record the subject of every request `kv` sends from now on (each is one publish)."""
    sent: list[str] = []
    publish = kv.client.publish

    async def counted(subject: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(subject)
        return await publish(subject, *args, **kwargs)

    kv.client.publish = counted  # a bound method, patched for this test only
    return sent


async def test_its_own_lease_is_renewed_and_released_without_reading_first(kv: NatsKVBackend) -> None:
    won = await kv.claim(_req(_now_slot(), "a"))
    assert won.lease is not None
    sent = _count_requests(kv)
    renewed = await kv.renew(won.lease, LEASE_MS)
    assert renewed is not None
    assert sent[0].startswith("$KV."), f"a renewal of its own lease must write first, not read: {sent}"
    sent.clear()
    assert await kv.release(renewed, ReleaseOutcome.DONE)
    assert [s.split(".")[1] for s in sent] == [f"{kv.bucket}_state", f"KV_{kv.bucket}"], (
        f"a release of its own lease is one write (the record), then its announcement; sent {sent}")
    assert sent[1] == f"_anarchon.KV_{kv.bucket}.ended"
    # The lease entry it left matches a record that has ended: the next claim replaces it at once.
    assert (await kv.claim(_req(renewed.slot + 1000, "b"))).won


async def test_a_lease_replaced_since_its_claim_is_decided_on_fresh_reads(kv: NatsKVBackend) -> None:
    # The remembered revisions are stale once another claim took the slot over: the writes against
    # them fail, and the rules decide on what the store holds now.
    slot = _now_slot()
    won = await kv.claim(_req(slot, "a"))
    assert won.lease is not None
    await asyncio.sleep(LEASE_MS / 1000 + 0.3)
    taken_over = await kv.claim(_req(slot, "b"))
    assert taken_over.won and taken_over.lease is not None and taken_over.lease.attempt == 2
    assert await kv.renew(won.lease, LEASE_MS) is None
    assert not await kv.release(won.lease, ReleaseOutcome.DONE)
    assert await kv.release(taken_over.lease, ReleaseOutcome.DONE)
    assert (await kv.claim(_req(slot, "c"))).outcome is ClaimOutcome.DONE


async def test_a_renewal_racing_its_release_leaves_no_lease_entry(kv: NatsKVBackend) -> None:
    # The renewal may write the entry again between the release's two writes: the release then
    # deletes the entry at its new revision, so the next slot is free at once.
    slot = _now_slot()
    for i in range(5):
        won = await kv.claim(_req(slot + 2 * i, "a"))
        assert won.lease is not None
        await asyncio.gather(kv.renew_many([(won.lease, LEASE_MS)]),
                             kv.release_many([(won.lease, ReleaseOutcome.DONE)]))
        nxt = await kv.claim(_req(slot + 2 * i + 1, "b"))
        assert nxt.won, f"round {i}: the released slot's entry still blocks the next slot: {nxt}"
        assert nxt.lease is not None
        assert await kv.release(nxt.lease, ReleaseOutcome.DONE)


Step = Callable[[LeaseBackend, dict[str, Any]], Awaitable[object]]


def _summary(value: object) -> object:
    """What must agree between the two backends (tokens differ in value, not in order)."""
    if isinstance(value, ClaimResult):
        return (value.outcome, value.attempt if value.won else None, value.previous_status,
                value.lease.owner if value.lease else None)
    if isinstance(value, Lease):
        return ("lease", value.slot, value.attempt, value.owner)
    return value


async def _run(backend: LeaseBackend, steps: list[tuple[str, Step]]) -> list[object]:
    memo: dict[str, Any] = {}
    out: list[object] = []
    for name, step in steps:
        value = await step(backend, memo)
        memo[name] = value
        out.append(_summary(value))
    return out


async def _same_as_memory(kv: NatsKVBackend, steps: list[tuple[str, Step]]) -> list[Any]:
    """Run the steps on both backends concurrently (so sleeps overlap) and compare the answers."""
    memory = MemoryBackend()
    got, want = await asyncio.gather(_run(kv, steps), _run(memory, steps))
    assert got == want
    return got


def claim(slot: int, owner: str, **kw: Any) -> Step:
    async def step(b: LeaseBackend, memo: dict[str, Any]) -> object:
        return await b.claim(_req(slot, owner, **kw))
    return step


def renew(name: str) -> Step:
    async def step(b: LeaseBackend, memo: dict[str, Any]) -> object:
        lease = memo[name].lease if isinstance(memo[name], ClaimResult) else memo[name]
        return await b.renew(lease, LEASE_MS)
    return step


def release(name: str, outcome: ReleaseOutcome) -> Step:
    async def step(b: LeaseBackend, memo: dict[str, Any]) -> object:
        return await b.release(memo[name].lease, outcome)
    return step


def sleep(seconds: float) -> Step:
    async def step(b: LeaseBackend, memo: dict[str, Any]) -> object:
        await asyncio.sleep(seconds)
        return None
    return step


async def test_rows_none_live_done_failed(kv: NatsKVBackend) -> None:
    s = _now_slot()
    got = await _same_as_memory(kv, [
        ("a", claim(s, "a")),                               # none -> won, attempt 1
        ("b", claim(s, "b")),                               # same slot, running, live -> taken
        ("r", renew("a")),                                  # the holder renews
        ("rel", release("a", ReleaseOutcome.DONE)),
        ("c", claim(s, "c")),                               # same slot, done -> done
        ("again", release("a", ReleaseOutcome.DONE)),       # ignored: no longer running
        ("n", claim(s + 1000, "b")),                        # older slot, done -> won, attempt 1
        ("f", release("n", ReleaseOutcome.FAILED)),
        ("d", claim(s + 1000, "c")),                        # same slot, failed -> done
        ("old", claim(s, "d")),                             # newer slot than asked -> stale
    ])
    assert got[0][0] is ClaimOutcome.WON
    assert got[1][0] is ClaimOutcome.TAKEN
    assert got[4][0] is ClaimOutcome.DONE
    assert got[9][0] is ClaimOutcome.STALE


async def test_rows_handover_takeover_and_exhausted(kv: NatsKVBackend) -> None:
    s = _now_slot()
    got = await _same_as_memory(kv, [
        ("a", claim(s, "a", max_attempts=3)),
        ("h", release("a", ReleaseOutcome.HANDOVER)),       # released -> takeover at once
        ("b", claim(s, "b", max_attempts=3)),
        ("stale_renew", renew("a")),                        # the old holder's lease is gone
        ("stale_release", release("a", ReleaseOutcome.DONE)),
        ("wait", sleep(LEASE_MS / 1000 + 0.6)),             # b stops renewing: its lease expires
        ("c", claim(s, "c", max_attempts=3)),               # running, expired -> takeover, attempt 3
        ("h2", release("c", ReleaseOutcome.HANDOVER)),
        ("d", claim(s, "d", max_attempts=3)),               # attempt 3 used -> exhausted
    ])
    assert got[2] == (ClaimOutcome.WON, 2, JobStatus.RELEASED, "b")
    assert got[3] is None
    assert got[4] is False
    assert got[6] == (ClaimOutcome.WON, 3, JobStatus.RUNNING, "c")
    assert got[8][0] is ClaimOutcome.EXHAUSTED


async def test_rows_overlap_skip_and_replace(kv: NatsKVBackend) -> None:
    s = _now_slot()
    got = await _same_as_memory(kv, [
        ("a", claim(s - 1000, "a")),
        ("skip", claim(s, "b", overlap=Overlap.SKIP)),           # older slot live -> skipped
        ("buf", claim(s, "b", overlap=Overlap.BUFFER_ONE)),      # also skipped (the core buffers)
        ("rep", claim(s, "b", overlap=Overlap.REPLACE)),         # older lease revoked, new slot won
        ("lost", renew("a")),                                    # the revoked runner's renew fails
        ("gone", release("a", ReleaseOutcome.DONE)),
        ("kept", renew("rep")),
    ])
    assert got[1][0] is ClaimOutcome.SKIPPED
    assert got[3] == (ClaimOutcome.WON, 1, None, "b")
    assert got[4] is None
    assert got[6] == ("lease", s, 1, "b")


async def test_an_expired_lease_nobody_took_is_lost(kv: NatsKVBackend) -> None:
    s = _now_slot()
    got = await _same_as_memory(kv, [
        ("a", claim(s, "a")),
        ("wait", sleep(LEASE_MS / 1000 + 0.6)),
        ("r", renew("a")),
        ("b", claim(s, "b")),
    ])
    assert got[2] is None
    assert got[3][0] is ClaimOutcome.WON


async def test_tokens_increase_on_every_claim_and_stay_on_renew(kv: NatsKVBackend) -> None:
    s = _now_slot()
    first = await kv.claim(_req(s, "a"))
    assert first.lease is not None
    renewed = await kv.renew(first.lease, LEASE_MS)
    assert renewed is not None
    assert renewed.token == first.lease.token
    assert renewed.expires_at >= first.lease.expires_at
    await kv.release(first.lease, ReleaseOutcome.HANDOVER)
    second = await kv.claim(_req(s, "b"))
    await kv.release(second.lease, ReleaseOutcome.DONE)  # type: ignore[arg-type]
    third = await kv.claim(_req(s + 1000, "c"))
    assert second.lease is not None
    assert third.lease is not None
    assert first.lease.token < second.lease.token < third.lease.token


async def test_a_slot_in_the_stores_future_is_early(kv: NatsKVBackend) -> None:
    far = _now_slot() + 60_000
    early = await kv.claim(_req(far, "a"))
    assert early.outcome is ClaimOutcome.EARLY
    assert early.now is not None
    assert far - early.now > 2000
    assert (await kv.claim(_req(_now_slot(), "b"))).won  # nothing was left behind


async def test_the_lease_length_is_fixed_per_bucket(url: str, bucket: str, kv: NatsKVBackend) -> None:
    with pytest.raises(ConfigError, match="fixed lease of 1000 ms"):
        await kv.claim(ClaimRequest("ns", "job", _now_slot(), "a", lease_ms=30_000))
    with pytest.raises(ConfigError, match="allow"):
        await kv.claim(_req(_now_slot(), "a", overlap=Overlap.ALLOW))
    other = NatsKVBackend(url, bucket=bucket, lease="5s")
    with pytest.raises(SchemaMismatch, match="TTL 1000 ms"):
        await other.open()
    await other.close()


async def test_a_bucket_call_that_times_out_at_open_is_tried_again(
    bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A cluster placing the replicated buckets of replicas started together can answer later than
    # one call's timeout: the held calls here are answered after the first has timed out.
    async with FaultProxy("127.0.0.1", 4222) as proxy:
        nc = await nats.connect(proxy.url(URL))
        try:
            kv = NatsKVBackend(nc, bucket=bucket, lease=f"{LEASE_MS}ms", timeout="0.5s")
            await proxy.partition()

            async def heal_later() -> None:
                await asyncio.sleep(0.8)
                await proxy.heal()

            healing = asyncio.create_task(heal_later())
            began = time.monotonic()
            with caplog.at_level(logging.WARNING, "anarchon.nats"):
                await asyncio.wait_for(kv.open(), 10)
            await healing
            assert time.monotonic() - began >= 0.5
            assert f"stream 'KV_{bucket}'" in caplog.text and "trying again (2 more)" in caplog.text
            assert (await kv.claim(_req(_now_slot(), "a"))).won
            await kv.close()
        finally:
            await nc.close()


async def test_a_bucket_another_replica_creates_before_ours_is_taken_as_found(
    url: str, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Replicas started at once: this one looks the bucket up and finds none, another creates it (its
    # settings differ in a way that does not matter), and the server refuses this one's create.
    other = await nats.connect(url)
    backend = NatsKVBackend(url, bucket=bucket, lease="5s")
    real = backend._jetstream
    looked_up: list[str] = []

    def jetstream() -> Any:
        js = real()

        async def stream_info(name: str, *args: Any, **kwargs: Any) -> Any:
            if name not in looked_up:
                looked_up.append(name)
                await other.jetstream().add_stream(nats.js.api.StreamConfig(
                    name=name, subjects=[f"$KV.{name.removeprefix('KV_')}.>"], max_msgs_per_subject=1,
                    max_age=5.0 if name == f"KV_{bucket}" else None, description="another replica's",
                ))
                raise nats.js.errors.NotFoundError
            return await type(js).stream_info(js, name, *args, **kwargs)

        js.stream_info = stream_info  # type: ignore[method-assign]
        return js

    monkeypatch.setattr(backend, "_jetstream", jetstream)
    try:
        await backend.open()
        assert looked_up == [f"KV_{bucket}", f"KV_{bucket}_state"]
        won = await backend.claim(ClaimRequest("ns", "j", _now_slot(), "i1", lease_ms=5000))
        assert won.won
    finally:
        await backend.close()
        await other.close()


async def test_32_connections_race_for_claims_and_takeovers(url: str, bucket: str) -> None:
    backends = [NatsKVBackend(url, bucket=bucket, lease="5s") for _ in range(32)]
    await asyncio.gather(*(b.open() for b in backends))
    try:
        s = _now_slot()
        jobs = [f"race{i}" for i in range(3)]

        async def race(job: str, slot: int) -> list[ClaimResult]:
            return list(await asyncio.gather(*(
                b.claim(ClaimRequest("ns", job, slot, f"i{n}", lease_ms=5000)) for n, b in enumerate(backends)
            )))

        for job in jobs:
            results = await race(job, s)
            winners = [r for r in results if r.won]
            assert len(winners) == 1, [r.outcome for r in results]
            assert all(r.outcome is ClaimOutcome.TAKEN for r in results if not r.won)
            lease = winners[0].lease
            assert lease is not None
            assert await backends[0].release(lease, ReleaseOutcome.HANDOVER)
            again = await race(job, s)  # every instance races for the handover at once
            takeovers = [r for r in again if r.won]
            assert len(takeovers) == 1, [r.outcome for r in again]
            assert takeovers[0].attempt == 2
    finally:
        await asyncio.gather(*(b.close() for b in backends))


def test_registered_for_nats_kv_urls(url: str, bucket: str) -> None:
    kv_url = url.replace("nats://", "nats-kv://", 1) + f"?bucket={bucket}&lease=2s"
    scheduler = Scheduler.from_url(kv_url, lease="2s", heartbeat="0.5s")
    assert isinstance(scheduler.backend, NatsKVBackend)
    assert scheduler.backend.lease_ms == 2000
    assert scheduler.leases


@pytest.mark.slow
def test_three_process_cluster_with_kill_takeover(url: str, bucket: str, tmp_path: Path) -> None:
    kv_url = url.replace("nats://", "nats-kv://", 1) + f"?bucket={bucket}&lease=2s"
    with Cluster(kv_url, tmp_path, replicas=3, lease="2s", heartbeat="0.5s", tick_every="1s",
                 long_every="6s", long_run="3s") as c:
        since = int(time.time() * 1000) + 1000
        ev = c.wait_for(
            lambda e: e.event == "start" and e.job == "long" and e.slot > max(since, c.ready_ms), timeout=20
        )
        c.stop(ev.pid)  # graceful: handover, attempt 2 elsewhere
        ev2 = c.wait_for(lambda e: e.event == "start" and e.job == "long" and e.slot == ev.slot
                         and e.attempt == 2, timeout=10)
        assert ev2.pid != ev.pid
        c.kill(ev2.pid)  # crash: the lease ages out under the bucket TTL, attempt 3 elsewhere
        ev3 = c.wait_for(lambda e: e.event == "start" and e.job == "long" and e.slot == ev.slot
                         and e.attempt == 3, timeout=10)
        assert ev3.pid not in (ev.pid, ev2.pid)
        until = int(time.time() * 1000) - 1500
        c.assert_one_winner()
        # A tick won by a replica that then died is taken over after its lease: none is missed.
        assert c.missed("tick", since, until) == [], c.output()


def test_history_is_refused_and_off_by_default(url: str, bucket: str) -> None:
    backend = NatsKVBackend(url, bucket=bucket, lease="5s")
    assert Scheduler(backend, lease="5s", heartbeat="1s").history == 0, "nothing is recorded by default"
    assert Scheduler(backend, lease="5s", heartbeat="1s", history=0).history == 0
    with pytest.raises(ConfigError, match=r"'history' needs .*NatsKVBackend.*history=0"):
        Scheduler(backend, lease="5s", heartbeat="1s", history=5)


async def test_a_large_batch_of_wins_is_announced_in_several_messages(url: str, bucket: str,
                                                                       kv: NatsKVBackend) -> None:
    listener = NatsKVBackend(url, bucket=bucket, lease=f"{LEASE_MS}ms")
    await listener.open()
    heard: list[tuple[str, list[tuple[str, int]]]] = []
    names = [f"{i:03d}-" + "é" * 195 for i in range(400)]  # about 80,000 characters of names
    all_heard = asyncio.Event()

    def hear(owner: str, wins: Sequence[tuple[str, int]]) -> None:
        heard.append((owner, list(wins)))
        if sum(len(w) for _, w in heard) >= len(names):
            all_heard.set()

    try:
        await listener.subscribe_wins("ns", hear)
        await listener.subscribe_wins("other", lambda owner, wins: heard.append(("other", list(wins))))
        slot = _now_slot()
        results = await kv.claim_many([_req(slot, "a", job) for job in names])
        assert all(r.outcome is ClaimOutcome.WON for r in results)
        again = await kv.claim_many([_req(slot, "a", job) for job in names[:3]])
        assert all(r.reissued for r in again)  # its own lease answered again: not a new win
        async with asyncio.timeout(5):
            await all_heard.wait()
        await asyncio.sleep(0.2)
        assert len(heard) >= 2, "more than 60,000 characters go in more than one message"
        assert {owner for owner, _ in heard} == {"a"}
        assert sorted(win for _, wins in heard for win in wins) == [(job, slot) for job in names]
    finally:
        await listener.close()


async def test_a_malformed_wins_message_is_ignored(url: str, bucket: str, kv: NatsKVBackend,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    heard: list[tuple[str, list[tuple[str, int]]]] = []
    any_heard = asyncio.Event()

    def hear(owner: str, wins: Sequence[tuple[str, int]]) -> None:
        heard.append((owner, list(wins)))
        any_heard.set()

    await kv.subscribe_wins("ns", hear)
    nc = await nats.connect(url)
    try:
        await nc.publish(f"_anarchon.KV_{bucket}.won.ns", b"someone\nnot-a-slot\tjob")
        await nc.flush()
        slot = _now_slot()
        await kv.claim(_req(slot, "a"))
        async with asyncio.timeout(5):
            await any_heard.wait()
    finally:
        await nc.close()
    assert heard == [("a", [("job", slot)])]
    assert "ignored a malformed wins message" in caplog.text
