"""NatsBackend against the real server: what the conformance kit's claim tier does not cover.

The kit (test_conformance_nats.py) checks one winner per slot, jobs, namespaces, odd names and races;
here: the holder named on TAKEN, subject encoding, the duplicate window, stream settings, a dropped
connection, a missing server and a process cluster.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
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
from anarchon_nats import NatsBackend
from anarchon_nats._common import request_all
from anarchon_testkit.cluster import check_every_slot_once

URL = os.environ.get("ANARCHON_NATS_URL", "nats://127.0.0.1:4222")

pytestmark = pytest.mark.services


@pytest.fixture
def url() -> str:
    require_service("NATS", URL, 4222)
    return URL


@pytest.fixture
async def names(url: str) -> AsyncIterator[tuple[str, str]]:
    """A unique (stream, prefix), deleted afterwards."""
    tag = uuid.uuid4().hex[:10]
    stream, prefix = f"T{tag}", f"t{tag}"
    yield stream, prefix
    nc = await nats.connect(url)
    try:
        await nc.jetstream().delete_stream(stream)
    except Exception:
        pass
    await nc.close()


@pytest.fixture
async def backend(url: str, names: tuple[str, str]) -> AsyncIterator[NatsBackend]:
    b = NatsBackend(url, stream=names[0], prefix=names[1], duplicate_window="30s")
    await b.open()
    yield b
    await b.close()


def _req(job: str, slot: int, owner: str) -> ClaimRequest:
    return ClaimRequest("ns", job, slot, owner)


async def test_taken_names_the_holder(backend: NatsBackend) -> None:
    # The kit's claim tier accepts a TAKEN without a holder; NATS reads it from the slot's first message.
    slot = 1_800_000_000_000
    assert (await backend.claim(_req("job", slot, "a"))).won
    for owner in ("b", "a"):
        taken = await backend.claim(_req("job", slot, owner))
        assert (taken.outcome, taken.holder) == (ClaimOutcome.TAKEN, "a"), owner


async def test_a_batch_is_answered_claim_by_claim(backend: NatsBackend) -> None:
    # The batch is published at once: a slot claimed twice in it has one winner, the first publish,
    # and every other claim gets its own answer.
    slot = 1_800_000_000_000
    assert (await backend.claim(_req("old", slot, "z"))).won
    batch = [_req("j0", slot, "a"), _req("j1", slot, "a"), _req("j0", slot, "b"), _req("old", slot, "a")]
    results = await backend.claim_many(batch)
    assert [(r.job, r.outcome, r.holder) for r in results] == [
        ("j0", ClaimOutcome.WON, "a"), ("j1", ClaimOutcome.WON, "a"),
        ("j0", ClaimOutcome.TAKEN, "a"), ("old", ClaimOutcome.TAKEN, "z")]
    assert await backend.claim_many([]) == []


async def test_a_request_without_a_reply_times_out_alone(backend: NatsBackend) -> None:
    # One reply subscription serves every request: a request nobody answers fails on its own.
    results = await request_all(backend.client, [
        ("nobody.listens.here", b"", None),
        (f"$JS.API.STREAM.INFO.{backend.stream}", b"", None)], within=1.0)
    assert isinstance(results[0], nats.errors.NoRespondersError)
    assert not isinstance(results[1], Exception) and b'"config"' in results[1].data


async def test_odd_names_are_encoded(backend: NatsBackend) -> None:
    slot = 1_800_000_000_000
    odd = ["with.dots", "with space", "wild*card>", "a:b", "ünï", "x" * 300]
    for job in odd:
        assert (await backend.claim(_req(job, slot, "a"))).won, job
        assert (await backend.claim(_req(job, slot, "b"))).outcome is ClaimOutcome.TAKEN, job
    assert len({backend.msg_id("ns", j, slot) for j in odd}) == len(odd)


async def test_horizon_is_the_duplicate_window(url: str, names: tuple[str, str]) -> None:
    stream, prefix = names
    backend = NatsBackend.from_url(f"{url}?stream={stream}&prefix={prefix}&duplicate_window=1s")
    assert backend.horizon_ms == 1000
    await backend.open()
    try:
        assert (await backend.claim(_req("job", 1000, "a"))).won
        assert (await backend.claim(_req("job", 1000, "b"))).outcome is ClaimOutcome.TAKEN
        # Past the window the id is forgotten and a late publisher would win again: this is why the
        # scheduler never claims a slot older than half the horizon.
        await asyncio.sleep(1.5)
        assert (await backend.claim(_req("job", 1000, "c"))).won
    finally:
        await backend.close()


async def test_an_existing_stream_with_other_settings_is_named(url: str, names: tuple[str, str]) -> None:
    stream, prefix = names
    first = NatsBackend(url, stream=stream, prefix=prefix, duplicate_window="30s")
    await first.open()
    await first.close()
    again = NatsBackend(url, stream=stream, prefix=prefix, duplicate_window="30s")
    await again.open()
    await again.close()
    other = NatsBackend(url, stream=stream, prefix=f"{prefix}x", duplicate_window="1m")
    with pytest.raises(SchemaMismatch) as info:
        await other.open()
    await other.close()
    message = str(info.value)
    assert "duplicate_window=30.0s (want 60.0s)" in message
    assert f"{prefix}x.>" in message
    assert stream in message


async def test_32_connections_race_and_every_loser_names_the_winner(url: str, names: tuple[str, str]) -> None:
    backends = [NatsBackend(url, stream=names[0], prefix=names[1], duplicate_window="30s") for _ in range(32)]
    slots = [1_800_000_000_000 + i * 1000 for i in range(5)]
    for slot, results in (await claim_race(backends, slots)).items():
        winners = [r.holder for r in results if r.won]
        assert len(winners) == 1, (slot, [r.outcome for r in results])
        assert {r.holder for r in results if not r.won} == set(winners)


def test_lease_only_options_raise_type_error(url: str) -> None:
    check_lease_only_options_refused(NatsBackend(url))


async def test_server_down_at_start_is_a_clear_error() -> None:
    url = f"nats://user:s3cret@127.0.0.1:{unused_port()}"
    await check_start_fails_clearly(NatsBackend(url, timeout="2s"), "NATS", "s3cret")


@pytest.mark.slow
async def test_a_dropped_connection_reconnects_and_keeps_claiming(url: str, names: tuple[str, str]) -> None:
    stream, prefix = names
    starts: list[int] = []
    backend = NatsBackend(url, stream=stream, prefix=prefix, duplicate_window="30s")
    scheduler = Scheduler(backend=backend, namespace="drop")

    async def tick(ctx: JobContext) -> None:
        starts.append(ctx.slot)

    scheduler.every("tick", "1s", tick)
    async with scheduler:
        await asyncio.sleep(2.2)
        begin = int(time.time() * 1000)
        client = backend.client
        assert client is not None
        transport = client._transport
        assert transport is not None
        transport.close()  # the socket goes away under the client, as on a network failure
        await asyncio.sleep(4)
        end = int(time.time() * 1000) - 1000
        assert client.stats["reconnects"] >= 1
    assert len(starts) == len(set(starts)), f"a slot ran twice: {starts}"
    expected = range(-(-begin // 1000) * 1000, end + 1, 1000)
    missed = [s for s in expected if s not in set(starts)]
    assert not missed, f"slots missed around the dropped connection: {missed}; started: {starts}"


@pytest.mark.slow
def test_three_process_cluster_runs_every_slot_once(url: str, names: tuple[str, str], tmp_path: Path) -> None:
    stream, prefix = names
    check_every_slot_once(f"{url}?stream={stream}&prefix={prefix}&duplicate_window=1m", tmp_path)
