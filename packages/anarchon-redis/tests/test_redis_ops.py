"""Scripts, errors, pushed releases, reconnects, races and the stream strategies on the real server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

import pytest
import redis.asyncio
from redis.crc import key_slot

from anarchon import BackendError, BackendUnavailable
from anarchon.backends import (
    ERROR_LIMIT,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    Overlap,
    ReleaseOutcome,
    RunRecord,
)
from anarchon_redis import RedisBackend, RedisStreamBackend, ValkeyBackend, _lease

SECRET = "s3cret-pa55word"


async def _store_now(raw: redis.asyncio.Redis) -> int:
    sec, usec = await raw.time()
    return int(sec) * 1000 + int(usec) // 1000


async def test_open_loads_every_script_in_one_round_trip(redis_url: str, prefix: str,
                                                        raw: redis.asyncio.Redis) -> None:
    # Every replica opens its store twice (its own connection and its lease keeper's): PING and the
    # SCRIPT LOADs go out as one pipeline, not as a command per script one after another.
    backend = RedisBackend(redis_url, prefix=prefix)
    sent: list[object] = []
    single = backend.client.execute_command

    async def counted(*args: object, **kwargs: object) -> object:
        sent.append(args[0])
        return await single(*args, **kwargs)

    backend.client.execute_command = counted
    await backend.open()
    try:
        assert sent == []
        scripts = [v for v in vars(_lease).values() if isinstance(v, _lease.Script)]
        assert len(scripts) >= 12
        assert await raw.script_exists(*(s.sha for s in scripts)) == [True] * len(scripts)
    finally:
        await backend.close()


@pytest.mark.serial
async def test_noscript_is_reloaded_for_single_calls_and_pipelines(
    redis_url: str, prefix: str, raw: redis.asyncio.Redis
) -> None:
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        now = await _store_now(raw)
        await raw.script_flush()  # as after a restart or a failover
        results = await backend.claim_many([ClaimRequest("ns", f"j{i}", now, "A") for i in range(5)])
        assert [r.outcome for r in results] == [ClaimOutcome.WON] * 5
        await raw.script_flush()
        lease = results[0].lease
        assert lease is not None
        assert await backend.renew(lease, 10_000) is not None
        await raw.script_flush()
        renewed = await backend.renew_many([(r.lease, 10_000) for r in results if r.lease is not None])
        assert [r is not None for r in renewed] == [True] * 5
        await raw.script_flush()
        assert await backend.release(lease, ReleaseOutcome.DONE)
        await raw.script_flush()
        assert [s.job for s in await backend.jobs("ns")] == [f"j{i}" for i in range(5)]
    finally:
        await backend.close()


async def test_keys_are_hash_tagged_per_job(redis_url: str, prefix: str, raw: redis.asyncio.Redis) -> None:
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        now = await _store_now(raw)
        await backend.claim(ClaimRequest("ns:x", "reports:daily", now, "A"))
        keys = sorted(k.decode() if isinstance(k, bytes) else k for k in await raw.keys(f"*{prefix}*"))
        assert keys == [f"{{{prefix}:ns%3Ax:reports:daily}}", f"{{{prefix}:ns%3Ax}}:jobs"]
        slots = {key_slot(k.encode()) for k in (keys[0], keys[0] + ":others", keys[0] + ":stream")}
        assert len(slots) == 1
    finally:
        await backend.close()


async def test_wins_are_announced_with_exact_names_under_any_prefix_and_namespace(
    redis_url: str, prefix: str, raw: redis.asyncio.Redis
) -> None:
    """The claim script cuts each job's name out of its key by the key prefix's length in bytes:
    a prefix and a namespace beyond ASCII must not shift the cut."""
    backend = RedisBackend(redis_url, prefix=prefix + "-é")
    listener = RedisBackend(redis_url, prefix=prefix + "-é")
    await backend.open()
    await listener.open()
    try:
        heard: asyncio.Queue[tuple[str, list[tuple[str, int]]]] = asyncio.Queue()
        namespace = "ns:ü-😀"
        await listener.subscribe_wins(namespace, lambda owner, wins: heard.put_nowait((owner, list(wins))))
        now = await _store_now(raw)
        names = ["a", "ジョブ-😀", "x}y{z", "b:c"]
        await backend.claim_many([ClaimRequest(namespace, name, now, "A") for name in names])
        owner, wins = await asyncio.wait_for(heard.get(), 5)
        assert owner == "A"
        assert sorted(wins) == sorted((name, now) for name in names)
    finally:
        await listener.close()
        await backend.close()


async def test_a_batch_of_mixed_requests_is_judged_as_each_alone(
    redis_url: str, prefix: str, raw: redis.asyncio.Redis
) -> None:
    """The batch script gets each run of requests that share their arguments once: requests that
    differ from their neighbours in any one argument, and runs that cross the `BATCH` chunk edge,
    must each be claimed with their own arguments, and only the first owner's wins announced."""
    backend = RedisBackend(redis_url, prefix=prefix)
    alone = RedisBackend(redis_url, prefix=prefix + "-alone")
    listener = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    await alone.open()
    await listener.open()
    try:
        now = await _store_now(raw)
        # Held by B in both stores: under skip a newer slot is SKIPPED, under replace it is WON.
        for b in (backend, alone):
            await b.claim_many([ClaimRequest("ns", f"held{i}", now - 1000, "B", 60_000) for i in range(4)])
        # Runs of three, every other one plain: each other run differs from its neighbours in one argument.
        variants: list[dict[str, Any]] = [
            {"owner": "B"},
            {"lease_ms": 1234},
            {"fingerprint": "other"},
            {"max_attempts": 1},
            {"slot": now - 500},
            {"stale_after": now - 100_000},
            {"slot": now + 3_600_000},  # beyond max_skew: EARLY
            {"max_skew_ms": 7_200_000, "slot": now + 3_600_000},
        ]
        requests = []
        for i in range(_lease.BATCH + 20):
            k = i // 3 % (2 * len(variants))
            fields: dict[str, Any] = {"slot": now, "owner": "A"} | (variants[k // 2] if k % 2 else {})
            requests.append(ClaimRequest("ns", f"j{i}", **fields))
        requests += [ClaimRequest("ns", "held0", now, "A", overlap=Overlap.SKIP),
                     ClaimRequest("ns", "held1", now, "A", overlap=Overlap.REPLACE),
                     ClaimRequest("ns", "held2", now, "A", overlap=Overlap.SKIP),
                     ClaimRequest("ns", "held3", now, "A", overlap=Overlap.REPLACE)]
        heard: asyncio.Queue[tuple[str, list[tuple[str, int]]]] = asyncio.Queue()
        await listener.subscribe_wins("ns", lambda owner, wins: heard.put_nowait((owner, list(wins))))
        batched = await backend.claim_many(requests)
        single = [await alone.claim(r) for r in requests]

        def seen(results: Sequence[ClaimResult]) -> list[tuple[object, ...]]:
            return [(r.outcome, r.holder, r.attempt, r.fingerprint,
                     r.lease and r.lease.expires_at - (r.now or 0)) for r in results]

        assert seen(batched) == seen(single)
        # Claimed again, each answers with the fingerprint its first claim stored (a win is now its own
        # lease again, whose remaining time depends on when it was asked).
        again = await backend.claim_many(requests)
        alone_again = [await alone.claim(r) for r in requests]
        assert [x[:4] for x in seen(again)] == [x[:4] for x in seen(alone_again)]
        assert {r.fingerprint for r in again if r.outcome is ClaimOutcome.WON} >= {"", "other"}
        outcomes = {r.outcome for r in batched}
        assert {ClaimOutcome.WON, ClaimOutcome.STALE, ClaimOutcome.EARLY, ClaimOutcome.SKIPPED} <= outcomes
        assert {r.lease.expires_at - (r.now or 0) for r in batched if r.lease} == {30_000, 1234}
        announced: list[tuple[str, int]] = []
        owner = ""
        while len(announced) < sum(1 for r in batched if r.lease and r.lease.owner == "A"):
            owner, wins = await asyncio.wait_for(heard.get(), 5)
            assert owner == "A"
            announced += wins
        expected = [(r.job, r.slot) for r, b in zip(requests, batched, strict=True)
                    if r.owner == "A" and b.outcome is ClaimOutcome.WON]
        assert sorted(announced) == sorted(expected)
    finally:
        await listener.close()
        await alone.close()
        await backend.close()


async def test_password_never_in_messages_or_logs(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    host = redis_url.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
    # No such user on the server: AUTH fails. Port 1 refuses connections.
    for url in (f"redis://nobody-{SECRET[:3]}:{SECRET}@{host}/0", f"redis://user:{SECRET}@127.0.0.1:1/0",
                f"redis+stream://:{SECRET}@127.0.0.1:1/0"):
        backend = (RedisStreamBackend if "+stream" in url else RedisBackend)(url)
        assert SECRET not in repr(backend)
        assert SECRET not in backend.url
        with pytest.raises(BackendError) as info:
            await backend.open()
        assert SECRET not in str(info.value)
        assert SECRET not in repr(info.value)
        if ":1/" in url:
            assert isinstance(info.value, BackendUnavailable)
        await backend.close()
    with pytest.raises(ValueError, match="unsupported URL scheme") as bad:
        RedisBackend(f"http://:{SECRET}@localhost/")
    assert SECRET not in str(bad.value)
    assert SECRET not in caplog.text


@pytest.mark.serial
async def test_release_is_pushed_and_listener_survives_client_kill(
    redis_url: str, prefix: str, raw: redis.asyncio.Redis
) -> None:
    a, b = RedisBackend(redis_url, prefix=prefix), RedisBackend(redis_url, prefix=prefix)
    await a.open()
    await b.open()
    got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def on_release(job: str, slot: int) -> None:
        assert asyncio.get_running_loop() is loop
        got.put_nowait((job, slot))

    try:
        await b.subscribe("ns", on_release)
        await b.subscribe("other", lambda j, s: None)
        now = await _store_now(raw)
        won = await a.claim(ClaimRequest("ns", "job:with:colons", now, "A"))
        assert won.lease is not None
        assert await a.release(won.lease, ReleaseOutcome.HANDOVER)
        assert await asyncio.wait_for(got.get(), 2) == ("job:with:colons", now)
        # Drop every pub/sub connection: the listener reconnects and subscribes again.
        killed = await raw.client_kill_filter(_type="pubsub")
        assert int(killed) >= 1
        for _ in range(100):
            if any(b"subscribe" in c.get("cmd", "").encode() or c.get("sub", "0") != "0"
                   for c in await raw.client_list()):
                break
            await asyncio.sleep(0.05)
        again = await a.claim(ClaimRequest("ns", "job:with:colons", now, "B"))
        assert again.lease is not None
        assert again.lease.attempt == 2
        deadline = loop.time() + 5
        while True:
            assert await a.release(again.lease, ReleaseOutcome.HANDOVER) or loop.time() < deadline
            try:
                assert await asyncio.wait_for(got.get(), 0.5) == ("job:with:colons", now)
                break
            except TimeoutError:
                # Released before the listener was back: publish once more with a fresh run.
                nxt = await a.claim(ClaimRequest("ns", "job:with:colons", now + 1, "B"))
                assert nxt.lease is not None
                again = nxt
                now += 1
                assert loop.time() < deadline, "the listener did not come back after CLIENT KILL"
    finally:
        await a.close()
        await b.close()


async def test_commands_survive_client_kill(redis_url: str, prefix: str, raw: redis.asyncio.Redis) -> None:
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        now = await _store_now(raw)
        won = await backend.claim(ClaimRequest("ns", "j", now, "A", 5_000))
        assert won.lease is not None
        own = await backend.client.client_id()
        await raw.client_kill_filter(_id=own)
        renewed = None
        for _ in range(3):  # the client reconnects, at the latest on the next call
            try:
                renewed = await backend.renew(won.lease, 5_000)
                break
            except BackendUnavailable:
                await asyncio.sleep(0.1)
        assert renewed is not None
        assert (await backend.claim(ClaimRequest("ns", "j", now + 1000, "A"))).outcome is ClaimOutcome.SKIPPED
    finally:
        await backend.close()


async def test_existing_clients_and_decode_responses(redis_url: str, prefix: str) -> None:
    import valkey.asyncio

    for client in (redis.asyncio.Redis.from_url(redis_url, decode_responses=True),
                   valkey.asyncio.Valkey.from_url(redis_url.replace("redis", "valkey", 1))):
        backend = (ValkeyBackend if isinstance(client, valkey.asyncio.Valkey) else RedisBackend)(
            client, prefix=prefix
        )
        await backend.open()
        now = (await backend.claim(ClaimRequest("probe", "probe", 0, "x"))).now
        assert now is not None
        r = await backend.claim(ClaimRequest(f"ns-{type(client).__name__}", "j", now, "A",
                                             fingerprint="cron:* * * * *"))
        assert r.won
        state = await backend.inspect(f"ns-{type(client).__name__}", "j")
        assert state is not None
        assert (state.owner, state.fingerprint) == ("A", "cron:* * * * *")
        await backend.close()
        assert await client.ping()  # a client the user passed in stays open
        await client.aclose()
    with pytest.raises(TypeError, match="needs a URL"):
        RedisBackend(42)


async def test_32_connections_race_one_winner_per_slot(
    redis_url: str, prefix: str, raw: redis.asyncio.Redis
) -> None:
    backends = [RedisBackend(redis_url, prefix=prefix) for _ in range(32)]
    for b in backends:
        await b.open()
    try:
        base = await _store_now(raw) - 20_000
        for slot in range(base, base + 20 * 1000, 1000):
            results = await asyncio.gather(*(
                b.claim(ClaimRequest("race", "j", slot, f"i{i}", 30_000,
                                     overlap=(Overlap.SKIP, Overlap.REPLACE)[i % 2]))
                for i, b in enumerate(backends)
            ))
            winners = [r for r in results if r.won]
            assert len(winners) == 1, (slot, [r.outcome for r in results])
            allowed = {ClaimOutcome.TAKEN, ClaimOutcome.WON, ClaimOutcome.SKIPPED}
            assert {r.outcome for r in results} <= allowed
            assert winners[0].lease is not None
    finally:
        for b in backends:
            await b.close()


@pytest.mark.parametrize("strategy", ["stream-id", "script"])
async def test_stream_32_connections_race(redis_url: str, prefix: str, strategy: str) -> None:
    url = redis_url.replace("redis", "redis+stream", 1)
    backends = [RedisStreamBackend(url, strategy=strategy, prefix=prefix) for _ in range(32)]  # type: ignore[arg-type]
    for b in backends:
        await b.open()
    try:
        for slot in range(1000, 21_000, 1000):
            results = await asyncio.gather(*(
                b.claim_many([ClaimRequest("race", "j", slot, f"i{i}"),
                              ClaimRequest("race", "k", slot, f"i{i}")])
                for i, b in enumerate(backends)
            ))
            for col in range(2):
                winners = [r[col] for r in results if r[col].won]
                assert len(winners) == 1
                assert {r[col].holder for r in results} == {winners[0].holder}
    finally:
        for b in backends:
            await b.close()


@pytest.mark.parametrize("strategy", ["stream-id", "script"])
async def test_stream_strategies(
    redis_url: str, prefix: str, raw: redis.asyncio.Redis, strategy: str
) -> None:
    backend = RedisStreamBackend.from_url(
        redis_url.replace("redis", "redis+stream", 1) + f"?strategy={strategy}&maxlen=5&prefix={prefix}"
    )
    assert (backend.strategy, backend.maxlen, backend.horizon_ms) == (strategy, 5, None)
    await backend.open()
    try:
        first = await backend.claim(ClaimRequest("ns", "j", 5000, "A"))
        assert first.lease is not None
        assert first.lease.attempt == 1
        again = await backend.claim(ClaimRequest("ns", "j", 5000, "B"))
        assert (again.outcome, again.holder) == (ClaimOutcome.TAKEN, "A")
        older = await backend.claim(ClaimRequest("ns", "j", 4000, "B"))  # below the stream's top
        assert (older.outcome, older.holder) == (ClaimOutcome.TAKEN, None)
        for slot in range(6000, 600_000, 1000):
            await backend.claim(ClaimRequest("ns", "j", slot, "A"))
        key = f"{{{prefix}:ns:j}}:stream"
        assert await raw.xlen(key) < 200  # trimmed with MAXLEN ~
        assert (await backend.claim(ClaimRequest("ns", "j", 5000, "C"))).outcome is ClaimOutcome.TAKEN
    finally:
        await backend.close()


async def test_idmp_refused_on_old_server_and_on_valkey(
    redis_server: str, redis_url: str, prefix: str, raw: redis.asyncio.Redis
) -> None:
    info = await raw.info("server")
    url = redis_url.replace("redis", "redis+stream", 1)
    backend = RedisStreamBackend(url, strategy="idmp", prefix=prefix)
    assert backend.horizon_ms == 3_600_000
    if redis_server == "valkey":
        # Valkey reports redis_version 7.2.4 whatever its own version: the message names Valkey's.
        assert info["server_name"] == "valkey"
        runs = rf"Valkey {re.escape(str(info['valkey_version']))}"
    else:
        version = str(info["redis_version"])
        if tuple(int(p) for p in version.split(".")[:2]) >= (8, 6):
            pytest.skip(f"the server runs Redis {version}, which supports IDMP")
        runs = rf"Redis {re.escape(version)}"
    with pytest.raises(BackendError, match=rf"needs Redis >= 8\.6.*runs {runs}:"):
        await backend.open()
    await backend.close()
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        RedisStreamBackend(redis_url, strategy="nope")  # type: ignore[arg-type]


@pytest.mark.serial  # counts every client of the shared server
async def test_a_burst_of_releases_waits_for_pooled_connections(
    redis_url: str, prefix: str, raw: redis.asyncio.Redis
) -> None:
    """Thousands of runs can end in the same millisecond: their releases queue for the pool's
    connections instead of opening one connection each (and meeting the server's maxclients)."""
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        now = await _store_now(raw)
        won = await backend.claim_many([ClaimRequest("ns", f"burst{i}", now, "A") for i in range(1000)])
        leases = [r.lease for r in won if r.lease is not None]
        assert len(leases) == 1000
        before = len(await raw.client_list())
        released = await asyncio.gather(*(backend.release(lease, ReleaseOutcome.DONE) for lease in leases))
        assert all(released)
        assert len(await raw.client_list()) - before <= 64
    finally:
        await backend.close()


async def test_history_stores_each_run_as_sorted_json(redis_url: str, prefix: str,
                                                      raw: redis.asyncio.Redis) -> None:
    # The run's JSON is written field by field: it must be exactly what the JSON encoder gives (keys
    # sorted, text escaped, the error cut), whatever the text holds, and read back as the same run.
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        texts = ['q"uote \\ back', "new\nline\ttab \x01", "ünï—cödé ☃ 🎉", "</script>", ""]
        runs = [RunRecord(f"job{i}", 1_764_000_000_000 + i, 1 + i, 10**12 + i, f"host:{text}", "failed",
                          1_764_000_000_100, 37 * i, text + "e" * (ERROR_LIMIT if i == 0 else 0))
                for i, text in enumerate(texts)]
        await backend.record_runs("ns", runs, keep=10)
        for run in runs:
            members = await raw.zrange(backend.keys.history("ns", run.job), 0, -1)
            fields = dataclasses.asdict(run) | {"error": run.error[:ERROR_LIMIT]}
            assert members == [json.dumps(fields, sort_keys=True, ensure_ascii=False).encode()]
            stored = dataclasses.replace(run, error=fields["error"])
            assert await backend.history("ns", run.job, 5) == [stored]
    finally:
        await backend.close()
