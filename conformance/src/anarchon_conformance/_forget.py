"""The `forget` tier: a job forgotten leaves nothing behind and nothing else goes with it, and the
store lists the namespaces it holds."""

from __future__ import annotations

import dataclasses
from typing import Any

from anarchon.backends import Capability, ClaimOutcome, JobControl, Overlap, ReleaseOutcome

from ._contract import ODD_NAMES, entry, run, tier
from ._kit import Kit

__all__ = ["TestForgetContract"]


async def _everything(kit: Kit, job: str, namespace: str | None = None) -> dict[str, Any]:
    """What the store keeps of `job`, by capability."""
    backend, ns = kit.backend, namespace or kit.namespace
    caps = kit.capabilities
    kept: dict[str, Any] = {}
    if Capability.INSPECT in caps:
        state = await backend.inspect(ns, job)
        kept["record"] = None if state is None else dataclasses.replace(state, now=0)  # (read time aside)
    if Capability.CONTROL in caps:
        kept["controls"] = (await backend.controls(ns)).get(job)
    if Capability.HISTORY in caps:
        kept["runs"] = await backend.history(ns, job, 10)
        kept["catalogue"] = [e for e in await backend.catalogue(ns) if e.job == job]
    return kept


async def _store(kit: Kit, job: str, namespace: str | None = None) -> None:
    """Give `job` a finished record, a pause, a run and a catalogue entry, where the store keeps each."""
    backend, ns = kit.backend, namespace or kit.namespace
    caps = kit.capabilities
    result = await kit.claim(job, "a", namespace=ns)
    assert result.lease is not None
    if Capability.LEASE in caps:
        assert await kit.release(result.lease, ReleaseOutcome.DONE)
    if Capability.CONTROL in caps:
        await backend.set_control(ns, job, paused=True, trigger=True)
    if Capability.HISTORY in caps:
        await backend.record_runs(ns, [run(job, kit.slot)], 10)
        await backend.publish_catalogue(ns, [entry(job)], 60_000)


def _empty(kept: dict[str, Any]) -> bool:
    return all(value in (None, [], JobControl()) for value in kept.values())


class TestForgetContract:
    """`forget`: everything of one job deleted, nothing of another; `namespaces` lists what is held."""

    pytestmark = tier("forget")

    async def test_a_forgotten_job_leaves_nothing_behind(self, anarchon_kit: Kit) -> None:
        name = ODD_NAMES[1]
        await _store(anarchon_kit, name)
        assert not _empty(await _everything(anarchon_kit, name))
        assert await anarchon_kit.backend.forget(anarchon_kit.namespace, name) is True
        other = await anarchon_kit.client()
        assert _empty(await _everything(anarchon_kit, name)), "forget must delete every part of the job"
        assert await other.forget(anarchon_kit.namespace, name) is False, "nothing left: False"

    async def test_other_jobs_and_namespaces_are_left_alone(self, anarchon_kit: Kit) -> None:
        kit, ns = anarchon_kit, anarchon_kit.namespace
        for job, where in (("gone", ns), ("kept", ns), ("gone", ns + "-other")):
            await _store(kit, job, where)
        before = [await _everything(kit, "kept"), await _everything(kit, "gone", ns + "-other")]
        await kit.backend.forget(ns, "gone")
        assert [await _everything(kit, "kept"), await _everything(kit, "gone", ns + "-other")] == before

    async def test_a_forgotten_job_is_claimed_afresh(self, anarchon_kit: Kit) -> None:
        kit = anarchon_kit
        for k in range(1, 4):
            lease = await kit.won("job", "a", slot=kit.slot + k * 60_000)
            assert await kit.release(lease, ReleaseOutcome.DONE)
        assert await kit.backend.forget(kit.namespace, "job") is True
        again = await kit.claim("job", "b", slot=kit.slot)
        assert again.outcome is ClaimOutcome.WON, "an older slot than the forgotten record's is not stale"
        assert again.lease is not None
        assert (again.lease.attempt, again.lease.token) == (1, 1), "the token counter goes with the job"

    async def test_every_slot_kept_under_overlap_allow_goes(self, anarchon_kit: Kit) -> None:
        kit = anarchon_kit
        if Capability.LEASE not in kit.capabilities:
            return
        try:
            await kit.won("job", "a", overlap=Overlap.ALLOW)
            await kit.won("job", "a", slot=kit.slot + 60_000, overlap=Overlap.ALLOW)
        except Exception as exc:  # a store that refuses overlap="allow" keeps one record per job
            if type(exc).__name__ != "ConfigError":
                raise
            return
        await kit.backend.forget(kit.namespace, "job")
        again = await kit.claim("job", "b", overlap=Overlap.ALLOW)
        assert again.outcome is ClaimOutcome.WON, f"the older slot's record must go too: {again!r}"

    async def test_namespaces_lists_what_the_store_holds(self, anarchon_kit: Kit) -> None:
        kit, ns = anarchon_kit, anarchon_kit.namespace
        assert ns not in await kit.backend.namespaces()
        await _store(kit, "job", ns)
        await _store(kit, "job", ns + "-b")
        held = await (await kit.client()).namespaces()
        assert held == sorted(held), "sorted by code point"
        assert {ns, ns + "-b"} <= set(held)
        await kit.backend.forget(ns + "-b", "job")
        assert ns + "-b" not in await kit.backend.namespaces(), "a namespace forgotten empty is not listed"
