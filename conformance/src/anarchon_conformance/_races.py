"""Races: K independent clients, each on its own connection, claim the same (job, slot)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anarchon.backends import Capability, ClaimOutcome, ClaimResult, Lease, ReleaseOutcome

from ._kit import LONG_LEASE_MS, Kit, lease_for, past_slot
from ._support import BackendPool, request

__all__ = ["MAX_CLIENTS", "TestExactCount", "TestRaces"]

MAX_CLIENTS = 32
"""The most clients that race at once, each on its own connection."""

RACE_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=False,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.differing_executors,
    ],  # one class, imported by many modules
)


def _tier(capability: str) -> list[Any]:
    return [pytest.mark.anarchon_tier(capability), pytest.mark.usefixtures("_anarchon_tier_gate")]


async def _after(yields: int, delay_us: int) -> None:
    """The schedule hypothesis chose for one client: event-loop yields, then a real pause."""
    for _ in range(yields):
        await asyncio.sleep(0)
    if delay_us:
        await asyncio.sleep(delay_us / 1_000_000)


def _schedule(data: st.DataObject, k: int) -> tuple[list[int], list[int], list[int]]:
    order = data.draw(st.permutations(range(k)), label="start order")
    yields = data.draw(st.lists(st.integers(0, 4), min_size=k, max_size=k), label="yields")
    delays = data.draw(
        st.lists(st.sampled_from([0, 0, 0, 100, 1000]), min_size=k, max_size=k), label="delay_us"
    )
    return list(order), yields, delays


def _one_winner_each(wins: list[Lease]) -> None:
    counts = Counter((lease.job, lease.slot, lease.attempt) for lease in wins)
    twice = {key: n for key, n in counts.items() if n > 1}
    assert not twice, f"two winners for one claim: (job, slot, attempt) won more than once: {twice}"


class TestRaces:
    """At most one winner per (job, slot, attempt), under interleavings hypothesis chooses."""

    pytestmark = _tier("claim")

    @RACE_SETTINGS
    @given(data=st.data())
    def test_race_one_winner_per_slot(
        self,
        anarchon_runner: tuple[asyncio.Runner, BackendPool],
        anarchon_namespace: str,
        data: st.DataObject,
    ) -> None:
        runner, pool = anarchon_runner
        k = data.draw(st.integers(2, MAX_CLIENTS), label="clients")
        slots = data.draw(st.integers(1, 3), label="slots")
        order, yields, delays = _schedule(data, k)
        batched = data.draw(st.booleans(), label="claim_many")
        job = f"race-{uuid.uuid4().hex[:8]}"

        async def race() -> list[ClaimResult]:
            clients = await pool.clients(k)
            base = past_slot()

            async def one(i: int) -> list[ClaimResult]:
                await _after(yields[i], delays[i])
                client = clients[i]
                lease_ms = lease_for(client, LONG_LEASE_MS)
                reqs = [
                    request(anarchon_namespace, job, base + s * 60_000, f"c{i}", lease_ms=lease_ms)
                    for s in range(slots)
                ]
                if batched:
                    return list(await client.claim_many(reqs))
                return [await client.claim(r) for r in reqs]

            tasks = [asyncio.ensure_future(one(i)) for i in order]
            return [r for rs in await asyncio.gather(*tasks) for r in rs]

        results = runner.run(race())
        wins = [r.lease for r in results if r.outcome is ClaimOutcome.WON and r.lease is not None]
        _one_winner_each(wins)
        # Slot 0 is fresh: somebody must win it (a store where nobody wins is broken too).
        assert any(lease.slot == min(r.slot for r in results) for lease in wins), f"nobody won: {results!r}"

    @RACE_SETTINGS
    @given(data=st.data())
    def test_race_takeovers_one_winner_per_attempt(
        self,
        anarchon_runner: tuple[asyncio.Runner, BackendPool],
        anarchon_namespace: str,
        data: st.DataObject,
    ) -> None:
        runner, pool = anarchon_runner
        k = data.draw(st.integers(2, 16), label="clients")
        max_attempts = data.draw(st.integers(1, 4), label="max_attempts")
        rounds = data.draw(
            st.lists(st.sampled_from(["handover", "handover", "hold", "done"]), min_size=1, max_size=5),
            label="winner then does",
        )
        job = f"takeover-{uuid.uuid4().hex[:8]}"
        slot = past_slot()
        wins: list[Lease] = []

        async def play() -> None:
            clients = await pool.clients(k)
            if Capability.LEASE not in clients[0].capabilities:
                return
            ended = False
            # After hypothesis's rounds, hand over until the attempts run out: every example ends
            # by checking that max_attempts holds.
            plan = rounds + ["handover"] * (max_attempts + 1 - len(rounds))
            for then in plan:
                order, yields, delays = _schedule(data, k)

                async def one(i: int, yields: list[int] = yields, delays: list[int] = delays) -> ClaimResult:
                    await _after(yields[i], delays[i])
                    result: ClaimResult = await clients[i].claim(
                        request(
                            anarchon_namespace,
                            job,
                            slot,
                            f"c{i}",
                            lease_ms=lease_for(clients[i], LONG_LEASE_MS),
                            max_attempts=max_attempts,
                        )
                    )
                    return result

                results = await asyncio.gather(*(one(i) for i in order))
                won = [r.lease for r in results if r.outcome is ClaimOutcome.WON and r.lease is not None]
                wins.extend(won)
                _one_winner_each(wins)
                attempt_before = len(wins) - len(won)
                if ended or attempt_before >= max_attempts:
                    assert not won, f"a winner after the slot ended or ran out of attempts: {won}"
                    continue
                assert len(won) == 1, f"round {then!r}: expected exactly one winner, got {results!r}"
                assert won[0].attempt == len(wins), f"attempt {won[0].attempt}, expected {len(wins)}"
                winner = won[0]
                if then == "handover":
                    assert await clients[int(winner.owner[1:])].release(winner, ReleaseOutcome.HANDOVER)
                elif then == "done":
                    assert await clients[int(winner.owner[1:])].release(winner, ReleaseOutcome.DONE)
                    ended = True
                else:
                    return  # the winner holds its lease: every later claim is TAKEN; nothing more to race

        runner.run(play())
        tokens = [lease.token for lease in wins]
        assert tokens == sorted(set(tokens)), f"tokens must increase with each takeover: {tokens}"

    @pytest.mark.asyncio
    async def test_race_32_clients_fresh_connections(self, anarchon_kit: Kit) -> None:
        clients = [anarchon_kit.backend, *[await anarchon_kit.client() for _ in range(MAX_CLIENTS - 1)]]
        results = await asyncio.gather(
            *(c.claim(anarchon_kit.req("job", f"c{i}")) for i, c in enumerate(clients))
        )
        assert [r.outcome for r in results].count(ClaimOutcome.WON) == 1, results


class TestExactCount:
    """ShedLock's FuzzTester: workers bump an unguarded counter only while holding a won claim."""

    pytestmark: ClassVar[list[Any]] = [*_tier("claim"), pytest.mark.asyncio]

    async def test_exact_count_fuzz(self, anarchon_kit: Kit, anarchon_claims: int) -> None:
        workers = min(MAX_CLIENTS, 8, anarchon_claims)
        clients = [anarchon_kit.backend, *[await anarchon_kit.client() for _ in range(workers - 1)]]
        leases = Capability.LEASE in anarchon_kit.capabilities
        slots = max(1, anarchon_claims // workers)
        first = anarchon_kit.slot - slots  # one slot per millisecond, all in the past
        # A lease excludes every other run of the job (one record per job, overlap skip); a claim-only
        # backend excludes other runs of the same slot only. So the counter is per job or per slot.
        counters: Counter[int] = Counter()
        wins: list[Lease] = []
        lost: list[Lease] = []
        expired: list[Lease] = []
        lease_s = anarchon_kit.long_lease_ms / 1000
        loop = asyncio.get_running_loop()

        async def worker(i: int) -> None:
            client = clients[i]
            for s in range(slots):
                sent = loop.time()
                result = await client.claim(anarchon_kit.req("fuzz", f"w{i}", first + s))
                if result.outcome is not ClaimOutcome.WON:
                    await asyncio.sleep(0)
                    continue
                lease = result.lease
                wins.append(lease)
                key = 0 if leases else lease.slot
                seen = counters[key]  # an unguarded read-modify-write: only the lease keeps it exact
                await asyncio.sleep(0)
                if leases:
                    # A renewal sent a whole lease after the claim was sent may find the lease ended
                    # (a short fixed lease on a loaded host): that worker does not run, and proves
                    # nothing. Refused sooner, the lease was taken while fresh: two winners.
                    late = loop.time() - sent >= lease_s
                    if await client.renew(lease, anarchon_kit.long_lease_ms) is None:
                        (expired if late else lost).append(lease)
                        continue
                else:
                    await asyncio.sleep(0)
                counters[key] = seen + 1
                if leases:
                    await client.release(lease, ReleaseOutcome.DONE)

        await asyncio.gather(*(worker(i) for i in range(workers)))
        # The fault first: a lease lost at once, or a lost update, is what two winners look like.
        _one_winner_each(wins)
        assert not lost, (
            f"two winners for one claim: {len(lost)} fresh lease(s) were lost at once, so another worker "
            f"held the job at the same time (first: {lost[:1]!r})"
        )
        assert wins, "no worker ever won a claim"
        assert len(expired) < len(wins), f"every lease ran out before its renewal ({len(wins)} won)"
        total = sum(counters.values())
        assert total == len(wins) - len(expired), (
            f"two winners for one claim: runs overlapped and lost updates (the counter reached {total}, "
            f"but {len(wins)} claims were won and {len(expired)} of those ran out before their renewal)"
        )
