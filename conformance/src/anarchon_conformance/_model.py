"""Model-based testing: the backend and `MemoryBackend` receive the same steps and must agree."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

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

from ._kit import LONG_LEASE_MS, allow_refusal, lease_for, past_slot
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
    """Monotonic windows in which a granted lease expires, by the store's clock."""

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
            world.deadlines.clear()

        def _settle(self) -> None:
            """Wait out any lease whose expiry is too close to call, so both stores agree on it."""
            now = time.monotonic()
            for low, high in world.deadlines:
                if low - MARGIN_S < now < high + MARGIN_S:
                    time.sleep(high + MARGIN_S - now)
                    now = time.monotonic()
            world.deadlines[:] = [(low, high) for low, high in world.deadlines if high + MARGIN_S > now]

        def _granted(self, before: float, lease_ms: int) -> None:
            after = time.monotonic()
            world.deadlines.append((before + lease_ms / 1000, after + lease_ms / 1000))

        @rule(
            client=st.integers(0, CLIENTS - 1),
            k=st.integers(0, 2),
            short=st.booleans(),
            max_attempts=st.integers(1, 3),
            overlap=st.sampled_from(world.overlaps),
        )
        def claim(self, client: int, k: int, short: bool, max_attempts: int, overlap: Overlap) -> None:
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
            assert real.outcome == model.outcome, f"{req!r}: backend said {real!r}, the model {model!r}"
            if model.outcome is ClaimOutcome.WON:
                assert real.lease is not None
                assert model.lease is not None
                assert (real.lease.attempt, real.lease.owner, real.lease.slot) == (
                    model.lease.attempt,
                    model.lease.owner,
                    model.lease.slot,
                ), f"{req!r}: backend lease {real.lease!r}, model lease {model.lease!r}"
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
                f"renew of {held.real!r}: backend {real!r}, model {model!r}"
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
                self.claim(client, (held.real.slot - self.slot) // 60_000, False, max_attempts, Overlap.SKIP)
                if len(self.held) == before:
                    return  # nobody won (exhausted, or not this slot's turn), and both agreed
                held = self.held[-1]
                client = (client + 1) % CLIENTS

        def release_one(self, held: _Held, outcome: ReleaseOutcome) -> None:
            self._settle()
            client = world.clients[int(held.real.owner[1:])]
            real = run(client.release(held.real, outcome))
            model = run(self.model.release(held.model, outcome))
            assert real == model, f"release {outcome} of {held.real!r}: backend {real!r}, model {model!r}"

        @rule()
        def let_short_leases_expire(self) -> None:
            latest = max((high for _, high in world.deadlines if high - time.monotonic() < 2), default=None)
            if latest is not None:
                time.sleep(max(0.0, latest + MARGIN_S - time.monotonic()))
            self._settle()

        @invariant()
        def tokens_increase(self) -> None:
            assert self.real_tokens == sorted(set(self.real_tokens))

    return ModelComparison


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
        world = _World(runner, clients, anarchon_namespace)
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
