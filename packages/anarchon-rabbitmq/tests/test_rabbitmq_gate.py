"""RabbitMQBackend against the real broker: what the conformance kit's claim tier does not cover.

The kit (test_conformance_rabbitmq.py) checks one winner per slot, jobs, namespaces, odd names and
races; here: queue names, the gate queue's lifetime (horizon), URL options, the channel pool, a
dropped connection, a missing broker and a process cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aio_pika
import pytest

from anarchon import JobContext, Scheduler, SchemaMismatch
from anarchon.backends import ClaimOutcome, ClaimRequest
from anarchon.testing import (
    check_lease_only_options_refused,
    check_start_fails_clearly,
    claim_race,
    require_service,
    unused_port,
)
from anarchon_rabbitmq import RabbitMQBackend, encode_token
from anarchon_testkit.cluster import check_every_slot_once

URL = os.environ.get("ANARCHON_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")

pytestmark = pytest.mark.services


@pytest.fixture
def url() -> str:
    require_service("RabbitMQ", URL, 5672)
    return URL


@pytest.fixture
async def prefix(url: str) -> AsyncIterator[str]:
    """A unique prefix; the exchange its backends announce wins on is deleted afterwards."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    with contextlib.suppress(Exception):
        connection = await aio_pika.connect(url)
        async with connection:
            await (await connection.channel()).exchange_delete(f"{name}.won")


@pytest.fixture
async def backend(url: str, prefix: str) -> AsyncIterator[RabbitMQBackend]:
    b = RabbitMQBackend(url, prefix=prefix, horizon="30s")
    await b.open()
    yield b
    await b.close()


def _req(job: str, slot: int, owner: str, namespace: str = "ns") -> ClaimRequest:
    return ClaimRequest(namespace, job, slot, owner)


async def test_odd_names_get_valid_distinct_queues(backend: RabbitMQBackend) -> None:
    slot = 1_800_000_000_000
    odd = ["with.dots", "with space", "ünïcødé", "x" * 300, "a:b", "amq.gen", ""]
    names = {backend.queue_name("ns", job, slot) for job in odd}
    assert len(names) == len(odd)
    assert all(len(n.encode()) <= 255 for n in names)
    for job in odd:
        assert (await backend.claim(_req(job, slot, "a"))).won, job
        assert (await backend.claim(_req(job, slot, "b"))).outcome is ClaimOutcome.TAKEN, job
    assert encode_token("plain-name_1") == "plain-name_1"
    assert encode_token("with.dots").startswith(":")


async def test_horizon_is_the_queue_expiry(url: str, prefix: str) -> None:
    backend = RabbitMQBackend(url, prefix=prefix, horizon="2m")
    assert backend.horizon_ms == 120_000
    from_url = RabbitMQBackend.from_url(url.rstrip("/") + f"/?prefix={prefix}&horizon=1m")
    assert from_url.horizon_ms == 60_000
    assert from_url.prefix == prefix
    assert Scheduler.from_url(url + f"?prefix={prefix}").backend.horizon_ms == 300_000


async def test_a_gate_forgets_after_its_horizon(url: str, prefix: str) -> None:
    backend = RabbitMQBackend(url, prefix=prefix, horizon="1s")
    await backend.open()
    try:
        assert (await backend.claim(_req("job", 1000, "a"))).won
        assert (await backend.claim(_req("job", 1000, "b"))).outcome is ClaimOutcome.TAKEN
        # Past x-expires the broker deletes the queue, so a late publisher would win again: this is
        # why the scheduler never claims a slot older than half the horizon.
        deadline = time.monotonic() + 15
        while not (await backend.claim(_req("job", 1000, "c"))).won:
            assert time.monotonic() < deadline, "the gate queue never expired"
            await asyncio.sleep(1.2)
    finally:
        await backend.close()


async def test_claims_beyond_the_channel_pool_wait_and_have_one_winner(url: str, prefix: str) -> None:
    # The kit's race claims once per connection; here each connection has one channel and five
    # claims at once, so four of them wait for the pooled channel.
    backends = [RabbitMQBackend(url, prefix=prefix, horizon="30s", channels=1) for _ in range(32)]
    slots = [1_800_000_000_000 + i * 1000 for i in range(5)]
    for slot, results in (await claim_race(backends, slots)).items():
        outcomes = [r.outcome for r in results]
        won, taken = outcomes.count(ClaimOutcome.WON), outcomes.count(ClaimOutcome.TAKEN)
        assert (won, taken) == (1, 31), (slot, outcomes)


async def test_a_batch_is_pipelined_with_one_winner_per_slot(url: str, prefix: str) -> None:
    # Each backend sends its whole batch on one channel without waiting between frames: every slot
    # still has exactly one winner, and a second batch of the same slots wins nothing.
    backends = [RabbitMQBackend(url, prefix=prefix, horizon="30s", channels=1) for _ in range(3)]
    for b in backends:
        await b.open()
    try:
        slot = 1_800_000_000_000
        batches = await asyncio.gather(*(
            b.claim_many([_req(f"job{j}", slot, f"o{i}") for j in range(150)])
            for i, b in enumerate(backends)))
        for j in range(150):
            outcomes = [batch[j].outcome for batch in batches]
            assert outcomes.count(ClaimOutcome.WON) == 1, (j, outcomes)
            assert outcomes.count(ClaimOutcome.TAKEN) == 2, (j, outcomes)
        again = await backends[0].claim_many([_req(f"job{j}", slot, "late") for j in range(150)])
        assert {r.outcome for r in again} == {ClaimOutcome.TAKEN}
    finally:
        for b in backends:
            await b.close()


async def _queue_exists(url: str, name: str) -> bool:
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        try:
            await channel.declare_queue(name, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return False
        return True
    finally:
        await connection.close()


async def test_the_winner_declares_the_next_slots_gate_ahead(backend: RabbitMQBackend, url: str) -> None:
    # The scheduler sets stale_after to the next slot less 1 ms: the winner declares that slot's
    # gate queue after its claim, so the next claims find it there; it is an empty gate like any.
    slot, following = 1_800_000_000_000, 1_800_000_001_000
    reqs = [ClaimRequest("ns", f"job{j}", slot, "a", stale_after=following - 1) for j in range(3)]
    assert all(r.won for r in await backend.claim_many(reqs))
    nxt = [backend.queue_name("ns", f"job{j}", following) for j in range(3)]
    deadline = time.monotonic() + 10
    while not all([await _queue_exists(url, name) for name in nxt]):
        assert time.monotonic() < deadline, "the next slots' gate queues were never declared"
        await asyncio.sleep(0.1)
    # No request without stale_after declares anything ahead.
    assert (await backend.claim(_req("lone", slot, "a"))).won
    assert not await _queue_exists(url, backend.queue_name("ns", "lone", slot + 1))
    # The declared-ahead gate is open: exactly one winner for the next slot.
    results = [await backend.claim(_req("job0", following, owner)) for owner in "bcd"]
    assert [r.outcome for r in results] == [ClaimOutcome.WON, ClaimOutcome.TAKEN, ClaimOutcome.TAKEN]


async def test_a_different_horizon_in_a_batch_is_a_schema_mismatch(url: str, prefix: str) -> None:
    # The declaration is sent without waiting for its answer; a refused one still fails the batch
    # clearly, and the channel it closed is replaced for the next claim.
    first = RabbitMQBackend(url, prefix=prefix, horizon="30s")
    other = RabbitMQBackend(url, prefix=prefix, horizon="60s", channels=1)
    await first.open()
    await other.open()
    try:
        assert (await first.claim(_req("job", 1000, "a"))).won
        with pytest.raises(SchemaMismatch, match="horizon"):
            await other.claim_many([_req("job", 1000, "b"), _req("other", 1000, "b")])
        assert (await other.claim(_req("fresh", 2000, "b"))).won
    finally:
        await first.close()
        await other.close()


async def test_persistent_false_keeps_one_winner_and_refuses_a_mix(url: str, prefix: str) -> None:
    # persistent=False: transient gates (no restart survival), still one winner per slot; mixing
    # the two settings on one prefix is refused (the queue's `durable` flag differs).
    assert RabbitMQBackend.from_url(url + f"?prefix={prefix}&persistent=false").persistent is False
    assert RabbitMQBackend(url).persistent is True
    with pytest.raises(ValueError, match="persistent"):
        RabbitMQBackend.from_url(url + "?persistent=maybe")
    fast = [RabbitMQBackend(url, prefix=prefix, horizon="30s", persistent=False) for _ in range(3)]
    durable = RabbitMQBackend(url, prefix=prefix, horizon="30s", channels=1)
    for b in (*fast, durable):
        await b.open()
    try:
        slot = 1_800_000_000_000
        batches = await asyncio.gather(*(
            b.claim_many([_req(f"job{j}", slot, f"o{i}") for j in range(20)])
            for i, b in enumerate(fast)))
        for j in range(20):
            outcomes = [batch[j].outcome for batch in batches]
            assert outcomes.count(ClaimOutcome.WON) == 1, (j, outcomes)
        with pytest.raises(SchemaMismatch, match="persistent"):
            await durable.claim(_req("job0", slot, "late"))
    finally:
        for b in (*fast, durable):
            await b.close()


def test_lease_only_options_raise_type_error(url: str) -> None:
    check_lease_only_options_refused(RabbitMQBackend(url))


async def test_broker_down_at_start_is_a_clear_error() -> None:
    url = f"amqp://guest:s3cret@127.0.0.1:{unused_port()}/"
    await check_start_fails_clearly(RabbitMQBackend(url, timeout="3s"), "RabbitMQ", "s3cret")


def _close_connection(name: str) -> None:
    """Close one named client connection on the broker, as a network failure or admin would."""
    listing = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    pids = [line.split("\t", 1)[0] for line in listing.splitlines() if name in line]
    assert pids, f"connection {name!r} not found in:\n{listing}"
    for pid in pids:
        subprocess.run(["rabbitmqctl", "-q", "close_connection", pid, "anarchon test: dropped"],
                       capture_output=True, timeout=60, check=True)


@pytest.mark.slow
async def test_a_dropped_connection_reconnects_and_keeps_claiming(url: str, prefix: str) -> None:
    if shutil.which("rabbitmqctl") is None:
        reason = "rabbitmqctl is not installed: the broker's control tool is unreachable"
        if os.environ.get("ANARCHON_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason}; ANARCHON_REQUIRE_SERVICES=1 forbids skipping", pytrace=False)
        pytest.skip(reason)
    name = f"anarchon-test-{uuid.uuid4().hex[:8]}"
    conn = await aio_pika.connect_robust(url, reconnect_interval=0.3,
                                         client_properties={"connection_name": name})
    other = RabbitMQBackend(url, prefix=prefix, horizon="30s")
    starts: list[tuple[str, int]] = []

    def make(tag: str) -> Scheduler[RabbitMQBackend]:
        backend = RabbitMQBackend(conn, prefix=prefix, horizon="30s") if tag == "dropped" else other
        s = Scheduler(backend=backend, namespace=prefix)

        async def tick(ctx: JobContext) -> None:
            starts.append((tag, ctx.slot))

        s.every("tick", "1s", tick)
        return s

    dropped, steady = make("dropped"), make("steady")
    try:
        async with dropped, steady:
            await asyncio.sleep(2.5)
            begin = int(time.time() * 1000)
            await asyncio.to_thread(_close_connection, name)
            dropped_at = int(time.time() * 1000)
            await asyncio.sleep(4)
            end = int(time.time() * 1000) - 1000
            # The dropped instance reconnects by itself: its own claims succeed again.
            probe = await dropped.backend.claim(_req("probe", dropped_at, "dropped", prefix))
            assert probe.won
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
    slots = [slot for _, slot in starts]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {sorted(starts)}"
    expected = range(-(-begin // 1000) * 1000, end + 1, 1000)
    missed = [s for s in expected if s not in set(slots)]
    assert not missed, f"slots missed around the dropped connection: {missed}; started: {sorted(starts)}"


@pytest.mark.slow
def test_three_process_cluster_runs_every_slot_once(url: str, prefix: str, tmp_path: Path) -> None:
    check_every_slot_once(url + ("&" if "?" in url else "?") + f"prefix={prefix}&horizon=1m", tmp_path)


async def test_wins_are_announced_and_a_malformed_message_is_ignored(
    url: str, prefix: str, backend: RabbitMQBackend, caplog: pytest.LogCaptureFixture
) -> None:
    listener = RabbitMQBackend(url, prefix=prefix, horizon="30s")
    await listener.open()
    heard: list[tuple[str, list[tuple[str, int]]]] = []
    got = asyncio.Event()

    def hear(owner: str, wins: Sequence[tuple[str, int]]) -> None:
        heard.append((owner, list(wins)))
        got.set()

    try:
        await listener.subscribe_wins("ns", hear)
        connection = await aio_pika.connect(url)
        async with connection:
            channel = await connection.channel()
            exchange = await channel.get_exchange(f"{prefix}.won")
            await exchange.publish(aio_pika.Message(b"someone\nnot-a-slot\tjob"), routing_key="ns")
        slot = 1_800_000_000_000
        results = await backend.claim_many([_req(job, slot, "a") for job in ("one", "two")]
                                           + [_req("one", slot, "b")])
        assert [r.outcome for r in results] == [ClaimOutcome.WON, ClaimOutcome.WON, ClaimOutcome.TAKEN]
        async with asyncio.timeout(5):
            await got.wait()
        await asyncio.sleep(0.2)
    finally:
        await listener.close()
    assert heard == [("a", [("one", slot), ("two", slot)])]
    assert "ignored a malformed wins message" in caplog.text


async def test_an_exchange_declared_otherwise_is_used_as_it_is(url: str, prefix: str) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_exchange(f"{prefix}.won", aio_pika.ExchangeType.DIRECT, durable=True)
        try:
            winner, listener = (RabbitMQBackend(url, prefix=prefix, horizon="30s") for _ in range(2))
            await winner.open()
            await listener.open()
            got: asyncio.Queue[tuple[str, list[tuple[str, int]]]] = asyncio.Queue()
            await listener.subscribe_wins("ns", lambda owner, wins: got.put_nowait((owner, list(wins))))
            await winner.claim(_req("job", 1_800_000_000_000, "a"))
            async with asyncio.timeout(5):
                assert await got.get() == ("a", [("job", 1_800_000_000_000)])
            await winner.close()
            await listener.close()
        finally:
            await channel.exchange_delete(f"{prefix}.won")
