"""Contract tests: one per rule of docs/lease-contract.md (claim and lease tiers), and per capability."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from anarchon import ConfigError
from anarchon.backends import (
    CONTROLS_CHANGED,
    ERROR_LIMIT,
    BackendBase,
    Capability,
    CatalogueEntry,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobControl,
    JobStatus,
    Lease,
    Overlap,
    ReleaseOutcome,
    RunRecord,
)

from ._kit import EXPIRY_MARGIN_MS, LONG_LEASE_MS, SHORT_LEASE_MS, Kit, expire

__all__ = [
    "TestAnnounceContract",
    "TestClaimContract",
    "TestClaimManyContract",
    "TestControlContract",
    "TestHistoryContract",
    "TestInspectContract",
    "TestLeaseContract",
    "TestNotifyContract",
    "TestReleaseManyContract",
    "TestRenewManyContract",
]

ODD_NAMES = [
    "ジョブ-β-😀",
    'it\'s "quoted" \\ back`tick`',
    "x" * 200,
    "spaces and\ttabs; DROP TABLE jobs; --",
    "a:b/c*d?e%f{g}",
]
ODD_ERROR = 'ValueError: "a,b" {c} \\path\\to\n  File "x.py", line 1, in <módulo> NULL'
"""A handler's error as a traceback holds it: quotes, commas, braces, backslashes and a newline."""
MINUTE = 60_000
NAME_VARIANTS = {
    "report": ["Report", "REPORT", "report ", " report", "report  ", "\uff52\uff45\uff50\uff4f\uff52\uff54"],
    "réport": ["re\u0301port", "Réport", "rèport"],
    "straße": ["strasse", "STRASSE", "Straße"],
    "ﬁle": ["file", "FILE"],
    "\u0131nfo": ["info", "\u0130nfo"],
}
"""Names, each with others that a folding, accent-insensitive, normalising or padding comparison
makes equal to it (case, PAD SPACE, NFC against NFD, full width, ß, ligatures, the dotless i)."""
SEPARATORS = ["", *(chr(c) for c in range(0x20, 0x7F) if not chr(c).isalnum()), "%3A", "::", "\x1f", "\u00b7",
              "\u3000", "\u2028", "é"]
"""Whatever a store key could join a namespace and a job with: every ASCII punctuation character,
the space, nothing at all, escapes and a few non-ASCII characters."""
CUT_AT = ["\x1f", ".", ":", "/", "#", " ", "\x7f", "é", "😀", "\u2028"]
"""Characters a store might cut a name at: the engine's trigger separator, key scheme separators,
white space, DEL and multi-byte characters. (Job names hold no other control characters.)"""


def tier(capability: str) -> Any:
    """The marks of a suite class for one capability tier."""
    return [
        pytest.mark.anarchon_tier(capability),
        pytest.mark.usefixtures("_anarchon_tier_gate"),
        pytest.mark.asyncio,
    ]


async def finish(kit: Kit, result: Any) -> None:
    """End a won run where the backend has leases, so the next slot may start."""
    if result.lease is not None and "lease" in kit.capabilities:
        assert await kit.release(result.lease, ReleaseOutcome.DONE)


async def won_allowing_overlap(kit: Kit, **kw: Any) -> Lease:
    """Win ("job", "a") under overlap="allow", or skip the test where the backend refuses that policy."""
    try:
        return await kit.won("job", "a", overlap=Overlap.ALLOW, **kw)
    except ConfigError as exc:
        pytest.skip(f"{type(kit.backend).__name__} refuses overlap='allow' (ConfigError: {exc})")


async def _race_with_takeover(kit: Kit, act: Callable[[Lease], Awaitable[Any]], what: str) -> list[str]:
    """Race the holder's `act(lease)` (a renew or a release, `what`) against other owners' claims that
    take its record over, three ways, and return what broke the rule "never both succeed".

    - A lease that expired: the act against a takeover of the same slot.
    - A live lease: the act against a claim of the next slot with `overlap="replace"`, which revokes it.
      The claim wins either way; afterwards the older lease must be revoked and the new one held, as in
      either order of the two.
    - Leases at their end: pairs sent from just before the expiry to just after its slack, so that one
      of each pair may land on either side of it.
    """
    broken: list[str] = []
    other = await kit.client()
    short = kit.short_lease_ms

    async def pair(lease: Lease, slot: int, overlap: Overlap) -> tuple[Any, ClaimResult]:
        done, claimed = await asyncio.gather(
            act(lease), kit.claim(lease.job, "b", slot, on=other, overlap=overlap))
        return done, claimed

    async def after(lease: Lease, done: Any, claimed: ClaimResult, where: str) -> None:
        """The state both orders of the pair leave: the winner of the claim holds, the older lease not.
        (Checked at once, while the winner's lease, a short one on a fixed-lease store, is live.)"""
        if claimed.outcome is ClaimOutcome.WON:
            if done:
                broken.append(f"{where}: the {what} answered {done!r} and the claim {claimed!r}: "
                              "both succeeded")
            assert claimed.lease is not None
            if await kit.renew(claimed.lease, on=other) is None:
                broken.append(f"{where}: after the race the claim's winner lost its lease {claimed.lease!r} "
                              f"(the {what} wrote over the takeover)")
            if await kit.renew(lease) is not None:
                broken.append(f"{where}: after the race the old lease {lease!r} still renews")

    async def race(lease: Lease, where: str) -> None:
        done, claimed = await pair(lease, lease.slot, Overlap.SKIP)
        await after(lease, done, claimed, where)

    expired = [await kit.won(f"expired-{i}", "a", lease_ms=SHORT_LEASE_MS) for i in range(6)]
    await kit.expire()
    await asyncio.gather(*(race(lease, f"expired lease of {lease.job!r}") for lease in expired))

    async def revoke(lease: Lease) -> None:
        _, claimed = await pair(lease, lease.slot + MINUTE, Overlap.REPLACE)
        where = f"live lease of {lease.job!r} against a claim of its next slot with overlap='replace'"
        if claimed.outcome is not ClaimOutcome.WON:
            broken.append(f"{where}: the claim answered {claimed!r}, not WON")
            return
        assert claimed.lease is not None
        if await kit.renew(claimed.lease, on=other) is None:
            broken.append(f"{where}: the new slot's lease {claimed.lease!r} does not renew after the race "
                          f"(the {what} wrote over the takeover)")
        if await kit.renew(lease) is not None:
            broken.append(f"{where}: the revoked lease {lease!r} still renews after the race (the {what} "
                          "brought it back)")

    live = [await kit.won(f"live-{i}", "a") for i in range(6)]
    await asyncio.gather(*(revoke(lease) for lease in live))

    loop = asyncio.get_running_loop()
    ending: list[tuple[Lease, float]] = []
    for i in range(8):
        lease = await kit.won(f"ending-{i}", "a", lease_ms=SHORT_LEASE_MS)
        ending.append((lease, loop.time()))
    span = (short * 0.2 + kit.slack_ms) / 1000

    async def at_the_end(i: int, lease: Lease, granted: float) -> None:
        start = granted + short * 0.9 / 1000 + span * i / 7
        await asyncio.sleep(max(0.0, start - loop.time()))
        await race(lease, f"lease of {lease.job!r} at its expiry")

    await asyncio.gather(*(at_the_end(i, lease, t) for i, (lease, t) in enumerate(ending)))
    return broken


ORDER_PATTERN = [True, True, False, True, False, False]
"""Which items of a batch succeed: the same pattern read backwards, or in any other order the kit
sends, is another one."""


def _ordered_names() -> list[list[str]]:
    """The names of a batch's items: in order, backwards, and shuffled, so that a store answering in
    any order of its own (by name, by key, backwards) answers one of them out of order."""
    names = [f"item-{c}" for c in "abcdef"]
    return [names, names[::-1], [names[i] for i in (3, 0, 5, 1, 4, 2)]]


def _why_no_sibling(backend: Any) -> str:
    """Why `backend.sibling()` gave None, as far as the kit can tell."""
    if isinstance(backend, BackendBase) and type(backend).sibling is BackendBase.sibling:
        client = getattr(backend, "_client", None)
        if client is not None:
            return (f"it was given a client object ({type(client).__name__}), which a second "
                    "connection cannot share")
        return ("BackendBase does not know what it connects to: the constructor never called "
                "`self._use(url_or_client, ClientType, settings)` (or passed None as the target), so "
                "sibling() cannot build a backend on a connection of its own")
    return "it cannot make a connection of its own (it was given a client object)"


class TestClaimContract:
    """One winner per (namespace, job, slot), names compared exactly. Every backend passes these."""

    pytestmark = tier("claim")

    async def test_first_claim_wins_attempt_1(self, anarchon_kit: Kit) -> None:
        result = await anarchon_kit.claim("job", "a")
        assert result.outcome is ClaimOutcome.WON
        assert result.lease is not None
        assert result.lease.attempt == 1

    async def test_second_claim_is_taken(self, anarchon_kit: Kit) -> None:
        await anarchon_kit.won("job", "a")
        other = await anarchon_kit.client()
        # (On a lease backend the holder's own claim answers its lease again: see the lease tier.)
        owners = [("b", other)] if Capability.LEASE in anarchon_kit.capabilities else [
            ("b", other), ("a", anarchon_kit.backend)]
        for owner, client in owners:
            result = await anarchon_kit.claim("job", owner, on=client)
            assert result.outcome is ClaimOutcome.TAKEN, f"second claim by {owner!r}: {result!r}"
            assert result.holder in (None, "a"), f"holder should be 'a': {result!r}"

    async def test_jobs_are_independent(self, anarchon_kit: Kit) -> None:
        for job in ("one", "two", "three"):
            await anarchon_kit.won(job, "a")

    async def test_slots_each_win_once(self, anarchon_kit: Kit) -> None:
        other = await anarchon_kit.client()
        for k in range(3):
            slot = anarchon_kit.slot + k * MINUTE
            first = await anarchon_kit.claim("job", "a", slot)
            assert first.outcome is ClaimOutcome.WON, f"slot {k}: {first!r}"
            second = await anarchon_kit.claim("job", "b", slot, on=other)
            assert second.outcome is ClaimOutcome.TAKEN, f"slot {k}, second claim: {second!r}"
            await finish(anarchon_kit, first)

    async def test_namespaces_are_isolated(self, anarchon_kit: Kit) -> None:
        await anarchon_kit.won("job", "a")
        other_ns = anarchon_kit.namespace + "-other"
        result = await anarchon_kit.claim("job", "b", namespace=other_ns)
        assert result.outcome is ClaimOutcome.WON, f"same job in another namespace: {result!r}"
        again = await anarchon_kit.claim("job", "c")
        assert again.outcome is ClaimOutcome.TAKEN

    @pytest.mark.parametrize("name", ODD_NAMES, ids=["unicode", "quotes", "200-chars", "sql", "punct"])
    async def test_odd_job_names_round_trip(self, anarchon_kit: Kit, name: str) -> None:
        lease = await anarchon_kit.won(name, "a")
        assert lease.job == name
        assert lease.namespace == anarchon_kit.namespace
        assert (await anarchon_kit.claim(name, "b")).outcome is ClaimOutcome.TAKEN
        # A prefix of the name is another job: the store must not truncate or fold names.
        assert (await anarchon_kit.claim(name[:-1] or "_", "b")).outcome is ClaimOutcome.WON

    async def test_claim_many_default_keeps_order(self, anarchon_kit: Kit) -> None:
        reqs = [anarchon_kit.req(f"job-{i}", "a") for i in range(5)] + [anarchon_kit.req("job-0", "b")]
        results = await anarchon_kit.backend.claim_many(reqs)
        assert [(r.job, r.slot) for r in results] == [(q.job, q.slot) for q in reqs]
        assert [r.outcome for r in results] == [ClaimOutcome.WON] * 5 + [ClaimOutcome.TAKEN]


    async def test_names_compare_byte_wise(self, anarchon_kit: Kit) -> None:
        ns = anarchon_kit.namespace
        broken: list[str] = []
        for base, variants in NAME_VARIANTS.items():
            await anarchon_kit.won(base, "a")
            for name in variants:
                result = await anarchon_kit.claim(name, "b")
                if result.outcome is not ClaimOutcome.WON:
                    broken.append(f"job {name!r} after job {base!r} was won: {result!r}")
        for suffix, variants in NAME_VARIANTS.items():
            await anarchon_kit.won("report", "a", namespace=f"{ns}-{suffix}")
            for name in variants:
                result = await anarchon_kit.claim("report", "b", namespace=f"{ns}-{name}")
                if result.outcome is not ClaimOutcome.WON:
                    broken.append(f"namespace {ns + '-' + name!r} after namespace {ns + '-' + suffix!r} "
                                  f"won the job: {result!r}")
        assert not broken, (
            "namespaces and job names are compared exactly, code point by code point: these are other "
            "jobs, so each claim must be WON (docs/lease-contract.md, Names; a case-insensitive, accent-"
            "insensitive, normalising or PAD SPACE comparison makes them one):\n  " + "\n  ".join(broken)
        )

    async def test_joined_names_do_not_collide(self, anarchon_kit: Kit) -> None:
        ns = anarchon_kit.namespace
        broken: list[str] = []
        for sep in SEPARATORS:
            await anarchon_kit.won("b", "a", namespace=f"{ns}{sep}a")
            result = await anarchon_kit.claim(f"a{sep}b", "b", namespace=ns)
            if result.outcome is not ClaimOutcome.WON:
                broken.append(f"separator {sep!r}: namespace {ns + sep + 'a'!r} with job 'b', then namespace "
                              f"{ns!r} with job {'a' + sep + 'b'!r}: {result!r}")
        assert not broken, (
            "a namespace and a job never run together (docs/lease-contract.md, Names): these pairs "
            "collide, so a store key joined from namespace and job does not keep them apart:\n  "
            + "\n  ".join(broken)
        )

    async def test_a_name_is_never_cut(self, anarchon_kit: Kit) -> None:
        # The scheduler claims a job's triggers as the record `job + "\x1ftrigger"`: a store that cuts
        # a name at a character (a C string, a key scheme, a column too short) makes them one job.
        broken: list[str] = []
        for i, cut in enumerate(CUT_AT):
            head, whole = f"cut-{i}", f"cut-{i}{cut}trigger"
            await anarchon_kit.won(head, "a")
            result = await anarchon_kit.claim(whole, "b")
            if result.outcome is not ClaimOutcome.WON:
                broken.append(f"job {whole!r} while job {head!r} is held: {result!r}")
            head, whole = f"tuc-{i}", f"tuc-{i}{cut}trigger"
            await anarchon_kit.won(whole, "a")
            result = await anarchon_kit.claim(head, "b")
            if result.outcome is not ClaimOutcome.WON:
                broken.append(f"job {head!r} while job {whole!r} is held: {result!r}")
        assert not broken, (
            "names are never truncated (docs/lease-contract.md, Names): a name and the same name cut at a "
            "character are two jobs, so each claim must be WON (a job's trigger record is "
            "`job + '\\x1ftrigger'`: cut there, a trigger is refused while its job runs):\n  "
            + "\n  ".join(broken)
        )

    async def test_claims_are_remembered_for_the_horizon(self, anarchon_kit: Kit) -> None:
        if "lease" in anarchon_kit.capabilities:
            pytest.skip("a lease backend keeps a record per job (test_an_ended_slot_stays_done)")
        horizon = anarchon_kit.backend.horizon_ms
        await anarchon_kit.won("job", "a")
        # Within the horizon: 80% of a declared one, but no longer than the kit's patience (a test
        # cannot wait minutes); None means forever, so the whole patience (longer with --anarchon-thorough).
        patience = anarchon_kit.patience_s
        wait_s = patience if horizon is None else min(horizon * 0.8 / 1000, patience)
        await asyncio.sleep(wait_s)
        result = await anarchon_kit.claim("job", "b", on=await anarchon_kit.client())
        assert result.outcome is not ClaimOutcome.WON, (
            f"a claim was forgotten after {wait_s:.2f} s, within the declared horizon_ms={horizon!r} "
            f"({'forever' if horizon is None else f'{horizon} ms'}): a claim of the same slot within the "
            f"horizon is TAKEN (docs/lease-contract.md, Claim-only backends); the store answered {result!r}, "
            "so the slot was won twice"
        )

    async def test_a_sibling_sees_the_same_store(self, anarchon_kit: Kit) -> None:
        make = getattr(anarchon_kit.backend, "sibling", None)
        if make is None:
            pytest.skip(f"{type(anarchon_kit.backend).__name__} offers no sibling()")
        sibling = make()
        if sibling is None:
            pytest.skip(f"{type(anarchon_kit.backend).__name__}.sibling() is None: "
                        f"{_why_no_sibling(anarchon_kit.backend)}")
        assert sibling is not anarchon_kit.backend, "sibling() must build a new backend"
        await anarchon_kit.pool.adopt(sibling)
        await anarchon_kit.won("job", "a")
        result = await anarchon_kit.claim("job", "b", on=sibling)
        assert result.outcome is ClaimOutcome.TAKEN, (
            f"a claim won through one backend must be TAKEN through its sibling (the same store): {result!r}"
        )

    async def test_the_base_class_names_are_left_to_it(self, anarchon_kit: Kit) -> None:
        backend = anarchon_kit.backend
        if not isinstance(backend, BackendBase):
            pytest.skip(f"{type(backend).__name__} is not built on anarchon.backends.BackendBase")
        clashes = [f"{name} is overridden by {type(backend).__name__}"
                   for name in ("_use", "_lock", "_errors")
                   if getattr(type(backend), name) is not getattr(BackendBase, name)]
        kinds: dict[str, tuple[type[Any], ...]] = {
            "_opened": (bool,), "_open_lock": (type(None), asyncio.Lock), "_settings": (dict,)}
        for name, allowed in kinds.items():
            value = getattr(backend, name, None)
            if not isinstance(value, allowed):
                wanted = " or ".join(t.__name__ for t in allowed)
                clashes.append(f"{name} holds {value!r}, not the base's {wanted}")
        assert not clashes, (
            "BackendBase keeps its state and plumbing in private names a subclass must leave alone (see "
            "docs/conformance.md, What BackendBase and LeaseBackendBase do with your subclass); open, close "
            "and sibling() break otherwise: " + "; ".join(clashes)
        )

    async def test_open_and_close_are_idempotent(self, anarchon_kit: Kit) -> None:
        backend = await anarchon_kit.client()
        await backend.open()  # a second open of an open backend does nothing
        await anarchon_kit.won("job", "a", on=backend)
        await backend.close()
        await backend.close()  # and so does a second close


class TestLeaseContract:
    """The claim table row by row, plus renew, release, attempts, tokens and the store's clock."""

    pytestmark = tier("lease")

    # -- row: no record ------------------------------------------------------------------------

    async def test_row_none_creates_attempt_1_token_1(self, anarchon_kit: Kit) -> None:
        result = await anarchon_kit.claim("job", "a")
        assert result.outcome is ClaimOutcome.WON
        assert result.lease is not None
        lease = result.lease
        assert (lease.attempt, lease.token) == (1, 1), f"first claim: {lease!r}"
        if result.now is not None:
            assert abs(lease.expires_at - result.now - anarchon_kit.long_lease_ms) <= 1_000, (
                f"expires_at should be store now + lease_ms: now={result.now}, {lease!r}"
            )

    # -- row: same slot, running, live -----------------------------------------------------------

    async def test_row_same_slot_running_live_is_taken(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a")
        result = await anarchon_kit.claim("job", "b", on=await anarchon_kit.client())
        assert result.outcome is ClaimOutcome.TAKEN, result
        assert result.holder == "a", f"TAKEN must name the holder: {result!r}"
        if result.expires_at is not None:
            assert abs(result.expires_at - lease.expires_at) <= 1_000

    # -- row: same slot, done or failed ------------------------------------------------------------

    @pytest.mark.parametrize("outcome", [ReleaseOutcome.DONE, ReleaseOutcome.FAILED])
    async def test_row_same_slot_ended_is_done(self, anarchon_kit: Kit, outcome: ReleaseOutcome) -> None:
        lease = await anarchon_kit.won("job", "a")
        assert await anarchon_kit.release(lease, outcome) is True
        result = await anarchon_kit.claim("job", "b", on=await anarchon_kit.client())
        assert result.outcome is ClaimOutcome.DONE, f"after release {outcome}: {result!r}"

    # -- row: same slot, released or expired: takeover, or exhausted --------------------------------

    async def test_row_same_slot_released_is_taken_over(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a")
        assert await anarchon_kit.release(lease, ReleaseOutcome.HANDOVER) is True
        result = await anarchon_kit.claim("job", "b", on=await anarchon_kit.client())
        assert result.outcome is ClaimOutcome.WON, result
        assert result.lease is not None, result
        assert result.lease.attempt == 2, result
        assert result.lease.token > lease.token, result
        assert result.previous_status in (None, JobStatus.RELEASED), result

    async def test_row_same_slot_expired_is_taken_over(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a", lease_ms=SHORT_LEASE_MS)
        other = await anarchon_kit.client()
        assert (await anarchon_kit.claim("job", "b", on=other)).outcome is ClaimOutcome.TAKEN
        await anarchon_kit.expire()
        result = await anarchon_kit.claim("job", "b", on=other)
        assert result.outcome is ClaimOutcome.WON, f"after expiry: {result!r}"
        assert result.lease is not None, f"after expiry: {result!r}"
        assert result.lease.attempt == 2, result
        assert result.lease.token > lease.token, result
        assert result.previous_status in (None, JobStatus.RUNNING), result

    async def test_row_same_slot_released_exhausted(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a", max_attempts=1)
        assert await anarchon_kit.release(lease, ReleaseOutcome.HANDOVER)
        result = await anarchon_kit.claim("job", "b", max_attempts=1)
        assert result.outcome is ClaimOutcome.EXHAUSTED, f"max_attempts=1 after a handover: {result!r}"

    async def test_row_same_slot_expired_exhausted(self, anarchon_kit: Kit) -> None:
        await anarchon_kit.won("job", "a", lease_ms=SHORT_LEASE_MS, max_attempts=1)
        await anarchon_kit.expire()
        result = await anarchon_kit.claim("job", "b", max_attempts=1)
        assert result.outcome is ClaimOutcome.EXHAUSTED, f"max_attempts=1 after expiry: {result!r}"

    # -- row: older slot, running, live: by overlap --------------------------------------------------

    @pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.BUFFER_ONE])
    async def test_row_older_slot_live_skipped(self, anarchon_kit: Kit, overlap: Overlap) -> None:
        old = await anarchon_kit.won("job", "a")
        result = await anarchon_kit.claim("job", "b", anarchon_kit.slot + MINUTE, overlap=overlap)
        assert result.outcome is ClaimOutcome.SKIPPED, f"overlap={overlap}: {result!r}"
        assert result.holder in (None, "a")
        # The older run is untouched.
        assert await anarchon_kit.renew(old) is not None

    async def test_row_older_slot_live_replace(self, anarchon_kit: Kit) -> None:
        old = await anarchon_kit.won("job", "a")
        new = await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.REPLACE)
        assert new.attempt == 1, new
        assert new.token > old.token, new
        assert await anarchon_kit.renew(old) is None, "the replaced run's lease must be revoked"
        assert await anarchon_kit.release(old, ReleaseOutcome.DONE) is False

    async def test_row_older_slot_live_allow(self, anarchon_kit: Kit) -> None:
        try:
            old = await anarchon_kit.won("job", "a", overlap=Overlap.ALLOW)
        except ConfigError as exc:
            # A store with one lease per job cannot run two slots at once: it may refuse the policy,
            # loudly and without side effects, but never treat it as another one.
            result = await anarchon_kit.claim("job", "b")
            assert result.outcome is ClaimOutcome.WON, (
                f"a refused overlap='allow' claim left a record: {result!r}"
            )
            pytest.skip(
                f"{type(anarchon_kit.backend).__name__} refuses overlap='allow' with ConfigError: {exc}"
            )
        new = await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW)
        assert new.attempt == 1
        assert new.token > old.token
        # Both runs go on: each is renewed, and each slot is still taken.
        assert await anarchon_kit.renew(old) is not None, "overlap=allow: the older run keeps its lease"
        assert await anarchon_kit.renew(new) is not None
        again = await anarchon_kit.claim("job", "c", overlap=Overlap.ALLOW)
        assert again.outcome is ClaimOutcome.TAKEN, f"older slot under allow: {again!r}"
        assert await anarchon_kit.release(old, ReleaseOutcome.DONE) is True

    async def test_row_older_slot_allow_handover_is_taken_over(self, anarchon_kit: Kit) -> None:
        # Under allow each slot has its own record: an older slot handed over (a graceful stop, a
        # retry) is judged by the same-slot rows, like the newest slot, while the newer run goes on.
        old = await won_allowing_overlap(anarchon_kit)
        new = await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW)
        assert await anarchon_kit.release(old, ReleaseOutcome.HANDOVER) is True
        assert await anarchon_kit.renew(old) is None, "a released lease must not renew"
        other = await anarchon_kit.client()
        result = await anarchon_kit.claim("job", "c", on=other, overlap=Overlap.ALLOW)
        assert result.outcome is ClaimOutcome.WON, f"older slot handed over under allow: {result!r}"
        assert result.lease is not None, result
        assert (result.lease.slot, result.lease.attempt) == (old.slot, 2), result
        assert result.lease.token > new.token, result
        assert result.previous_status in (None, JobStatus.RELEASED), result
        assert await anarchon_kit.renew(new) is not None, "the newer run keeps its lease"
        assert await anarchon_kit.renew(result.lease, on=other) is not None
        again = await anarchon_kit.claim("job", "d", overlap=Overlap.ALLOW)
        assert again.outcome is ClaimOutcome.TAKEN, f"older slot taken over: {again!r}"
        assert await anarchon_kit.release(result.lease, ReleaseOutcome.DONE, on=other) is True
        ended = await anarchon_kit.claim("job", "d", overlap=Overlap.ALLOW)
        assert ended.outcome in (ClaimOutcome.DONE, ClaimOutcome.STALE), f"older slot done: {ended!r}"

    async def test_row_older_slot_allow_handover_exhausted(self, anarchon_kit: Kit) -> None:
        old = await won_allowing_overlap(anarchon_kit, max_attempts=1)
        await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW, max_attempts=1)
        assert await anarchon_kit.release(old, ReleaseOutcome.HANDOVER) is True
        result = await anarchon_kit.claim("job", "c", overlap=Overlap.ALLOW, max_attempts=1)
        assert result.outcome is ClaimOutcome.EXHAUSTED, f"max_attempts=1, older slot handed over: {result!r}"

    async def test_row_older_slot_allow_handover_superseded_by_a_newer_slot(self, anarchon_kit: Kit) -> None:
        # A released record is superseded when a newer slot starts (the "older slot, any other
        # state" row), the newest record as well as an older one kept under allow: a handover not
        # taken over before then is dropped, and only running records stay.
        old = await won_allowing_overlap(anarchon_kit)
        mid = await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW)
        assert await anarchon_kit.release(old, ReleaseOutcome.HANDOVER) is True
        newest = await anarchon_kit.won("job", "b", anarchon_kit.slot + 2 * MINUTE, overlap=Overlap.ALLOW)
        result = await anarchon_kit.claim("job", "c", overlap=Overlap.ALLOW)
        assert result.outcome is ClaimOutcome.STALE, f"handed-over slot after a newer slot began: {result!r}"
        assert await anarchon_kit.renew(mid) is not None, "a running older slot stays"
        assert await anarchon_kit.renew(newest) is not None

    # -- row: older slot, any other state -------------------------------------------------------------

    @pytest.mark.parametrize("state", ["done", "failed", "released", "expired"])
    async def test_row_older_slot_ended_new_slot_wins(self, anarchon_kit: Kit, state: str) -> None:
        old = await anarchon_kit.won(
            "job", "a", lease_ms=SHORT_LEASE_MS if state == "expired" else LONG_LEASE_MS
        )
        if state == "expired":
            await anarchon_kit.expire()
        else:
            assert await anarchon_kit.release(
                old, ReleaseOutcome(state if state != "released" else "handover")
            )
        new = await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE)
        assert new.attempt == 1, f"older slot {state}: {new!r}"
        assert new.token > old.token, f"older slot {state}: {new!r}"

    # -- row: newer slot than asked --------------------------------------------------------------------

    async def test_row_newer_slot_is_stale(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a", anarchon_kit.slot + MINUTE)
        assert await anarchon_kit.release(lease, ReleaseOutcome.DONE)
        result = await anarchon_kit.claim("job", "b", anarchon_kit.slot)
        assert result.outcome is ClaimOutcome.STALE, f"claim of an older slot: {result!r}"

    async def test_a_claim_by_the_holder_answers_its_own_lease_again(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a")
        again = await anarchon_kit.claim("job", "a")
        assert again.outcome is ClaimOutcome.WON and again.reissued, (
            "a claim by the owner of the slot's live record (a claim whose answer was lost) must answer "
            f"WON with its own lease again, reissued, so it can run or release it at once; got {again!r}"
        )
        assert again.lease is not None
        assert (again.lease.attempt, again.lease.token) == (lease.attempt, lease.token), again
        assert (await anarchon_kit.claim("job", "b")).outcome is ClaimOutcome.TAKEN, "a reissue wrote"
        assert await anarchon_kit.release(again.lease, ReleaseOutcome.DONE), "the reissued lease releases"
        assert (await anarchon_kit.claim("job", "a")).outcome is ClaimOutcome.DONE

    async def test_a_reissued_lease_keeps_its_expiry(self, anarchon_kit: Kit) -> None:
        short = anarchon_kit.short_lease_ms
        loop = asyncio.get_running_loop()
        lease = await anarchon_kit.won("job", "a", lease_ms=SHORT_LEASE_MS)
        granted = loop.time()
        await asyncio.sleep(short / 2000)
        again = await anarchon_kit.claim("job", "a", lease_ms=SHORT_LEASE_MS)
        rule = ("a claim by the holder of a live record answers WON with that record's lease again, "
                "reissued: same attempt, token and expiry, writing nothing (docs/lease-contract.md, Late "
                "deliveries never revive the past)")
        assert again.outcome is ClaimOutcome.WON and again.reissued and again.lease is not None, (
            f"{rule}; the store answered {again!r}")
        assert (again.lease.attempt, again.lease.token, again.lease.expires_at) == (
            lease.attempt, lease.token, lease.expires_at), (
            f"{rule}; the lease was {lease!r}, the reissue half way through it answered {again.lease!r}")
        other = await anarchon_kit.client()
        taken = await anarchon_kit.claim("job", "b", on=other, lease_ms=SHORT_LEASE_MS)
        assert taken.outcome is ClaimOutcome.TAKEN, f"{rule}; another owner's claim got {taken!r}"
        if taken.expires_at is not None:
            assert taken.expires_at == lease.expires_at, (
                f"{rule}; the record's expiry moved from {lease.expires_at} to {taken.expires_at} "
                f"(another owner's claim answered {taken!r})")
        # The lease ends when it was first granted to: a reissue that refreshed it would hold it longer.
        await asyncio.sleep(max(0.0, granted + (short + anarchon_kit.slack_ms + EXPIRY_MARGIN_MS) / 1000
                                - loop.time()))
        after = await anarchon_kit.claim("job", "b", on=other, lease_ms=SHORT_LEASE_MS)
        assert after.outcome is ClaimOutcome.WON and after.lease is not None and after.lease.attempt == 2, (
            f"{rule}; once the first grant of {short} ms (and the store's slack of "
            f"{anarchon_kit.slack_ms} ms) had run out, another owner's claim got {after!r}: the reissue "
            "extended the lease"
        )

    async def test_a_claim_past_stale_after_is_stale(self, anarchon_kit: Kit) -> None:
        probe = await anarchon_kit.claim("probe", "a")
        now = probe.now if probe.now is not None else time.time_ns() // 1_000_000
        past, future = now - 1_000, now + 600_000
        # Every kind of record: none, same slot expired, same slot handed over, an older slot ended.
        expired = await anarchon_kit.won("expired", "a", lease_ms=SHORT_LEASE_MS)
        handed = await anarchon_kit.won("handed", "a")
        assert await anarchon_kit.release(handed, ReleaseOutcome.HANDOVER)
        older = await anarchon_kit.won("older", "a")
        assert await anarchon_kit.release(older, ReleaseOutcome.DONE)
        await anarchon_kit.expire()
        cases = [("fresh", anarchon_kit.slot), ("expired", anarchon_kit.slot), ("handed", anarchon_kit.slot),
                 ("older", anarchon_kit.slot + MINUTE)]
        for job, slot in cases:
            late = await anarchon_kit.claim(job, "b", slot, stale_after=past)
            assert late.outcome is ClaimOutcome.STALE, (
                f"a claim of {job!r} that reached the store after its stale_after must be STALE (a late "
                f"claim must not revive a past slot); got {late!r}"
            )
        # STALE changed nothing, and a claim within its stale_after is judged by the claim table.
        for job, slot in cases:
            result = await anarchon_kit.claim(job, "c", slot, stale_after=future)
            assert result.outcome is ClaimOutcome.WON and result.lease is not None, (
                f"a claim of {job!r} before its stale_after: {result!r}"
            )
            attempt = 2 if job in ("expired", "handed") else 1
            assert result.lease.attempt == attempt, f"a STALE claim of {job!r} changed the record: {result!r}"
        assert expired.attempt == 1 and handed.attempt == 1

    async def test_a_batch_judges_each_claim_alone(self, anarchon_kit: Kit) -> None:
        kit = anarchon_kit
        probe = await kit.claim("probe", "x")
        now = probe.now if probe.now is not None else time.time_ns() // 1_000_000
        # A record for every refusal the claim table has.
        await kit.won("held", "x")
        done = await kit.won("done", "x")
        assert await kit.release(done, ReleaseOutcome.DONE)
        spent = await kit.won("spent", "x", max_attempts=1)
        assert await kit.release(spent, ReleaseOutcome.HANDOVER)
        await kit.won("running", "x")
        newer = await kit.won("newer", "x", kit.slot + MINUTE)
        assert await kit.release(newer, ReleaseOutcome.DONE)
        refusals = [
            (kit.req("early", "b", now + 600_000), ClaimOutcome.EARLY),
            (kit.req("late", "b", stale_after=now - 60_000), ClaimOutcome.STALE),
            (kit.req("held", "b"), ClaimOutcome.TAKEN),
            (kit.req("done", "b"), ClaimOutcome.DONE),
            (kit.req("spent", "b", max_attempts=1), ClaimOutcome.EXHAUSTED),
            (kit.req("running", "b", kit.slot + MINUTE), ClaimOutcome.SKIPPED),
            (kit.req("newer", "b"), ClaimOutcome.STALE),
        ]
        for round_, order in enumerate((refusals, refusals[::-1])):
            batch: list[tuple[ClaimRequest, ClaimOutcome]] = []
            for i, (req, outcome) in enumerate(order):
                batch += [(kit.req(f"fresh-{round_}-{i}", "b"), ClaimOutcome.WON), (req, outcome)]
            batch.append((kit.req(f"fresh-{round_}-last", "b"), ClaimOutcome.WON))
            results = list(await kit.backend.claim_many([req for req, _ in batch]))
            assert len(results) == len(batch), f"claim_many answered {len(results)} results for {len(batch)}"
            wrong = [f"{req.job!r} (slot {req.slot}): expected {outcome.value}, got {result!r}"
                     for (req, outcome), result in zip(batch, results, strict=True)
                     if result.outcome is not outcome or (result.job, result.slot) != (req.job, req.slot)]
            assert not wrong, (
                "claim_many answers one result per item, in order, each judged as if sent alone "
                "(docs/lease-contract.md, Batches); a refused claim must not change how the items after it "
                "are judged:\n  " + "\n  ".join(wrong)
            )

    async def test_early_slot_is_refused(self, anarchon_kit: Kit) -> None:
        future = time.time_ns() // 1_000_000 + 3_600_000
        result = await anarchon_kit.claim("job", "a", future)
        assert result.outcome is ClaimOutcome.EARLY, f"slot an hour ahead: {result!r}"
        assert (await anarchon_kit.claim("job", "a")).outcome is ClaimOutcome.WON, "EARLY must change nothing"

    # -- store time, max_skew and the granted lease --------------------------------------------------

    async def test_a_slot_beyond_max_skew_is_early(self, anarchon_kit: Kit) -> None:
        probe = await anarchon_kit.claim("probe", "a")
        now = probe.now if probe.now is not None else time.time_ns() // 1_000_000
        ahead = now + 15_000
        result = await anarchon_kit.claim("ahead", "a", ahead, max_skew_ms=2_000)
        assert result.outcome is ClaimOutcome.EARLY, (
            f"a slot 15 s ahead of the store with max_skew_ms=2000 must be EARLY (max_skew ignored?); "
            f"got {result!r}"
        )
        allowed = await anarchon_kit.claim("ahead", "a", ahead, max_skew_ms=60_000)
        assert allowed.outcome is ClaimOutcome.WON, (
            f"a slot 15 s ahead of the store with max_skew_ms=60000 is within max_skew; got {allowed!r}"
        )

    async def test_a_lease_is_granted_as_long_as_asked(self, anarchon_kit: Kit) -> None:
        short = anarchon_kit.short_lease_ms
        lease_ms = short if anarchon_kit.fixed_lease else short * 2
        other_client = await anarchon_kit.client()
        late: list[str] = []
        for attempt in range(3):
            job = f"job-{attempt}"
            # The lease starts at the store's now, which is no earlier than the claim was sent.
            sent = time.monotonic()
            result = await anarchon_kit.claim(job, "a", lease_ms=lease_ms)
            assert result.lease is not None, result
            if result.now is not None:
                assert result.lease.expires_at - result.now >= lease_ms - 50, (
                    f"a lease of {lease_ms} ms was granted until {result.lease.expires_at - result.now} ms "
                    "after the store's now: a lease must run as long as asked, from the store's now; "
                    f"{result!r}"
                )
            # At 70% of the lease, it still holds.
            await asyncio.sleep(max(0.0, sent + lease_ms * 0.7 / 1000 - time.monotonic()))
            other = await anarchon_kit.claim(job, "b", on=other_client, lease_ms=lease_ms)
            if other.outcome is ClaimOutcome.TAKEN:
                return
            if other.now is not None and other.now >= result.lease.expires_at:
                # The second claim reached the store after the lease had run out: this machine stalled
                # past the lease, which says nothing of the store. Try again.
                late.append(f"store's now {other.now - result.lease.expires_at} ms past the expiry")
                continue
            raise AssertionError(
                f"at 70% of a {lease_ms} ms lease another claim got {other.outcome}: the lease was granted "
                f"shorter than asked (the holder loses it early); {result!r}; {other!r}"
            )
        raise AssertionError(
            f"in 3 tries the claim at 70% of a {lease_ms} ms lease reached the store only after the lease "
            f"ran out ({'; '.join(late)}): the test machine is too slow for this lease"
        )

    async def test_a_lease_is_not_granted_longer_than_asked(self, anarchon_kit: Kit) -> None:
        # Longer than asked (a TTL rounded up to whole seconds, as etcd's and many other TTLs are) keeps
        # a dead run's slot from its backups; and a store ends a lease at most its declared slack late.
        loop = asyncio.get_running_loop()
        short = anarchon_kit.short_lease_ms
        lease_ms = short if anarchon_kit.fixed_lease else 600
        slack = anarchon_kit.slack_ms
        result = await anarchon_kit.claim("job", "a", lease_ms=lease_ms)
        granted = loop.time()
        assert result.lease is not None, result
        rule = (f"a won lease runs exactly lease_ms from the store's now: expires_at = now + lease_ms "
                "(docs/lease-contract.md, Store time and max_skew), and ends at most "
                f"expiry_slack_ms={slack} later")
        if result.now is not None:
            granted_ms = result.lease.expires_at - result.now
            assert granted_ms <= lease_ms + 5, (
                f"{rule}; a lease of {lease_ms} ms was granted for {granted_ms} ms: {result!r}")
        await asyncio.sleep(max(0.0, granted + (lease_ms + slack + EXPIRY_MARGIN_MS) / 1000 - loop.time()))
        other = await anarchon_kit.claim("job", "b", on=await anarchon_kit.client(), lease_ms=lease_ms)
        assert other.outcome is ClaimOutcome.WON, (
            f"{rule}; {lease_ms + slack + EXPIRY_MARGIN_MS} ms after the store answered a claim for a "
            f"{lease_ms} ms lease, another owner's claim got {other!r}: the lease was granted longer than "
            "asked, or the store ended it later than its declared slack"
        )

    async def test_fingerprint_is_stored(self, anarchon_kit: Kit) -> None:
        await anarchon_kit.won("job", "a", fingerprint="every:10s")
        taken = await anarchon_kit.claim("job", "b", fingerprint="cron:* * * * *")
        assert taken.fingerprint == "every:10s", (
            f"a claim's result must carry the fingerprint stored with the record ('every:10s'), not echo "
            f"the request's; got {taken.fingerprint!r}"
        )
        lease = await anarchon_kit.won("next", "a", fingerprint="fp-1")
        assert await anarchon_kit.release(lease, ReleaseOutcome.DONE)
        newer = await anarchon_kit.claim("next", "b", anarchon_kit.slot + MINUTE, fingerprint="fp-2")
        assert newer.outcome is ClaimOutcome.WON, newer
        assert newer.fingerprint == "fp-1", (
            f"a won claim must carry the fingerprint stored before it ('fp-1'); got {newer.fingerprint!r}"
        )

    # -- renew ------------------------------------------------------------------------------------------

    async def test_renew_by_owner_extends(self, anarchon_kit: Kit) -> None:
        short = anarchon_kit.short_lease_ms
        fixed = short == anarchon_kit.long_lease_ms
        other = await anarchon_kit.client()
        lease = await anarchon_kit.won("job", "a", lease_ms=SHORT_LEASE_MS)
        first_expiry = time.monotonic() + short / 1000  # the latest the first lease can end
        if fixed:
            # One lease length only: renew half way through, so the renewal ends half a lease later.
            await asyncio.sleep(short / 2000)
        renewed_from = time.monotonic()
        renewed = await anarchon_kit.renew(lease, LONG_LEASE_MS)
        assert renewed is not None, "the owner's renew must succeed"
        assert (renewed.slot, renewed.token, renewed.owner, renewed.attempt) == (
            lease.slot,
            lease.token,
            lease.owner,
            lease.attempt,
        )
        assert renewed.expires_at > lease.expires_at
        # Past the first lease's end, and well before the renewed one's (the earliest it can end).
        renewed_expiry = renewed_from + anarchon_kit.long_lease_ms / 1000
        wake = min(first_expiry + 0.15, (first_expiry + renewed_expiry) / 2)
        await asyncio.sleep(max(0.0, wake - time.monotonic()))
        result = await anarchon_kit.claim("job", "b", on=other)
        assert result.outcome is ClaimOutcome.TAKEN, f"renewed lease must hold: {result!r}"

    async def test_renew_only_by_current_owner(self, anarchon_kit: Kit) -> None:
        from dataclasses import replace

        lease = await anarchon_kit.won("job", "a")
        other = await anarchon_kit.client()
        for forged in (
            replace(lease, owner="b"),
            replace(lease, token=lease.token + 1),
            replace(lease, slot=lease.slot + MINUTE),
        ):
            assert await anarchon_kit.renew(forged, on=other) is None, f"renew of a forged lease {forged!r}"
        assert await anarchon_kit.renew(lease) is not None

    async def test_renew_after_takeover_is_lost(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a", lease_ms=SHORT_LEASE_MS)
        await anarchon_kit.expire()
        other = await anarchon_kit.client()
        taken = await anarchon_kit.claim("job", "b", on=other)
        assert taken.outcome is ClaimOutcome.WON
        assert taken.lease is not None
        assert await anarchon_kit.renew(lease) is None, "a stale runner's renew must fail"
        assert await anarchon_kit.release(lease, ReleaseOutcome.DONE) is False
        assert await anarchon_kit.renew(taken.lease, on=other) is not None

    async def test_renew_after_expiry_is_lost_though_nobody_took_over(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a", lease_ms=SHORT_LEASE_MS)
        await anarchon_kit.expire()
        assert await anarchon_kit.renew(lease) is None, (
            "a renewal that reaches the store after the lease expired must be lost, even when nobody "
            "took the slot over: a renewal delayed in the network must not revive a run its holder "
            "gave up on"
        )
        # ... and it changed nothing: the slot is taken over as after any expiry.
        result = await anarchon_kit.claim("job", "b")
        assert result.outcome is ClaimOutcome.WON and result.lease is not None, result
        assert result.lease.attempt == 2, result

    async def test_renew_after_release_is_lost(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a")
        assert await anarchon_kit.release(lease, ReleaseOutcome.DONE)
        assert await anarchon_kit.renew(lease) is None

    async def test_renewal_counts_from_the_store_now(self, anarchon_kit: Kit) -> None:
        short = anarchon_kit.short_lease_ms
        lease = await anarchon_kit.won("job", "a", lease_ms=SHORT_LEASE_MS)
        await asyncio.sleep(short / 2000)
        renewed = await anarchon_kit.renew(lease, SHORT_LEASE_MS)
        assert renewed is not None, "the owner's renew must succeed"
        # From the store's now: about half a lease past the old expiry. From the old expiry: a whole one.
        assert renewed.expires_at - lease.expires_at < short * 0.8, (
            f"a renewal of {short} ms half way through the lease moved the expiry by "
            f"{renewed.expires_at - lease.expires_at} ms: it must count from the store's now, not extend "
            "the old expiry"
        )

    async def test_no_record_renew_and_release(self, anarchon_kit: Kit) -> None:
        lease = Lease(anarchon_kit.namespace, "never-claimed", anarchon_kit.slot, 1, 1, "a", 0)
        assert await anarchon_kit.renew(lease) is None, "renew of a job with no record must return None"
        assert await anarchon_kit.release(lease, ReleaseOutcome.DONE) is False, (
            "release of a job with no record must return False"
        )
        result = await anarchon_kit.claim("never-claimed", "b")
        assert result.outcome is ClaimOutcome.WON and result.lease is not None, result
        assert result.lease.attempt == 1, f"renew or release of no record created one: {result!r}"

    async def test_renew_and_takeover_race(self, anarchon_kit: Kit) -> None:
        broken = await _race_with_takeover(anarchon_kit, lambda lease: anarchon_kit.renew(lease), "renewal")
        assert not broken, (
            "renew must be atomic against a concurrent claim: a renewal and a takeover of the same record "
            "never both succeed (docs/lease-contract.md, Renew; two winners for one claim):\n  "
            + "\n  ".join(broken)
        )

    async def test_release_and_takeover_race(self, anarchon_kit: Kit) -> None:
        broken = await _race_with_takeover(
            anarchon_kit, lambda lease: anarchon_kit.release(lease, ReleaseOutcome.DONE), "release")
        assert not broken, (
            "release must be atomic against a concurrent claim: a release and a takeover of the same record "
            "never both succeed (docs/lease-contract.md, Release):\n  " + "\n  ".join(broken)
        )

    # -- release ------------------------------------------------------------------------------------------

    async def test_release_only_by_owner_and_once(self, anarchon_kit: Kit) -> None:
        from dataclasses import replace

        lease = await anarchon_kit.won("job", "a")
        assert await anarchon_kit.release(replace(lease, owner="b"), ReleaseOutcome.DONE) is False
        assert await anarchon_kit.release(replace(lease, token=lease.token + 1), ReleaseOutcome.DONE) is False
        assert (await anarchon_kit.claim("job", "b")).outcome is ClaimOutcome.TAKEN, (
            "forged release changed state"
        )
        assert await anarchon_kit.release(lease, ReleaseOutcome.HANDOVER) is True
        assert await anarchon_kit.release(lease, ReleaseOutcome.DONE) is False, (
            "second release must be ignored"
        )

    async def test_stale_release_does_not_disturb_new_holder(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a", lease_ms=SHORT_LEASE_MS)
        await anarchon_kit.expire()
        await anarchon_kit.won("job", "b")
        assert await anarchon_kit.release(lease, ReleaseOutcome.HANDOVER) is False
        assert (await anarchon_kit.claim("job", "c")).outcome is ClaimOutcome.TAKEN

    async def test_an_ended_slot_stays_done(self, anarchon_kit: Kit) -> None:
        # "However long that takes": the kit cannot wait forever, so it waits longer than any timer a
        # store would set from the leases it was asked for (see Kit.patience_s; longer under
        # --anarchon-thorough), on a fresh client.
        ended: dict[str, ReleaseOutcome] = {}
        for outcome in (ReleaseOutcome.DONE, ReleaseOutcome.FAILED):
            lease = await anarchon_kit.won(f"job-{outcome.value}", "a", lease_ms=SHORT_LEASE_MS)
            assert await anarchon_kit.release(lease, outcome)
            ended[lease.job] = outcome
        wait_s = anarchon_kit.patience_s
        await asyncio.sleep(wait_s)
        other = await anarchon_kit.client()
        for job, outcome in ended.items():
            result = await anarchon_kit.claim(job, "b", on=other)
            assert result.outcome is ClaimOutcome.DONE, (
                f"a slot released {outcome.value} must stay DONE until a newer slot is won, however long "
                f"that takes (docs/lease-contract.md, Release: an ended record stays); {wait_s:.1f} s after "
                f"the release the store answered {result!r}: an ended record was forgotten, so the slot "
                "can be won again"
            )

    # -- attempts and tokens ---------------------------------------------------------------------------------

    @pytest.mark.parametrize("max_attempts", [1, 2, 3, 5])
    async def test_max_attempts(self, anarchon_kit: Kit, max_attempts: int) -> None:
        tokens = []
        for attempt in range(1, max_attempts + 1):
            lease = await anarchon_kit.won("job", f"o{attempt}", max_attempts=max_attempts)
            assert lease.attempt == attempt, f"takeover {attempt}: {lease!r}"
            tokens.append(lease.token)
            assert await anarchon_kit.release(lease, ReleaseOutcome.HANDOVER)
        result = await anarchon_kit.claim("job", "late", max_attempts=max_attempts)
        assert result.outcome is ClaimOutcome.EXHAUSTED, f"attempt {max_attempts + 1}: {result!r}"
        assert tokens == sorted(set(tokens)), f"tokens must increase: {tokens}"

    async def test_token_increases_across_claims(self, anarchon_kit: Kit) -> None:
        tokens = []
        for k in range(4):
            first = await anarchon_kit.won("job", "a", anarchon_kit.slot + k * MINUTE)
            assert await anarchon_kit.release(first, ReleaseOutcome.HANDOVER)
            second = await anarchon_kit.won("job", "b", anarchon_kit.slot + k * MINUTE)
            assert await anarchon_kit.release(second, ReleaseOutcome.DONE)
            tokens += [first.token, second.token]
        assert tokens == sorted(set(tokens)), f"the token must increase on every claim: {tokens}"
        # The token is per job: another job starts over.
        assert (await anarchon_kit.won("other", "a")).token == 1

    async def test_namespaces_are_isolated(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a")
        other_ns = anarchon_kit.namespace + "-other"
        assert await anarchon_kit.release(lease, ReleaseOutcome.DONE)
        elsewhere = await anarchon_kit.won("job", "b", namespace=other_ns)
        assert elsewhere.token == 1, f"namespaces share tokens: {elsewhere!r}"
        from dataclasses import replace

        assert await anarchon_kit.renew(replace(elsewhere, namespace=anarchon_kit.namespace)) is None

    @pytest.mark.parametrize("name", ODD_NAMES, ids=["unicode", "quotes", "200-chars", "sql", "punct"])
    async def test_odd_job_names_lease_cycle(self, anarchon_kit: Kit, name: str) -> None:
        lease = await anarchon_kit.won(name, "a")
        renewed = await anarchon_kit.renew(lease)
        assert renewed is not None
        assert renewed.job == name
        assert await anarchon_kit.release(renewed, ReleaseOutcome.HANDOVER)
        taken = await anarchon_kit.won(name, "b")
        assert taken.attempt == 2
        assert taken.job == name


class TestClaimManyContract:
    """`claim_many` (every backend): results in request order, each judged as if claimed alone."""

    pytestmark = tier("claim")

    async def test_batch_in_order(self, anarchon_kit: Kit) -> None:
        reqs = [anarchon_kit.req(f"job-{i}", "a", anarchon_kit.slot) for i in range(10)]
        results = await anarchon_kit.backend.claim_many(reqs)
        assert [(r.job, r.slot) for r in results] == [(q.job, q.slot) for q in reqs]
        assert all(r.outcome is ClaimOutcome.WON for r in results), results

    async def test_duplicates_in_a_batch_have_one_winner(self, anarchon_kit: Kit) -> None:
        reqs = [anarchon_kit.req("job", owner) for owner in "abcde"]
        results = await anarchon_kit.backend.claim_many(reqs)
        assert [r.outcome for r in results].count(ClaimOutcome.WON) == 1, results

    async def test_batch_sees_earlier_claims(self, anarchon_kit: Kit) -> None:
        await anarchon_kit.won("held", "a")
        other = await anarchon_kit.client()
        results = await other.claim_many([anarchon_kit.req("held", "b"), anarchon_kit.req("free", "b")])
        assert [r.outcome for r in results] == [ClaimOutcome.TAKEN, ClaimOutcome.WON], results

    async def test_empty_batch(self, anarchon_kit: Kit) -> None:
        assert list(await anarchon_kit.backend.claim_many([])) == []


class TestReleaseManyContract:
    """`release_many`: a batch of releases, each judged as `release` judges it (every lease backend)."""

    pytestmark = tier("lease")

    async def test_each_release_is_judged_alone(self, anarchon_kit: Kit) -> None:
        from dataclasses import replace

        done = await anarchon_kit.won("done", "a")
        failed = await anarchon_kit.won("failed", "a")
        handed = await anarchon_kit.won("handed", "a")
        forged = await anarchon_kit.won("forged", "a")
        ended = await anarchon_kit.won("ended", "a")
        assert await anarchon_kit.release(ended, ReleaseOutcome.DONE)
        results = await anarchon_kit.backend.release_many([
            (done, ReleaseOutcome.DONE),
            (replace(forged, token=forged.token + 1), ReleaseOutcome.DONE),
            (failed, ReleaseOutcome.FAILED),
            (ended, ReleaseOutcome.DONE),
            (handed, ReleaseOutcome.HANDOVER),
        ])
        assert list(results) == [True, False, True, False, True], results
        # Each record now reads as if released on its own: ended runs are DONE for their slot, the
        # handed-over one is taken over as attempt 2, the forged release changed nothing.
        assert (await anarchon_kit.claim("done", "b")).outcome is ClaimOutcome.DONE
        assert (await anarchon_kit.claim("failed", "b")).outcome is ClaimOutcome.DONE
        taken_over = await anarchon_kit.claim("handed", "b")
        assert taken_over.outcome is ClaimOutcome.WON and taken_over.lease is not None
        assert taken_over.lease.attempt == 2
        assert (await anarchon_kit.claim("forged", "b")).outcome is ClaimOutcome.TAKEN, (
            "a forged release in a batch changed state"
        )
        assert await anarchon_kit.renew(forged) is not None

    async def test_results_follow_the_batch_order(self, anarchon_kit: Kit) -> None:
        from dataclasses import replace

        for round_, names in enumerate(_ordered_names()):
            items: list[tuple[Lease, ReleaseOutcome]] = []
            for name, ok in zip(names, ORDER_PATTERN, strict=True):
                lease = await anarchon_kit.won(f"{round_}-{name}", "a")
                items.append((lease if ok else replace(lease, token=lease.token + 1), ReleaseOutcome.DONE))
            results = list(await anarchon_kit.backend.release_many(items))
            assert results == ORDER_PATTERN, (
                "release_many answers one result per item, in the batch's order (docs/lease-contract.md, "
                f"Batches): released {[lease.job for lease, _ in items]} (every other one forged), expected "
                f"{ORDER_PATTERN}, got {results}"
            )

    async def test_batch_of_one_slot_twice(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a")
        results = await anarchon_kit.backend.release_many(
            [(lease, ReleaseOutcome.DONE), (lease, ReleaseOutcome.HANDOVER)]
        )
        assert list(results) == [True, False], "the second release of one lease in a batch must be ignored"
        assert (await anarchon_kit.claim("job", "b")).outcome is ClaimOutcome.DONE

    async def test_two_slots_of_one_job_under_allow(self, anarchon_kit: Kit) -> None:
        old = await won_allowing_overlap(anarchon_kit)
        new = await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW)
        results = await anarchon_kit.backend.release_many(
            [(new, ReleaseOutcome.DONE), (old, ReleaseOutcome.DONE)]
        )
        assert list(results) == [True, True], results
        assert await anarchon_kit.renew(old) is None, "the older run was released in the batch"
        assert await anarchon_kit.renew(new) is None, "the newer run was released in the batch"
        newer = await anarchon_kit.claim("job", "c", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW)
        assert newer.outcome is ClaimOutcome.DONE, newer

    async def test_handover_of_both_slots_under_allow(self, anarchon_kit: Kit) -> None:
        old = await won_allowing_overlap(anarchon_kit)
        new = await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW)
        results = await anarchon_kit.backend.release_many(
            [(old, ReleaseOutcome.HANDOVER), (new, ReleaseOutcome.HANDOVER)]
        )
        assert list(results) == [True, True], results
        other = await anarchon_kit.client()
        for lease in (old, new):
            result = await anarchon_kit.claim("job", "c", lease.slot, on=other, overlap=Overlap.ALLOW)
            assert result.outcome is ClaimOutcome.WON, f"slot {lease.slot} handed over in a batch: {result!r}"
            assert result.lease is not None and result.lease.attempt == 2, result

    async def test_empty_batch(self, anarchon_kit: Kit) -> None:
        assert list(await anarchon_kit.backend.release_many([])) == []


class TestRenewManyContract:
    """`renew_many`: a batch of renewals, each judged as `renew` judges it (every lease backend)."""

    pytestmark = tier("lease")

    async def test_each_renewal_is_judged_alone(self, anarchon_kit: Kit) -> None:
        from dataclasses import replace

        stale = await anarchon_kit.won("stale", "a", lease_ms=SHORT_LEASE_MS)
        expired = await anarchon_kit.won("expired", "a", lease_ms=SHORT_LEASE_MS)
        await anarchon_kit.expire()
        other = await anarchon_kit.client()
        taken = await anarchon_kit.claim("stale", "b", on=other)
        assert taken.outcome is ClaimOutcome.WON and taken.lease is not None
        live = await anarchon_kit.won("live", "a")
        forged = await anarchon_kit.won("forged", "a")
        released = await anarchon_kit.won("released", "a")
        assert await anarchon_kit.release(released, ReleaseOutcome.DONE)
        live_ms = anarchon_kit.long_lease_ms
        results = list(await anarchon_kit.backend.renew_many([
            (live, live_ms),
            (replace(forged, token=forged.token + 1), live_ms),
            (released, live_ms),
            (stale, live_ms),
            (expired, live_ms),
        ]))
        assert len(results) == 5, results
        renewed, *lost = results
        assert lost == [None, None, None, None], (
            "only the owner's live lease renews (not a forged, released, taken over or expired one): "
            f"{results}"
        )
        assert renewed is not None, "the owner's renew of its live lease in a batch must succeed"
        assert (renewed.slot, renewed.token, renewed.owner, renewed.attempt) == (
            live.slot, live.token, live.owner, live.attempt,
        )
        assert renewed.expires_at >= live.expires_at
        # The renewed lease holds past the short lease it replaced; the others changed nothing.
        assert (await anarchon_kit.claim("live", "b", on=other)).outcome is ClaimOutcome.TAKEN
        assert await anarchon_kit.renew(forged) is not None, "a forged renewal in a batch changed state"
        assert (await anarchon_kit.claim("released", "b", on=other)).outcome is ClaimOutcome.DONE
        assert await anarchon_kit.renew(taken.lease, on=other) is not None

    async def test_results_follow_the_batch_order(self, anarchon_kit: Kit) -> None:
        from dataclasses import replace

        live_ms = anarchon_kit.long_lease_ms
        for round_, names in enumerate(_ordered_names()):
            items: list[tuple[Lease, int]] = []
            for name, ok in zip(names, ORDER_PATTERN, strict=True):
                lease = await anarchon_kit.won(f"{round_}-{name}", "a")
                items.append((lease if ok else replace(lease, token=lease.token + 1), live_ms))
            results = list(await anarchon_kit.backend.renew_many(items))
            got = [None if r is None else r.job for r in results]
            expected = [lease.job if ok else None
                        for (lease, _), ok in zip(items, ORDER_PATTERN, strict=True)]
            assert got == expected, (
                "renew_many answers one result per item, in the batch's order (docs/lease-contract.md, "
                f"Batches): renewed {[lease.job for lease, _ in items]} (every forged one lost), expected "
                f"{expected}, got {got}"
            )

    async def test_two_slots_of_one_job_under_allow(self, anarchon_kit: Kit) -> None:
        old = await won_allowing_overlap(anarchon_kit)
        new = await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW)
        rule = ("renew_many judges each item alone, and under overlap='allow' each slot has its own "
                "record (docs/lease-contract.md, Batches and overlap='allow')")
        for items in ([(new, anarchon_kit.long_lease_ms), (old, anarchon_kit.long_lease_ms)],
                      [(old, anarchon_kit.long_lease_ms), (new, anarchon_kit.long_lease_ms)]):
            results = list(await anarchon_kit.backend.renew_many(items))
            got = [None if r is None else (r.slot, r.owner, r.token) for r in results]
            expected = [(lease.slot, lease.owner, lease.token) for lease, _ in items]
            assert got == expected, (
                f"{rule}: two slots of one job renewed in one batch, expected {expected}, got {got}")
        # Each slot's record was renewed, not one of them twice: a short renewal of the older slot runs
        # out while the newer one holds.
        short = await anarchon_kit.backend.renew_many([(old, anarchon_kit.short_lease_ms),
                                                        (new, anarchon_kit.long_lease_ms)])
        assert all(r is not None for r in short), f"{rule}: {short}"
        await anarchon_kit.expire()
        other = await anarchon_kit.client()
        taken_over = await anarchon_kit.claim("job", "c", old.slot, on=other, overlap=Overlap.ALLOW)
        assert taken_over.outcome is ClaimOutcome.WON, (
            f"{rule}: the older slot was renewed for a short lease, which ran out; a claim of it got "
            f"{taken_over!r}")
        held = await anarchon_kit.claim("job", "c", new.slot, on=other, overlap=Overlap.ALLOW)
        assert held.outcome is ClaimOutcome.TAKEN, (
            f"{rule}: the newer slot was renewed for a long lease in the same batch; a claim of it got "
            f"{held!r}")

    async def test_a_renewed_lease_is_released_as_before(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a")
        [renewed] = await anarchon_kit.backend.renew_many([(lease, anarchon_kit.long_lease_ms)])
        assert renewed is not None
        assert await anarchon_kit.release(renewed, ReleaseOutcome.DONE)
        assert list(await anarchon_kit.backend.renew_many([(lease, anarchon_kit.long_lease_ms)])) == [None]

    async def test_empty_batch(self, anarchon_kit: Kit) -> None:
        assert list(await anarchon_kit.backend.renew_many([])) == []


class TestInspectContract:
    """`inspect` and `jobs` read the stored records."""

    pytestmark = tier("inspect")

    async def test_inspect_unknown_job_is_none(self, anarchon_kit: Kit) -> None:
        assert await anarchon_kit.backend.inspect(anarchon_kit.namespace, "nothing") is None

    async def test_inspect_follows_the_record(self, anarchon_kit: Kit) -> None:
        name = ODD_NAMES[0]
        lease = await anarchon_kit.won(name, "a")
        state = await anarchon_kit.backend.inspect(anarchon_kit.namespace, name)
        assert state is not None
        assert (state.namespace, state.job, state.slot, state.attempt, state.token, state.owner) == (
            anarchon_kit.namespace,
            name,
            lease.slot,
            1,
            lease.token,
            "a",
        )
        assert state.status is JobStatus.RUNNING
        assert state.expires_at > state.now
        assert await anarchon_kit.release(lease, ReleaseOutcome.DONE)
        after = await anarchon_kit.backend.inspect(anarchon_kit.namespace, name)
        assert after is not None
        assert after.status is JobStatus.DONE

    async def test_failed_reads_back_as_failed(self, anarchon_kit: Kit) -> None:
        lease = await anarchon_kit.won("job", "a")
        assert await anarchon_kit.release(lease, ReleaseOutcome.FAILED)
        state = await anarchon_kit.backend.inspect(anarchon_kit.namespace, "job")
        assert state is not None
        assert state.status is JobStatus.FAILED, (
            f"a run released as failed must read back as failed, not {state.status}: {state!r}"
        )

    async def test_jobs_sorted_and_namespaced(self, anarchon_kit: Kit) -> None:
        for name in ("b", "a", "c"):
            await anarchon_kit.won(name, "x")
        await anarchon_kit.won("zz", "x", namespace=anarchon_kit.namespace + "-other")
        states = await anarchon_kit.backend.jobs(anarchon_kit.namespace)
        assert [s.job for s in states] == ["a", "b", "c"], states
        assert all(s.namespace == anarchon_kit.namespace for s in states)


class TestNotifyContract:
    """`notify`: a release is pushed to subscribers, so a handover needs no polling."""

    pytestmark = tier("notify")

    async def test_handover_is_pushed(self, anarchon_kit: Kit) -> None:
        listener = await anarchon_kit.client()
        got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        await listener.subscribe(anarchon_kit.namespace, lambda job, slot: got.put_nowait((job, slot)))
        await asyncio.sleep(0.1)  # let a subscription settle on stores that confirm it asynchronously
        lease = await anarchon_kit.won("job", "a")
        assert await anarchon_kit.release(lease, ReleaseOutcome.HANDOVER)
        job, slot = await asyncio.wait_for(got.get(), timeout=5)
        assert (job, slot) == ("job", lease.slot)

    async def test_handover_of_an_older_slot_under_allow_is_pushed(self, anarchon_kit: Kit) -> None:
        listener = await anarchon_kit.client()
        got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        await listener.subscribe(anarchon_kit.namespace, lambda job, slot: got.put_nowait((job, slot)))
        await asyncio.sleep(0.1)
        old = await won_allowing_overlap(anarchon_kit)
        await anarchon_kit.won("job", "b", anarchon_kit.slot + MINUTE, overlap=Overlap.ALLOW)
        assert await anarchon_kit.release(old, ReleaseOutcome.HANDOVER)
        assert await asyncio.wait_for(got.get(), timeout=5) == ("job", old.slot)

    async def test_other_namespaces_are_not_pushed(self, anarchon_kit: Kit) -> None:
        listener = await anarchon_kit.client()
        got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        await listener.subscribe(anarchon_kit.namespace, lambda job, slot: got.put_nowait((job, slot)))
        await asyncio.sleep(0.1)
        elsewhere = await anarchon_kit.won("other-ns-job", "a", namespace=anarchon_kit.namespace + "-x")
        assert await anarchon_kit.release(elsewhere, ReleaseOutcome.HANDOVER)
        here = await anarchon_kit.won("job", "a")
        assert await anarchon_kit.release(here, ReleaseOutcome.HANDOVER)
        assert await asyncio.wait_for(got.get(), timeout=5) == ("job", here.slot)


async def _heard(got: asyncio.Queue[tuple[str, list[tuple[str, int]]]], owner: str,
                 wanted: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """The (job, slot) pairs pushed as won by `owner` until `wanted` have all come, or 5 s passed."""
    seen: set[tuple[str, int]] = set()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5):
            while not wanted <= seen:
                who, wins = await got.get()
                if who == owner:
                    seen.update(wins)
    return seen


class TestAnnounceContract:
    """`announce`: won claims are pushed to `subscribe_wins` subscribers, so other replicas skip
    claims already decided."""

    pytestmark = tier("announce")

    async def _subscribe(self, kit: Kit) -> asyncio.Queue[tuple[str, list[tuple[str, int]]]]:
        listener = await kit.client()
        got: asyncio.Queue[tuple[str, list[tuple[str, int]]]] = asyncio.Queue()
        await listener.subscribe_wins(kit.namespace, lambda owner, wins: got.put_nowait((owner, list(wins))))
        await asyncio.sleep(0.1)  # let a subscription settle on stores that confirm it asynchronously
        return got

    async def test_a_batch_of_wins_is_pushed_with_its_owner(self, anarchon_kit: Kit) -> None:
        got = await self._subscribe(anarchon_kit)
        # Names as the engine accepts them: any text without control characters.
        names = ["job", *(n for n in ODD_NAMES if "\t" not in n)]
        results = await anarchon_kit.backend.claim_many([anarchon_kit.req(n, "a") for n in names])
        assert all(r.outcome is ClaimOutcome.WON for r in results), results
        wanted = {(n, anarchon_kit.slot) for n in names}
        seen = await _heard(got, "a", wanted)
        assert seen == wanted, f"pushed {sorted(seen)}, expected {sorted(wanted)}"

    async def test_a_takeover_is_pushed(self, anarchon_kit: Kit) -> None:
        if Capability.LEASE not in anarchon_kit.backend.capabilities:
            pytest.skip(f"{type(anarchon_kit.backend).__name__} is claim-only: no slot is taken over")
        got = await self._subscribe(anarchon_kit)
        lease = await anarchon_kit.won("job", "a")
        assert await anarchon_kit.release(lease, ReleaseOutcome.HANDOVER)
        taken = await anarchon_kit.won("job", "b")
        assert taken.attempt == 2
        assert await _heard(got, "b", {("job", lease.slot)}) == {("job", lease.slot)}

    async def test_only_wins_in_the_namespace_are_pushed(self, anarchon_kit: Kit) -> None:
        got = await self._subscribe(anarchon_kit)
        await anarchon_kit.won("elsewhere", "x", namespace=anarchon_kit.namespace + "-other")
        await anarchon_kit.won("held", "a")
        lost = await anarchon_kit.claim("held", "b")
        assert lost.outcome is ClaimOutcome.TAKEN, lost
        await anarchon_kit.won("last", "c")
        pushed: list[tuple[str, list[tuple[str, int]]]] = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                while not any(owner == "c" for owner, _ in pushed):
                    pushed.append(await got.get())
        slot = anarchon_kit.slot
        assert pushed == [("a", [("held", slot)]), ("c", [("last", slot)])], (
            "pushes must carry only this namespace's wins, never a lost claim: got " + repr(pushed))


    async def test_a_reissued_lease_is_not_pushed(self, anarchon_kit: Kit) -> None:
        if Capability.LEASE not in anarchon_kit.backend.capabilities:
            pytest.skip(f"{type(anarchon_kit.backend).__name__} is claim-only: no lease is reissued")
        got = await self._subscribe(anarchon_kit)
        await anarchon_kit.won("held", "a")
        again = await anarchon_kit.claim("held", "a")
        assert again.outcome is ClaimOutcome.WON and again.reissued, again
        await anarchon_kit.won("last", "c")
        pushed: list[tuple[str, list[tuple[str, int]]]] = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                while not any(owner == "c" for owner, _ in pushed):
                    pushed.append(await got.get())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.2):  # anything pushed late, out of order
                while True:
                    pushed.append(await got.get())
        times = sum(wins.count(("held", anarchon_kit.slot)) for owner, wins in pushed if owner == "a")
        assert times <= 1, (
            "wins are pushed for claims the store decided as won, not for a reissued lease "
            f"(docs/lease-contract.md, Capabilities: announce): the win of 'held' was pushed {times} times, "
            f"once more for the holder's own claim answered {again!r}; pushes: {pushed!r}"
        )


class TestControlContract:
    """`control`: each job's paused flag and trigger id, set atomically and read in one call."""

    pytestmark = tier("control")

    async def test_nothing_controlled_reads_empty(self, anarchon_kit: Kit) -> None:
        assert await anarchon_kit.backend.controls(anarchon_kit.namespace) == {}

    async def test_pause_and_resume_read_back(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        name = ODD_NAMES[0]
        assert await backend.set_control(ns, name, paused=True) == JobControl(paused=True)
        other = await anarchon_kit.client()
        assert await other.controls(ns) == {name: JobControl(paused=True)}
        assert await other.set_control(ns, name, paused=False) == JobControl(paused=False)
        assert await backend.controls(ns) == {name: JobControl(paused=False)}

    async def test_trigger_ids_grow_and_keep_the_paused_flag(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        await backend.set_control(ns, "job", paused=True)
        ids = [(await backend.set_control(ns, "job", trigger=True)).trigger for _ in range(5)]
        assert ids == sorted(set(ids)), f"trigger ids must strictly grow: {ids}"
        assert ids[0] > 1_000_000_000_000, f"a trigger id is the store's time in epoch ms: {ids[0]}"
        assert await backend.controls(ns) == {"job": JobControl(paused=True, trigger=ids[-1])}
        after = await backend.set_control(ns, "job")
        assert after == JobControl(paused=True, trigger=ids[-1]), "no change asked, none made"

    async def test_concurrent_triggers_get_distinct_ids(self, anarchon_kit: Kit) -> None:
        clients = [anarchon_kit.backend, *[await anarchon_kit.client() for _ in range(3)]]
        got = await asyncio.gather(*[
            c.set_control(anarchon_kit.namespace, "job", trigger=True) for c in clients for _ in range(3)
        ])
        ids = [g.trigger for g in got]
        assert len(set(ids)) == len(ids), f"each trigger gets its own id: {sorted(ids)}"
        stored = (await anarchon_kit.backend.controls(anarchon_kit.namespace))["job"].trigger
        assert stored == max(ids)

    async def test_a_control_is_pushed_where_the_backend_notifies(self, anarchon_kit: Kit) -> None:
        if "notify" not in anarchon_kit.capabilities:
            pytest.skip(f"{type(anarchon_kit.backend).__name__} lacks 'notify': replicas poll controls")
        listener = await anarchon_kit.client()
        got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        await listener.subscribe(anarchon_kit.namespace, lambda job, slot: got.put_nowait((job, slot)))
        await asyncio.sleep(0.1)  # let a subscription settle on stores that confirm it asynchronously
        await anarchon_kit.backend.set_control(anarchon_kit.namespace + "-x", "elsewhere", paused=True)
        for job, change in ((ODD_NAMES[0], {"paused": True}), ("job", {"trigger": True})):
            await anarchon_kit.backend.set_control(anarchon_kit.namespace, job, **change)
            try:
                pushed = await asyncio.wait_for(got.get(), timeout=5)
            except TimeoutError:
                pytest.fail(f"a backend with 'notify' must push (job, CONTROLS_CHANGED) to the namespace's "
                            f"subscribers after set_control: nothing came within 5 s of {change} of {job!r}")
            assert pushed == (job, CONTROLS_CHANGED), "a control change of another namespace was pushed"

    async def test_joined_names_do_not_share_controls(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        broken: list[str] = []
        for sep in SEPARATORS:
            await backend.set_control(f"{ns}{sep}a", "b", paused=True)
            got = await backend.controls(ns)
            if got:
                broken.append(f"separator {sep!r}: a pause of job 'b' in namespace {ns + sep + 'a'!r} read "
                              f"back in namespace {ns!r} as {got!r}")
        assert not broken, (
            "a namespace and a job never run together, for controls as for claims (docs/lease-contract.md, "
            "Names and Capabilities: control):\n  " + "\n  ".join(broken)
        )

    async def test_controls_are_namespaced(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        await backend.set_control(ns + "-other", "a", paused=True)
        await backend.set_control(ns, "b", paused=True)
        await backend.set_control(ns, "c", trigger=True)
        got = await backend.controls(ns)
        assert sorted(got) == ["b", "c"], got
        assert got["b"].paused and not got["c"].paused and got["c"].trigger > 0


def run(job: str, slot: int, attempt: int = 1, **kw: Any) -> RunRecord:
    """A run record with plausible defaults."""
    fields: dict[str, Any] = {
        "token": slot * 10 + attempt, "instance": "a", "outcome": "done",
        "started_at": 1_700_000_000_000 + slot, "duration_ms": 5, "error": "",
    }
    fields.update(kw)
    return RunRecord(job=job, slot=slot, attempt=attempt, **fields)


def entry(job: str, instance: str = "a", **kw: Any) -> CatalogueEntry:
    """A catalogue entry with plausible defaults."""
    fields: dict[str, Any] = {
        "schedule": "every 10s", "kind": "every", "timezone": "UTC",
        "options": {"lease": "30s", "overlap": "skip"}, "next_slot": 1_700_000_010_000,
    }
    fields.update(kw)
    return CatalogueEntry(job=job, instance=instance, **fields)


class TestHistoryContract:
    """`history`: a bounded history of ended runs per job, and a catalogue of jobs per instance with a TTL."""

    pytestmark = tier("history")

    async def test_nothing_recorded_reads_empty(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        assert await backend.history(ns, "job", 10) == []
        assert await backend.catalogue(ns) == []

    async def test_runs_read_back_newest_first(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        name = ODD_NAMES[1]
        runs = [run(name, 3_000), run(name, 1_000, outcome="failed", error=ODD_ERROR),
                run(name, 2_000), run(name, 2_000, 2, instance="b", outcome="handover")]
        await backend.record_runs(ns, runs, 10)
        other = await anarchon_kit.client()
        got = await other.history(ns, name, 10)
        assert got == [runs[0], runs[3], runs[2], runs[1]], "newest first: by slot, then attempt"
        assert await other.history(ns, name, 2) == [runs[0], runs[3]], "at most `limit`"

    async def test_each_job_keeps_only_its_newest_runs(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        for first in range(0, 12, 4):
            await backend.record_runs(ns, [run("job", s * 1000) for s in range(first, first + 4)], 5)
        await backend.record_runs(ns, [run("other", 1000)], 5)
        got = await backend.history(ns, "job", 100)
        assert [r.slot for r in got] == [s * 1000 for s in range(11, 6, -1)], "the newest 5 are kept"
        assert [r.slot for r in await backend.history(ns, "other", 100)] == [1000]
        await backend.record_runs(ns, [run("job", 500)], 3)
        got = await backend.history(ns, "job", 100)
        assert [r.slot for r in got] == [11_000, 10_000, 9_000], "a smaller keep trims; an old run is dropped"

    async def test_replicas_flushing_the_same_jobs_at_once_keep_each_ones_newest(
            self, anarchon_kit: Kit) -> None:
        """Three clients record runs of the same jobs at once, each every third slot, from each job's
        first run on: each job still keeps exactly its newest runs (a store that counts them must not
        count a run twice, or miss one, when two flushes race)."""
        ns, jobs = anarchon_kit.namespace, [f"job-{j}" for j in range(100)]
        clients = [anarchon_kit.backend, await anarchon_kit.client(), await anarchon_kit.client()]

        async def replica(i: int, client: Any) -> None:
            order = jobs[::-1] if i % 2 else jobs
            for flush in range(8):
                await client.record_runs(ns, [run(job, (flush * 3 + i) * 1000) for job in order], 6)

        await asyncio.gather(*(replica(i, c) for i, c in enumerate(clients)))
        for newest in (24_000, 25_000):  # each flush trims by what the store holds for the job
            await anarchon_kit.backend.record_runs(ns, [run(job, newest) for job in jobs], 6)
        wrong = {}
        for job in jobs:
            kept = [r.slot // 1000 for r in await clients[1].history(ns, job, 100)]
            if kept != list(range(25, 19, -1)):
                wrong[job] = kept
        assert not wrong, f"not the newest 6 of slots 0-25 kept (slot / 1000): {wrong}"

    async def test_a_run_recorded_again_replaces_the_first(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        await backend.record_runs(ns, [run("job", 1000, outcome="lost")], 10)
        await backend.record_runs(ns, [run("job", 1000, outcome="done")], 10)
        got = await backend.history(ns, "job", 10)
        assert [(r.slot, r.attempt, r.outcome) for r in got] == [(1000, 1, "done")]

    async def test_error_text_is_cut(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        long = "RuntimeError: " + "é😀" * ERROR_LIMIT
        await backend.record_runs(ns, [run("job", 1000, outcome="failed", error=long)], 10)
        (got,) = await backend.history(ns, "job", 10)
        assert got.error == long[:ERROR_LIMIT], f"error kept as its first {ERROR_LIMIT} characters"

    async def test_history_is_namespaced(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        await backend.record_runs(ns + "-other", [run("job", 1000)], 10)
        assert await backend.history(ns, "job", 10) == []

    async def test_joined_names_do_not_share_a_history(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        broken: list[str] = []
        for sep in SEPARATORS:
            await backend.record_runs(f"{ns}{sep}a", [run("b", 1_000)], 10)
            got = await backend.history(ns, f"a{sep}b", 10)
            if got:
                broken.append(f"separator {sep!r}: a run of job 'b' in namespace {ns + sep + 'a'!r} "
                              f"read back as job {'a' + sep + 'b'!r} of namespace {ns!r}: {got!r}")
            await backend.publish_catalogue(f"{ns}{sep}a", [entry("b")], 60_000)
            listed = await backend.catalogue(ns)
            if listed:
                broken.append(f"separator {sep!r}: the catalogue of namespace {ns!r} lists namespace "
                              f"{ns + sep + 'a'!r}'s entries: {listed!r}")
        assert not broken, (
            "a namespace and a job never run together, in the history and the catalogue as for claims "
            "(docs/lease-contract.md, Names and history: namespaces are separate):\n  " + "\n  ".join(broken)
        )

    async def test_catalogue_upserts_per_job_and_instance(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        other = await anarchon_kit.client()
        name = ODD_NAMES[0]
        await backend.publish_catalogue(ns, [entry("b"), entry(name, next_slot=None)], 60_000)
        await other.publish_catalogue(ns, [entry("b", "z", kind="cron", schedule="cron '0 8 * * *'",
                                                  timezone="Europe/Athens")], 60_000)
        await backend.publish_catalogue(ns, [entry("b", next_slot=1_700_000_020_000)], 60_000)
        got = await other.catalogue(ns)
        assert [(e.job, e.instance) for e in got] == sorted([("b", "a"), ("b", "z"), (name, "a")])
        by = {(e.job, e.instance): e for e in got}
        assert by[("b", "a")].next_slot == 1_700_000_020_000, "a second publication replaces the first"
        assert by[(name, "a")].next_slot is None
        assert by[("b", "z")].timezone == "Europe/Athens" and by[("b", "z")].kind == "cron"
        assert by[("b", "a")].options == {"lease": "30s", "overlap": "skip"}
        for e in got:
            assert e.seen_at > 1_000_000_000_000, f"seen_at is the store's time in epoch ms: {e.seen_at}"
            assert e == entry(e.job, e.instance, schedule=e.schedule, kind=e.kind, timezone=e.timezone,
                              next_slot=e.next_slot, seen_at=e.seen_at)

    async def test_catalogue_entries_expire_after_their_ttl(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        await backend.publish_catalogue(ns, [entry("gone"), entry("kept")], SHORT_LEASE_MS)
        await backend.publish_catalogue(ns, [entry("kept", "b")], 60_000)
        assert len(await backend.catalogue(ns)) == 3
        await expire()
        assert [(e.job, e.instance) for e in await backend.catalogue(ns)] == [("kept", "b")]
        await backend.publish_catalogue(ns, [entry("gone")], 60_000)
        assert [(e.job, e.instance) for e in await backend.catalogue(ns)] == [("gone", "a"), ("kept", "b")]

    async def test_catalogue_is_namespaced(self, anarchon_kit: Kit) -> None:
        backend, ns = anarchon_kit.backend, anarchon_kit.namespace
        await backend.publish_catalogue(ns + "-other", [entry("job")], 60_000)
        assert await backend.catalogue(ns) == []
