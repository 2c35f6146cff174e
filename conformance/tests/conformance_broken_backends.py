"""Deliberately broken backends, each breaking one rule of docs/lease-contract.md: the kit fails every one.

Each is the reference model (`MemoryBackend`, or `MemoryClaimBackend`) with one rule broken, and
`BROKEN` lists them with the kit test that must catch each and a phrase its failure must say.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from anarchon import ConfigError, MemoryBackend, MemoryClaimBackend, MemoryStore
from anarchon.backends import (
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobControl,
    JobState,
    JobStatus,
    Lease,
    LeaseRecord,
    Overlap,
    ReleaseOutcome,
)
from anarchon_conformance import BackendFactory, StoreClock

# -- the claim ---------------------------------------------------------------------------------------


class TwoWinnersBackend(MemoryBackend):
    """Check-then-act across an await: concurrent claims of a fresh slot all win."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        out = []
        for request in requests:
            with self.store.lock:
                job = self.store.jobs.get((request.namespace, request.job))
                fresh = job is None or job.current is None or job.current.slot < request.slot
            await asyncio.sleep(0)  # another client's claim runs here
            [result] = await super().claim_many([request])
            if fresh and result.outcome is ClaimOutcome.TAKEN:
                lease = Lease(request.namespace, request.job, request.slot, 1, 1, request.owner,
                              result.expires_at or 0)
                result = ClaimResult(ClaimOutcome.WON, request.job, request.slot, lease=lease, attempt=1)
            out.append(result)
        return out


class _Rewrite(MemoryBackend):
    """Claims rewritten by `request`, and results by `result`, around the reference model."""

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return r

    def result(self, r: ClaimRequest, result: ClaimResult) -> ClaimResult:
        return result

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        results = await super().claim_many([self.request(r) for r in requests])
        return [self.result(r, res) for r, res in zip(requests, results, strict=True)]


class IgnoresMaxAttemptsBackend(_Rewrite):
    """Takes a slot over however many attempts it has had."""

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return replace(r, max_attempts=1_000_000)


class ShortLeaseBackend(_Rewrite):
    """Grants half the lease asked for: the holder loses it early."""

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return replace(r, lease_ms=r.lease_ms // 2)


class IgnoresMaxSkewBackend(_Rewrite):
    """Allows ten minutes of skew, whatever the claim asks."""

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return replace(r, max_skew_ms=600_000)


class EchoedFingerprintBackend(_Rewrite):
    """Answers with the request's fingerprint instead of the stored one."""

    def result(self, r: ClaimRequest, result: ClaimResult) -> ClaimResult:
        return replace(result, fingerprint=r.fingerprint)


class SkipAsReplaceBackend(_Rewrite):
    """Treats overlap skip and buffer_one as replace: two runs of one job at once."""

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return replace(r, overlap=Overlap.REPLACE) if r.overlap in (Overlap.SKIP, Overlap.BUFFER_ONE) else r


class ReplaceAsAllowBackend(_Rewrite):
    """Treats overlap replace as allow: the older lease is not revoked."""

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return replace(r, overlap=Overlap.ALLOW) if r.overlap is Overlap.REPLACE else r


class IgnoresStaleAfterBackend(_Rewrite):
    """Ignores `stale_after`: a claim delivered late still starts a past slot."""

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return replace(r, stale_after=None)


class NoReissueBackend(_Rewrite):
    """Answers TAKEN to the holder's own claim: a claim whose answer was lost strands its slot."""

    def result(self, r: ClaimRequest, result: ClaimResult) -> ClaimResult:
        if not result.reissued:
            return result
        return ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, holder=r.owner, attempt=result.attempt,
                           expires_at=result.expires_at, now=result.now)


class TokenPerSlotBackend(MemoryBackend):
    """Counts tokens per slot, not per job: a new slot starts over at token 1."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        with self.store.lock:
            for r in requests:
                job = self.store.jobs.get((r.namespace, r.job))
                if job is not None and job.current is not None and r.slot > job.current.slot:
                    job.token = 0
        return await super().claim_many(requests)


class _Fabricated(_Rewrite):
    """Answers WON where the reference model answers `instead` (without writing it)."""

    instead: ClaimOutcome

    def result(self, r: ClaimRequest, result: ClaimResult) -> ClaimResult:
        if result.outcome is not self.instead:
            return result
        lease = Lease(r.namespace, r.job, r.slot, 1, 999, r.owner, (result.now or 0) + r.lease_ms)
        return ClaimResult(ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=r.owner, attempt=1,
                           now=result.now)


class OlderSlotWinsBackend(_Fabricated):
    """Lets a late instance win an older slot after a newer one began."""

    instead = ClaimOutcome.STALE


class DoneSlotWinsBackend(_Fabricated):
    """Lets a slot that ran to its end be won again."""

    instead = ClaimOutcome.DONE


class ReversedBatchBackend(MemoryBackend):
    """Answers a claim batch in reverse order."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        return list(reversed(await super().claim_many(requests)))


class ForgetsEndedBackend(MemoryBackend):
    """Forgets a record that ended (done or failed) half a second after it ended."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        with self.store.lock:
            now = self.store.clock.now_ms()
            for r in requests:
                job = self.store.jobs.get((r.namespace, r.job))
                head = None if job is None else job.current
                if head is not None and head.status in (JobStatus.DONE, JobStatus.FAILED) \
                        and now - head.updated_at > 500:
                    del self.store.jobs[(r.namespace, r.job)]
        return await super().claim_many(requests)


# -- names -------------------------------------------------------------------------------------------


class _Renamed(MemoryBackend):
    """Stores each (namespace, job) under `key(namespace, job)`; answers under the names asked."""

    def key(self, namespace: str, job: str) -> tuple[str, str]:
        return namespace, job

    def _in(self, lease: Lease) -> Lease:
        namespace, job = self.key(lease.namespace, lease.job)
        return replace(lease, namespace=namespace, job=job)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        inner = [replace(r, namespace=self.key(r.namespace, r.job)[0], job=self.key(r.namespace, r.job)[1])
                 for r in requests]
        results = await super().claim_many(inner)
        return [
            replace(res, job=r.job,
                    lease=None if res.lease is None else replace(res.lease, namespace=r.namespace, job=r.job))
            for r, res in zip(requests, results, strict=True)
        ]

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        results = await super().renew_many([(self._in(lease), ms) for lease, ms in renewals])
        return [None if res is None else replace(res, namespace=lease.namespace, job=lease.job)
                for (lease, _), res in zip(renewals, results, strict=True)]

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        return await super().release_many([(self._in(lease), outcome) for lease, outcome in releases])


class JoinedNamesBackend(_Renamed):
    """Keys a job by `namespace:job`: namespace `a:b` with job `c` is namespace `a` with job `b:c`."""

    def key(self, namespace: str, job: str) -> tuple[str, str]:
        return "", f"{namespace}:{job}"


class FoldedNamesBackend(_Renamed):
    """Compares names as a case-insensitive PAD SPACE collation does: `report`, `Report`, `report `."""

    def key(self, namespace: str, job: str) -> tuple[str, str]:
        return namespace.rstrip(" ").lower(), job.rstrip(" ").lower()


# -- renew and release -------------------------------------------------------------------------------


class NonOwnerRenewBackend(MemoryBackend):
    """Renews any lease on the job's current slot, whoever holds it."""

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        out: list[Lease | None] = []
        with self.store.lock:
            for lease, lease_ms in renewals:
                job = self.store.jobs.get((lease.namespace, lease.job))
                rec = job.current if job else None
                if job is None or rec is None or (rec.slot, rec.status) != (lease.slot, JobStatus.RUNNING):
                    out.append(None)
                    continue
                job.current = replace(rec, expires_at=self.store.clock.now_ms() + lease_ms)
                out.append(replace(lease, expires_at=job.current.expires_at))
        return out


class _RenewsByHolderBackend(MemoryBackend):
    """Renews every lease whose holder asks, expired or not, to the record `_extended` returns."""

    def _extended(self, rec: LeaseRecord, lease_ms: int) -> LeaseRecord:
        raise NotImplementedError

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        out: list[Lease | None] = []
        with self.store.lock:
            for lease, lease_ms in renewals:
                job = self.store.jobs.get((lease.namespace, lease.job))
                rec = None if job is None else job.get(lease.slot)
                if job is None or rec is None or not rec.held_by(lease):
                    out.append(None)
                    continue
                extended = self._extended(rec, lease_ms)
                job.put(extended)
                out.append(replace(lease, expires_at=extended.expires_at))
        return out


class RenewFromOldExpiryBackend(_RenewsByHolderBackend):
    """Extends a lease from its old expiry instead of from the store's now."""

    def _extended(self, rec: LeaseRecord, lease_ms: int) -> LeaseRecord:
        return replace(rec, expires_at=rec.expires_at + lease_ms)


class RenewsExpiredBackend(_RenewsByHolderBackend):
    """Renews an expired lease that nobody took over: a renewal delivered late revives the run."""

    def _extended(self, rec: LeaseRecord, lease_ms: int) -> LeaseRecord:
        now = self.store.clock.now_ms()
        return replace(rec, expires_at=now + lease_ms, updated_at=now)


class RenewWithoutRecordBackend(MemoryBackend):
    """Renews a lease of a job that has no record at all."""

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        results = await super().renew_many(renewals)
        return [lease if res is None and (lease.namespace, lease.job) not in self.store.jobs else res
                for (lease, _), res in zip(renewals, results, strict=True)]


class _NotAtomic(MemoryBackend):
    """Checks the lease under the lock, lets other calls run, then writes without checking again."""

    async def _check_then_act(self, lease: Lease) -> bool:
        with self.store.lock:
            job = self.store.jobs.get((lease.namespace, lease.job))
            rec = None if job is None else job.get(lease.slot)
            held = rec is not None and rec.held_by(lease)
        await asyncio.sleep(0)  # a takeover runs here
        return held


class NonAtomicRenewBackend(_NotAtomic):
    """Renewal is check-then-act: it can overwrite a concurrent takeover."""

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        out: list[Lease | None] = []
        for lease, lease_ms in renewals:
            if not await self._check_then_act(lease):
                out.append(None)
                continue
            with self.store.lock:
                job = self.store.jobs[(lease.namespace, lease.job)]
                rec = job.get(lease.slot)
                assert rec is not None
                now = self.store.clock.now_ms()
                job.put(replace(rec, attempt=lease.attempt, token=lease.token, owner=lease.owner,
                                status=JobStatus.RUNNING, expires_at=now + lease_ms, updated_at=now))
                out.append(replace(lease, expires_at=now + lease_ms))
        return out


class NonAtomicReleaseBackend(_NotAtomic):
    """Release is check-then-act: it can end a run a concurrent takeover just began."""

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        out = []
        for lease, outcome in releases:
            if not await self._check_then_act(lease):
                out.append(False)
                continue
            with self.store.lock:
                job = self.store.jobs[(lease.namespace, lease.job)]
                rec = job.get(lease.slot)
                assert rec is not None
                job.put(replace(rec, status=outcome.status, updated_at=self.store.clock.now_ms()))
            out.append(True)
        return out


class FailedAsDoneBackend(MemoryBackend):
    """Stores a run released as failed as done."""

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        return await super().release_many([
            (lease, ReleaseOutcome.DONE if outcome is ReleaseOutcome.FAILED else outcome)
            for lease, outcome in releases
        ])


class ReleasedTwiceBackend(MemoryBackend):
    """Answers True to a second release of the same lease."""

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        results = await super().release_many(releases)
        out = []
        for (lease, _), released in zip(releases, results, strict=True):
            job = self.store.jobs.get((lease.namespace, lease.job))
            rec = None if job is None else job.get(lease.slot)
            again = rec is not None and (rec.token, rec.owner) == (lease.token, lease.owner)
            out.append(released or again)
        return out


# -- capabilities ------------------------------------------------------------------------------------


class SiblingElsewhereBackend(MemoryBackend):
    """Offers a sibling on another store."""

    def sibling(self) -> SiblingElsewhereBackend:
        return SiblingElsewhereBackend(MemoryStore(self.store.clock))


class ReopenFailsBackend(MemoryBackend):
    """Fails a second `open()`."""

    opened = False

    async def open(self) -> None:
        if self.opened:
            raise RuntimeError("already open")
        self.opened = True


class UnsortedJobsBackend(MemoryBackend):
    """Lists jobs in reverse order."""

    async def jobs(self, namespace: str) -> list[JobState]:
        return list(reversed(await super().jobs(namespace)))


class SilentNotifyBackend(MemoryBackend):
    """Declares `notify` but never pushes a handover."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, notify=False)
        self.capabilities = MemoryBackend.capabilities  # type: ignore[misc]


class SilentControlsBackend(MemoryBackend):
    """Pushes handovers but not control changes."""

    async def set_control(self, namespace: str, job: str, *, paused: bool | None = None,
                          trigger: bool = False) -> JobControl:
        self.notify = False
        try:
            return await super().set_control(namespace, job, paused=paused, trigger=trigger)
        finally:
            self.notify = True


class NotifyEveryNamespaceBackend(MemoryBackend):
    """Pushes a handover to the subscribers of every namespace."""

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        results = await super().release_many(releases)
        for (lease, outcome), released in zip(releases, results, strict=True):
            if released and outcome is ReleaseOutcome.HANDOVER:
                for sub in list(self.store.subscriptions):
                    if sub.namespace != lease.namespace:
                        sub.loop.call_soon_threadsafe(sub.callback, lease.job, lease.slot)
        return results


class ShortHorizonBackend(MemoryClaimBackend):
    """Declares a one-minute horizon but forgets a claim after 300 ms."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, horizon="300ms")

    @property
    def horizon_ms(self) -> int:
        return 60_000


# -- correct backends the kit passes -----------------------------------------------------------------


class FixedLeaseBackend(MemoryBackend):
    """A correct store whose lease length is fixed (as a NATS bucket's TTL), refusing `allow`."""

    fixed_lease_ms = 400

    def _check(self, lease_ms: int, overlap: Overlap = Overlap.SKIP) -> None:
        if lease_ms != self.fixed_lease_ms:
            raise ConfigError(f"lease {lease_ms} ms: this store's lease is fixed at {self.fixed_lease_ms} ms")
        if overlap is Overlap.ALLOW:
            raise ConfigError("overlap='allow' is not supported: one lease per job")

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        for r in requests:
            self._check(r.lease_ms, r.overlap)
        return await super().claim_many(requests)

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        for _, lease_ms in renewals:
            self._check(lease_ms)
        return await super().renew_many(renewals)


class AllowLeavesRecordBackend(FixedLeaseBackend):
    """Says it refuses `overlap="allow"`, but claims the slot (as `skip`) before it does."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        for r in requests:
            if r.overlap is Overlap.ALLOW:
                await super().claim_many([replace(r, overlap=Overlap.SKIP)])
        return await super().claim_many(requests)


# -- factories -----------------------------------------------------------------------------------------


def _factory(cls: type[Any], store: MemoryStore | None = None) -> BackendFactory:
    shared = store or MemoryStore(StoreClock())

    async def make() -> Any:
        backend = cls(shared)
        await backend.open()
        return backend

    return make


def correct() -> BackendFactory:
    """The reference model, for contrast: the kit passes it."""
    return _factory(MemoryBackend)


def fixed_lease() -> BackendFactory:
    """The reference model with a fixed lease, refusing overlap='allow': the kit passes it."""
    return _factory(FixedLeaseBackend)


def client_clock() -> BackendFactory:
    """Reads the client's clock (the process's `time.time_ns`) instead of the store's."""
    return _factory(MemoryBackend, MemoryStore())


@dataclass(frozen=True)
class Broken:
    """One rule of docs/lease-contract.md, a backend that breaks it alone, and how the kit fails it."""

    name: str
    cls: type[Any]
    test: str
    """The kit test that must fail (a `-k` expression that selects it)."""
    says: str
    """A phrase the failure must contain: the rule, not only its symptom."""


BROKEN = [
    Broken("two_winners", TwoWinnersBackend, "test_race_32_clients_fresh_connections or test_exact_count",
           "two winners for one claim"),
    Broken("ignores_max_attempts", IgnoresMaxAttemptsBackend, "test_max_attempts", "EXHAUSTED"),
    Broken("short_lease", ShortLeaseBackend, "test_a_lease_is_granted_as_long_as_asked",
           "as long as asked"),
    Broken("ignores_max_skew", IgnoresMaxSkewBackend, "test_a_slot_beyond_max_skew_is_early", "max_skew"),
    Broken("echoed_fingerprint", EchoedFingerprintBackend, "test_fingerprint_is_stored", "not echo"),
    Broken("skip_as_replace", SkipAsReplaceBackend, "test_row_older_slot_live_skipped", "overlap="),
    Broken("replace_as_allow", ReplaceAsAllowBackend, "test_row_older_slot_live_replace", "revoked"),
    Broken("ignores_stale_after", IgnoresStaleAfterBackend, "test_a_claim_past_stale_after_is_stale",
           "must not revive a past slot"),
    Broken("no_reissue", NoReissueBackend, "test_a_claim_by_the_holder_answers_its_own_lease_again",
           "its own lease again"),
    Broken("token_per_slot", TokenPerSlotBackend, "test_token_increases_across_claims",
           "the token must increase"),
    Broken("older_slot_wins", OlderSlotWinsBackend, "test_row_newer_slot_is_stale", "claim of an older slot"),
    Broken("done_slot_wins", DoneSlotWinsBackend, "test_row_same_slot_ended_is_done", "after release"),
    Broken("reversed_batch", ReversedBatchBackend, "test_batch_in_order", "assert"),
    Broken("forgets_ended", ForgetsEndedBackend, "test_an_ended_slot_stays_done",
           "an ended record was forgotten"),
    Broken("joined_names", JoinedNamesBackend, "test_joined_names_do_not_collide", "collide"),
    Broken("folded_names", FoldedNamesBackend, "test_names_compare_byte_wise", "byte-wise"),
    Broken("non_owner_renew", NonOwnerRenewBackend, "test_renew_only_by_current_owner", "forged lease"),
    Broken("renew_from_old_expiry", RenewFromOldExpiryBackend, "test_renewal_counts_from_the_store_now",
           "not extend the old expiry"),
    Broken("renews_expired", RenewsExpiredBackend, "test_renew_after_expiry_is_lost_though_nobody_took_over",
           "after the lease expired must be lost"),
    Broken("renew_without_record", RenewWithoutRecordBackend, "test_no_record_renew_and_release",
           "no record must return None"),
    Broken("non_atomic_renew", NonAtomicRenewBackend, "test_renew_and_takeover_race",
           "renew must be atomic"),
    Broken("non_atomic_release", NonAtomicReleaseBackend, "test_release_and_takeover_race",
           "release must be atomic"),
    Broken("failed_as_done", FailedAsDoneBackend, "test_failed_reads_back_as_failed", "read back as failed"),
    Broken("released_twice", ReleasedTwiceBackend, "test_release_only_by_owner_and_once",
           "second release must be ignored"),
    Broken("sibling_elsewhere", SiblingElsewhereBackend, "test_a_sibling_sees_the_same_store", "sibling"),
    Broken("reopen_fails", ReopenFailsBackend, "test_open_and_close_are_idempotent", "already open"),
    Broken("unsorted_jobs", UnsortedJobsBackend, "test_jobs_sorted_and_namespaced", "assert"),
    Broken("silent_notify", SilentNotifyBackend, "test_handover_is_pushed", "TimeoutError"),
    Broken("silent_controls", SilentControlsBackend, "test_a_control_is_pushed_where_the_backend_notifies",
           "must push (job, CONTROLS_CHANGED)"),
    Broken("notify_every_namespace", NotifyEveryNamespaceBackend, "test_other_namespaces_are_not_pushed",
           "other-ns-job"),
    Broken("short_horizon", ShortHorizonBackend, "test_claims_are_remembered_for_the_horizon",
           "within the declared horizon"),
    Broken("allow_leaves_record", AllowLeavesRecordBackend, "test_row_older_slot_live_allow",
           "refused overlap='allow' claim left a record"),
]


def broken(name: str) -> BackendFactory:
    """The factory of the broken backend `name` (see `BROKEN`)."""
    [entry] = [b for b in BROKEN if b.name == name]
    return _factory(entry.cls)


def __getattr__(name: str) -> Any:
    """`module:two_winners` and the like, for `--anarchon-backend` and the console script."""
    if any(b.name == name for b in BROKEN):
        return lambda: broken(name)
    raise AttributeError(name)


__all__ = ["BROKEN", "Broken", "broken", "client_clock", "correct", "fixed_lease"]
