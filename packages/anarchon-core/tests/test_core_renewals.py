"""Renewals on their own, in virtual time: each held lease renewed every heartbeat from its last send,
those due together in one call, a failure retried at once, a lease lost at its deadline or when the
store refuses it."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from anarchon import ClaimRequest, Job, Lease, MemoryBackend, MemoryStore, to_ms
from anarchon._options import resolve
from anarchon._renewals import Held, Renewals, hold
from anarchon._schedules import Every
from anarchon._tasks import Tasks
from anarchon.testing import VirtualClock

START = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
T0 = to_ms(START)
LOG = logging.getLogger("anarchon.test")


class Spy(MemoryBackend):
    """Records each renew_many call (the loop's time and its size); can fail or hang the next ones."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.calls: list[tuple[float, int]] = []
        self.fail = 0
        self.hang_s = 0.0

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        self.calls.append((asyncio.get_running_loop().time(), len(renewals)))
        if self.hang_s:
            await asyncio.sleep(self.hang_s)
        if self.fail:
            self.fail -= 1
            raise ConnectionError("reset (injected)")
        return await super().renew_many(renewals)


def job(name: str) -> Job:
    return Job(name, Every.parse("1h"), resolve({}, lease_ms=6000, heartbeat_ms=1000), lambda: None)


async def won(backend: MemoryBackend, name: str) -> Lease:
    [result] = await backend.claim_many([ClaimRequest("ns", name, T0, "me", 6000, 3)])
    assert result.lease is not None
    return result.lease


class Setup:
    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.store = MemoryStore(clock)
        self.backend = Spy(self.store)
        self.lost: list[tuple[str, str, float]] = []

    async def keep(self, renewals: Renewals, name: str) -> Held:
        lease = await won(self.backend, name)
        now = asyncio.get_running_loop().time()
        held = hold(lease, job(name), now, now,
                    lambda why: self.lost.append((name, why, asyncio.get_running_loop().time())))
        renewals.keep(held)
        return held


@pytest.fixture
def setup() -> Setup:
    return Setup(VirtualClock(START))


def test_leases_are_renewed_every_heartbeat_those_due_together_in_one_call(setup: Setup) -> None:
    async def main() -> None:
        renewals = Renewals(setup.backend, LOG, Tasks(LOG))
        renewals.start()
        for name in ("a", "b", "c"):
            await setup.keep(renewals, name)
        await asyncio.sleep(3.5)
        assert [n for _, n in setup.backend.calls] == [3, 3, 3]
        times = [t for t, _ in setup.backend.calls]
        assert [round(b - a, 2) for a, b in itertools.pairwise(times)] == [1.0, 1.0]

    setup.clock.run(main())
    assert setup.lost == []


def test_a_failed_renewal_is_sent_again_at_once_not_a_heartbeat_later(setup: Setup) -> None:
    async def main() -> None:
        renewals = Renewals(setup.backend, LOG, Tasks(LOG))
        renewals.start()
        await setup.keep(renewals, "a")
        setup.backend.fail = 2
        await asyncio.sleep(1.5)
        times = [t for t, _ in setup.backend.calls]
        assert len(times) == 3 and times[2] - times[0] < 0.5, times

    setup.clock.run(main())
    assert setup.lost == []


def test_a_lease_whose_renewals_hang_is_lost_at_its_deadline(setup: Setup) -> None:
    async def main() -> None:
        renewals = Renewals(setup.backend, LOG, Tasks(LOG))
        renewals.start()
        started = asyncio.get_running_loop().time()
        setup.backend.hang_s = 60
        await setup.keep(renewals, "a")
        await asyncio.sleep(8)
        [(name, why, at)] = setup.lost
        assert name == "a" and at - started == pytest.approx(6.0, abs=0.05), (why, at - started)

    setup.clock.run(main())


def test_a_renewal_the_store_refuses_loses_the_lease(setup: Setup) -> None:
    async def main() -> None:
        renewals = Renewals(setup.backend, LOG, Tasks(LOG))
        renewals.start()
        await setup.keep(renewals, "a")
        await MemoryBackend(setup.store).forget("ns", "a")  # its record is gone: a renewal is refused
        await asyncio.sleep(1.5)

    setup.clock.run(main())
    assert [name for name, _, _ in setup.lost] == ["a"]


def test_a_forgotten_lease_is_renewed_no_more(setup: Setup) -> None:
    async def main() -> None:
        renewals = Renewals(setup.backend, LOG, Tasks(LOG))
        renewals.start()
        held = await setup.keep(renewals, "a")
        await setup.keep(renewals, "b")
        await asyncio.sleep(1.2)
        renewals.forget(held)
        await asyncio.sleep(2)
        assert [n for _, n in setup.backend.calls] == [2, 1, 1]

    setup.clock.run(main())
