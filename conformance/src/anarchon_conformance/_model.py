"""Model-based testing: the backend and `MemoryBackend` receive the same steps and must agree."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from anarchon.backends import (
    Capability,
    ClaimOutcome,
    ClaimResult,
    Lease,
    MemoryBackend,
    MemoryStore,
    Overlap,
    ReleaseOutcome,
)

from ._kit import LONG_LEASE_MS, allow_refusal, expiry_slack_ms, lease_for, past_slot
from ._support import BackendPool, StoreClock, request

__all__ = ["MODEL_LEASE_MS", "TestModel"]

MODEL_LEASE_MS = 250
"""The short lease of the model test, in real time on both stores."""
MARGIN_S = 0.08
"""No step runs within this much of a short lease's expiry, where two clocks could disagree."""
CLIENTS = 3


@dataclass
class _Held:
    real: Lease
    model: Lease


@dataclass
class _World:
    runner: asyncio.Runner
    clients: list[Any]
    namespace: str
    overlaps: list[Overlap] = field(default_factory=lambda: list(Overlap))
    """The overlap policies to send: all, but `allow` where the backend refuses it (ConfigError)."""
    deadlines: list[tuple[float, float]] = field(default_factory=list)
    """Monotonic windows in which a granted lease expires, by the store's clock (its slack included:
    a store may end a lease up to `expiry_slack_ms` late, never early)."""
    slack_s: float = 0.0
    """The backend's `expiry_slack_ms`, in seconds."""
    seen: Counter[str] = field(default_factory=Counter)
    """What the run drove the store through: outcomes, and takeovers by their cause."""
    toured: bool = False

    def lease_ms(self, short: bool) -> int:
        """The short or long lease (the backend's fixed lease, if it declares one)."""
        return lease_for(self.clients[0], MODEL_LEASE_MS if short else LONG_LEASE_MS)


def _machine(world: _World) -> type[RuleBasedStateMachine]:
    run = world.runner.run

    class ModelComparison(RuleBasedStateMachine):
        """Claim, renew, release and lease expiry, sent to the backend and to the reference model."""

        def __init__(self) -> None:
            super().__init__()
            self.model = MemoryBackend(MemoryStore(StoreClock()))
            self.job = f"model-{uuid.uuid4().hex[:8]}"
            self.slot = past_slot()
            self.held: list[_Held] = []
            self.real_tokens: list[int] = []
            self.newest = 0
            """The newest slot (as a step of a minute from `self.slot`) the model has seen won."""
            world.deadlines.clear()

        def _settle(self) -> None:
            """Wait out any lease whose expiry is too close to call, so both stores agree on it: from just
            before its length to just after its length and the store's slack. Before that window the lease
            must hold (never early); after it, it must have ended (never more than the slack late)."""
            now = time.monotonic()
            for low, high in world.deadlines:
                if low - MARGIN_S < now < high + MARGIN_S:
                    time.sleep(high + MARGIN_S - now)
                    now = time.monotonic()
            world.deadlines[:] = [(low, high) for low, high in world.deadlines if high + MARGIN_S > now]

        def _granted(self, before: float, lease_ms: int) -> None:
            after = time.monotonic()
            world.deadlines.append((before + lease_ms / 1000, after + lease_ms / 1000 + world.slack_s))

        @initialize()
        def tour(self) -> None:
            """Once per run, in this order: a win, a takeover after a handover, one after an expiry,
            exhaustion, and a newer slot, so that every run drives every kind of transition."""
            if world.toured:
                return
            world.toured = True
            k = self.newest
            self._claim(0, k, True, 3, Overlap.SKIP)
            self.release_one(self.held[-1], ReleaseOutcome.HANDOVER)
            self._claim(1, k, True, 3, Overlap.SKIP)
            self._wait_out(float("inf"))  # however long the lease (a store's fixed lease may be long)
            self._claim(2, k, False, 3, Overlap.SKIP)
            self.release_one(self.held[-1], ReleaseOutcome.HANDOVER)
            self._claim(0, k, False, 3, Overlap.SKIP)
            self._claim(1, k + 1, True, 3, Overlap.SKIP)

        @rule(
            client=st.integers(0, CLIENTS - 1),
            which=st.sampled_from(["newest", "newest", "next", "older"]),
            short=st.booleans(),
            max_attempts=st.integers(1, 3),
            overlap=st.sampled_from(world.overlaps),
        )
        def claim(self, client: int, which: str, short: bool, max_attempts: int, overlap: Overlap) -> None:
            """Mostly the newest slot or the next one: an older slot is only ever STALE (or kept)."""
            k = {"newest": self.newest, "next": self.newest + 1, "older": max(0, self.newest - 1)}[which]
            self._claim(client, k, short, max_attempts, overlap)

        def _claim(self, client: int, k: int, short: bool, max_attempts: int, overlap: Overlap) -> None:
            self._settle()
            lease_ms = world.lease_ms(short)
            req = request(
                world.namespace,
                self.job,
                self.slot + k * 60_000,
                f"c{client}",
                lease_ms=lease_ms,
                max_attempts=max_attempts,
                overlap=overlap,
            )
            before = time.monotonic()
            real: ClaimResult = run(world.clients[client].claim(req))
            model = run(self.model.claim(req))
            self._granted(before, lease_ms)
            assert real.outcome == model.outcome, (
                f"{_broken_rule(real.outcome, model.outcome, world.slack_s)}: {req!r}: the backend said "
                f"{real!r}, the reference model {model!r}"
            )
            world.seen[model.outcome.value] += 1
            if model.outcome is ClaimOutcome.WON:
                self.newest = max(self.newest, k)
                if model.previous_status is not None:
                    world.seen[f"takeover after {model.previous_status.value}"] += 1
                assert real.lease is not None
                assert model.lease is not None
                assert (real.lease.attempt, real.lease.owner, real.lease.slot) == (
                    model.lease.attempt,
                    model.lease.owner,
                    model.lease.slot,
                ), f"{req!r}: backend lease {real.lease!r}, model lease {model.lease!r}"
                assert real.reissued == model.reissued, f"{req!r}: backend {real!r}, model {model!r}"
                if model.reissued:
                    return  # its own lease again: already held
                self.real_tokens.append(real.lease.token)
                assert self.real_tokens == sorted(set(self.real_tokens)), (
                    f"tokens went back: {self.real_tokens}"
                )
                self.held.append(_Held(real.lease, model.lease))
            elif real.holder is not None and model.holder is not None:
                assert real.holder == model.holder, f"{req!r}: backend {real!r}, model {model!r}"

        @rule(data=st.data(), short=st.booleans())
        def renew(self, data: st.DataObject, short: bool) -> None:
            if not self.held:
                return
            self._settle()
            i = data.draw(st.integers(0, len(self.held) - 1), label="lease")
            held = self.held[i]
            lease_ms = world.lease_ms(short)
            client = world.clients[int(held.real.owner[1:])]
            before = time.monotonic()
            real = run(client.renew(held.real, lease_ms))
            model = run(self.model.renew(held.model, lease_ms))
            self._granted(before, lease_ms)
            assert (real is None) == (model is None), (
                f"{'a lost lease renewed' if model is None else 'a held lease failed to renew'}: renew of "
                f"{held.real!r}: the backend said {real!r}, the reference model {model!r}"
            )
            if real is not None and model is not None:
                self.held[i] = _Held(real, model)

        @rule(data=st.data(), outcome=st.sampled_from(list(ReleaseOutcome)))
        def release(self, data: st.DataObject, outcome: ReleaseOutcome) -> None:
            if not self.held:
                return
            self.release_one(self.held[data.draw(st.integers(0, len(self.held) - 1), label="lease")], outcome)

        @rule(data=st.data(), client=st.integers(0, CLIENTS - 1), max_attempts=st.integers(1, 3))
        def hand_over_and_take_over(self, data: st.DataObject, client: int, max_attempts: int) -> None:
            """Graceful stops, each followed at once by another instance's claim of the same slot,
            until the attempts run out (or the slot moved on)."""
            if not self.held:
                return
            held = self.held[data.draw(st.integers(0, len(self.held) - 1), label="lease")]
            for _ in range(max_attempts + 1):
                self.release_one(held, ReleaseOutcome.HANDOVER)
                before = len(self.held)
                self._claim(client, (held.real.slot - self.slot) // 60_000, False, max_attempts, Overlap.SKIP)
                if len(self.held) == before:
                    return  # nobody won (exhausted, or not this slot's turn), and both agreed
                held = self.held[-1]
                client = (client + 1) % CLIENTS

        def release_one(self, held: _Held, outcome: ReleaseOutcome) -> None:
            self._settle()
            client = world.clients[int(held.real.owner[1:])]
            real = run(client.release(held.real, outcome))
            model = run(self.model.release(held.model, outcome))
            rule = "a stale or repeated release was accepted" if model is False else "a release was refused"
            assert real == model, (
                f"{rule}: release {outcome} of {held.real!r}: the backend said {real!r}, "
                f"the reference model {model!r}"
            )

        @rule()
        def let_short_leases_expire(self) -> None:
            self._wait_out(2.0)

        def _wait_out(self, within_s: float) -> None:
            """Wait until every lease that ends within `within_s` (and its slack) has ended."""
            now = time.monotonic()
            latest = max((high for _, high in world.deadlines if high - now < within_s), default=None)
            if latest is not None:
                time.sleep(max(0.0, latest + MARGIN_S - time.monotonic()))
            self._settle()

        @invariant()
        def tokens_increase(self) -> None:
            assert self.real_tokens == sorted(set(self.real_tokens))

    return ModelComparison


def _broken_rule(real: ClaimOutcome, model: ClaimOutcome, slack_s: float = 0.0) -> str:
    """The rule a backend broke when it answered `real` where the contract says `model`."""
    if real is ClaimOutcome.WON:
        return {
            ClaimOutcome.TAKEN: "two winners for one claim (a live lease was taken)",
            ClaimOutcome.SKIPPED: "two runs of one job at once (overlap skip ignored)",
            ClaimOutcome.DONE: "a slot that ran to its end was won again",
            ClaimOutcome.EXHAUSTED: "a takeover beyond max_attempts",
            ClaimOutcome.STALE: "an older slot won after a newer one",
            ClaimOutcome.EARLY: "a slot beyond max_skew was won",
        }.get(model, "a claim won where the claim table says otherwise")
    if model is ClaimOutcome.WON:
        if real is ClaimOutcome.TAKEN:
            return ("a claim the claim table lets win was refused: a lease held past its length and the "
                    f"store's declared expiry_slack_ms={round(slack_s * 1000)}, or TAKEN where nobody "
                    "held it")
        return "a claim the claim table lets win was refused"
    return "a claim answered with the wrong row of the claim table"


class TestModel:
    """A hypothesis `RuleBasedStateMachine` drives the backend and `MemoryBackend` in lockstep."""

    pytestmark: ClassVar[list[Any]] = [
        pytest.mark.anarchon_tier("lease"),
        pytest.mark.usefixtures("_anarchon_tier_gate"),
    ]

    def test_backend_matches_reference_model(
        self, anarchon_runner: tuple[asyncio.Runner, BackendPool], anarchon_namespace: str
    ) -> None:
        runner, pool = anarchon_runner
        clients = runner.run(pool.clients(CLIENTS))
        assert all(Capability.LEASE in c.capabilities for c in clients)
        slack_s = expiry_slack_ms(clients[0]) / 1000
        world = _World(runner, clients, anarchon_namespace, slack_s=slack_s)
        probe = request(
            anarchon_namespace, "allow-probe", past_slot(), "c0",
            lease_ms=world.lease_ms(False), overlap=Overlap.ALLOW,
        )
        if runner.run(allow_refusal(clients[0], probe)) is not None:
            world.overlaps.remove(Overlap.ALLOW)
        machine = _machine(world)
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=25,
                stateful_step_count=20,
                deadline=None,
                # Steps sleep in real time, so shrinking would take minutes: report the failing
                # run as found (hypothesis prints every step of it).
                phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[
                    HealthCheck.too_slow,
                    HealthCheck.function_scoped_fixture,
                    HealthCheck.differing_executors,
                ],
            ),
        )
        # Every run drives the store through each kind of transition. A quarter of the generated claims
        # ask for an older slot, and a takeover can land on one, so STALE may come near a quarter by
        # chance; past half, the run mostly tested one row of the claim table and says so.
        for kind in ("won", "takeover after released", "takeover after running", "exhausted"):
            assert world.seen[kind], f"the model run never saw {kind!r}: {dict(world.seen)}"
        claims = sum(world.seen[o.value] for o in ClaimOutcome)
        assert world.seen["stale"] <= claims // 2, f"too many STALE claims in the run: {dict(world.seen)}"
