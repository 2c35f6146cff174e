"""Deliberately broken backends, each breaking one rule of docs/lease-contract.md: the kit fails every one.

Each is the reference model (`MemoryBackend`, or `MemoryClaimBackend`) with one rule broken, and
`BROKEN` lists them with the kit test that must catch each and a phrase its failure must say.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from anarchon import ConfigError, MemoryBackend, MemoryClaimBackend, MemoryStore
from anarchon.backends import (
    Capability,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobControl,
    JobState,
    JobStatus,
    Lease,
    LeaseBackendBase,
    LeaseRecord,
    Overlap,
    ReleaseOutcome,
    RunRecord,
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


class CaseFoldedNamespaceBackend(_Renamed):
    """Compares namespaces case-insensitively (job names exactly)."""

    def key(self, namespace: str, job: str) -> tuple[str, str]:
        return namespace.lower(), job


class HashJoinedNamesBackend(_Renamed):
    """Keys a job by `namespace#job`."""

    def key(self, namespace: str, job: str) -> tuple[str, str]:
        return "", f"{namespace}#{job}"


class CutAtUnitSeparatorBackend(_Renamed):
    """Cuts a job name at its first `\\x1f` (as a key scheme using it as a separator would): a job's
    trigger record becomes the job's own."""

    def key(self, namespace: str, job: str) -> tuple[str, str]:
        return namespace, job.split("\x1f")[0]


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
                if rec is None:  # replaced by a newer slot meanwhile
                    out.append(None)
                    continue
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
                if rec is None:  # replaced by a newer slot meanwhile
                    out.append(False)
                    continue
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


class NonAtomicLiveRenewBackend(MemoryBackend):
    """Renewal is check-then-act and refuses late renewals, and its write is not conditional (an UPDATE
    of the job's row): a renewal racing a takeover of a live lease writes the old holder back."""

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        out: list[Lease | None] = []
        for lease, lease_ms in renewals:
            with self.store.lock:
                job = self.store.jobs.get((lease.namespace, lease.job))
                rec = None if job is None else job.get(lease.slot)
                now = self.store.clock.now_ms()
                held = rec is not None and rec.held_by(lease) and rec.expires_at > now
            if not held or rec is None:
                out.append(None)
                continue
            await asyncio.sleep(0)  # a takeover runs here
            with self.store.lock:
                now = self.store.clock.now_ms()
                job = self.store.jobs[(lease.namespace, lease.job)]
                job.current = replace(rec, expires_at=now + lease_ms, updated_at=now)
                out.append(replace(lease, expires_at=now + lease_ms))
        return out


class RenewManyByJobBackend(MemoryBackend):
    """Renews a batch keyed by job: two slots of one job in one batch are renewed as one."""

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        seen: dict[tuple[str, str], Lease | None] = {}
        out: list[Lease | None] = []
        for lease, lease_ms in renewals:
            key = (lease.namespace, lease.job)
            if key not in seen:
                [seen[key]] = await super().renew_many([(lease, lease_ms)])
            out.append(seen[key])
        return out


class StopsAtRefusalBackend(MemoryBackend):
    """Stops a claim batch at its first EARLY or STALE claim: the items after it are answered TAKEN."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        out: list[ClaimResult] = []
        for i, r in enumerate(requests):
            [result] = await super().claim_many([r])
            out.append(result)
            if result.outcome in (ClaimOutcome.EARLY, ClaimOutcome.STALE):
                out += [ClaimResult(ClaimOutcome.TAKEN, q.job, q.slot, attempt=1) for q in requests[i + 1:]]
                break
        return out


class ReleaseManyByNameBackend(MemoryBackend):
    """Releases a batch in job-name order, and answers in that order."""

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        return await super().release_many(sorted(releases, key=lambda item: item[0].job))


class RenewManyByNameBackend(MemoryBackend):
    """Renews a batch in job-name order, and answers in that order."""

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        return await super().renew_many(sorted(renewals, key=lambda item: item[0].job))


class ColonJoinedControlsBackend(MemoryBackend):
    """Keys controls by `namespace:job`, and reads a namespace's by that prefix."""

    async def set_control(self, namespace: str, job: str, *, paused: bool | None = None,
                          trigger: bool = False) -> JobControl:
        return await super().set_control("", f"{namespace}:{job}", paused=paused, trigger=trigger)

    async def controls(self, namespace: str) -> dict[str, JobControl]:
        prefix = f"{namespace}:"
        return {key.removeprefix(prefix): control for key, control in (await super().controls("")).items()
                if key.startswith(prefix)}


class ReissueRefreshesBackend(_Rewrite):
    """A reissued lease is renewed in the store: the holder's own claim refreshes its expiry."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        results = await super().claim_many(requests)
        out = []
        for r, result in zip(requests, results, strict=True):
            if result.reissued and result.lease is not None:
                [renewed] = await self.renew_many([(result.lease, r.lease_ms)])
                result = replace(result, lease=renewed)
            out.append(result)
        return out


class ReissueAnnouncedBackend(MemoryBackend):
    """Announces a reissued lease again, as a new win."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        results = await super().claim_many(requests)
        for r, result in zip(requests, results, strict=True):
            if result.reissued:
                for sub in list(self.store.win_subscriptions):
                    if sub.namespace == r.namespace:
                        sub.loop.call_soon_threadsafe(sub.callback, r.owner, [(r.job, r.slot)])
        return results


class ColonJoinedHistoryBackend(MemoryBackend):
    """Keys the run history by `namespace:job`: two (namespace, job) pairs share one history."""

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        await super().record_runs("", [replace(run, job=f"{namespace}:{run.job}") for run in runs], keep)

    async def history(self, namespace: str, job: str, limit: int) -> list[RunRecord]:
        return [replace(run, job=job) for run in await super().history("", f"{namespace}:{job}", limit)]


class RoundedUpLeaseBackend(_Rewrite):
    """Grants leases rounded up to whole seconds (as many TTLs are), declaring a second of slack."""

    expiry_slack_ms = 1_000

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return replace(r, lease_ms=-(-r.lease_ms // 1000) * 1000)


class LateExpiryBackend(_Rewrite):
    """Answers the lease as asked, but keeps it 700 ms longer in the store (declaring no slack)."""

    def request(self, r: ClaimRequest) -> ClaimRequest:
        return replace(r, lease_ms=r.lease_ms + 700)

    def result(self, r: ClaimRequest, result: ClaimResult) -> ClaimResult:
        if result.lease is None or result.reissued:
            return result
        return replace(result, lease=replace(result.lease, expires_at=result.lease.expires_at - 700))


class ForgetsEndedLaterBackend(MemoryBackend):
    """Forgets a record that ended two seconds after it ended (a key's TTL)."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        with self.store.lock:
            now = self.store.clock.now_ms()
            for r in requests:
                job = self.store.jobs.get((r.namespace, r.job))
                head = None if job is None else job.current
                if head is not None and head.status in (JobStatus.DONE, JobStatus.FAILED) \
                        and now - head.updated_at > 2_000:
                    del self.store.jobs[(r.namespace, r.job)]
        return await super().claim_many(requests)


class ForgetfulClaimBackend(MemoryClaimBackend):
    """Declares no horizon (forever) but forgets a claim after 1.5 s."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, horizon="1500ms")

    @property
    def horizon_ms(self) -> None:
        return None


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


# -- a store with a clock of its own, for the clock tests' claimers in other processes -----------------


class _RequestClock:
    """A store clock set from each request: the store decides by the client's clock."""

    value = 0

    def now_ms(self) -> int:
        return self.value


class _StoreServer:
    """A `MemoryStore` served on a loopback port from a thread of this process: its clock is this
    process's, whatever the clock of a claimer in another process (unless `client_clock`)."""

    def __init__(self, client_clock: bool) -> None:
        self.clock: Any = _RequestClock() if client_clock else StoreClock()
        self.backend = MemoryBackend(MemoryStore(self.clock), notify=False, announce=False)
        self.loop = asyncio.new_event_loop()
        self.address: tuple[str, int] = ("", 0)
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.address = server.sockets[0].getsockname()[:2]
            ready.set()
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True, name="anarchon-test-store").start()
        ready.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                method, args, client_now = pickle.loads(await reader.readexactly(size))
                if isinstance(self.clock, _RequestClock):
                    self.clock.value = client_now
                try:
                    answer: tuple[str, Any] = ("ok", await getattr(self.backend, method)(*args))
                except Exception as exc:
                    answer = ("error", exc)
                data = pickle.dumps(answer)
                writer.write(len(data).to_bytes(4, "big") + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


class RemoteBackend(LeaseBackendBase):
    """The reference model in a `_StoreServer`, reached over a socket: a store with a clock of its own
    that claimers in other processes share. Each call carries the client's clock (`client_now`)."""

    capabilities = frozenset({Capability.CLAIM, Capability.LEASE, Capability.INSPECT})

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._calls: asyncio.Lock | None = None

    async def open(self) -> None:
        if self._conn is None:
            self._conn = await asyncio.open_connection(*self.address)
            self._calls = asyncio.Lock()

    async def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

    @staticmethod
    def client_now() -> int:
        """This process's clock, epoch ms."""
        return time.time_ns() // 1_000_000

    async def _call(self, method: str, *args: Any) -> Any:
        assert self._conn is not None and self._calls is not None
        reader, writer = self._conn
        async with self._calls:
            data = pickle.dumps((method, args, self.client_now()))
            writer.write(len(data).to_bytes(4, "big") + data)
            await writer.drain()
            size = int.from_bytes(await reader.readexactly(4), "big")
            kind, value = pickle.loads(await reader.readexactly(size))
        if kind != "ok":
            raise value
        return value

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        results: list[ClaimResult] = await self._call("claim_many", list(requests))
        return results

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        results: list[Lease | None] = await self._call("renew_many", list(renewals))
        return results

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        results: list[bool] = await self._call("release_many", list(releases))
        return results

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        state: JobState | None = await self._call("inspect", namespace, job)
        return state


class StaleAfterByClientClockBackend(RemoteBackend):
    """Judges `stale_after` by the client's clock (everything else by the store's)."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        now = self.client_now()
        stale = [r.stale_after is not None and now > r.stale_after for r in requests]
        sent = await super().claim_many([replace(r, stale_after=None) for r, s in zip(requests, stale,
                                                                                     strict=True) if not s])
        answers = iter(sent)
        return [ClaimResult(ClaimOutcome.STALE, r.job, r.slot, now=now) if s else next(answers)
                for r, s in zip(requests, stale, strict=True)]


class InspectClientNowBackend(RemoteBackend):
    """Answers `inspect` with the client's clock as the record's `now`."""

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        state = await super().inspect(namespace, job)
        return None if state is None else replace(state, now=self.client_now())


class OwnSettingsBackend(MemoryBackend):
    """Keeps a settings object of its own in `_settings`, a name BackendBase uses for `sibling()`."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self._settings = ("lease", 30)  # type: ignore[assignment]


class NoUseBackend(MemoryBackend):
    """Made from a URL-like target it keeps to itself, without telling BackendBase (`_use`)."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.where = "memory://elsewhere"

    sibling = LeaseBackendBase.sibling  # type: ignore[assignment]  # the base's, as without MemoryBackend's


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


def _remote_factory(cls: type[RemoteBackend], client_clock: bool = False) -> BackendFactory:
    """Backends of class `cls` on a new `_StoreServer`; the factory can be pickled (an address)."""
    address = _StoreServer(client_clock).address

    async def make() -> RemoteBackend:
        backend = cls(address)
        await backend.open()
        return backend

    return make


def remote() -> BackendFactory:
    """The reference model behind a socket, on the store's clock: the kit's clock tests pass it."""
    return _remote_factory(RemoteBackend)


def client_clock() -> BackendFactory:
    """The reference model behind a socket, deciding everything by each client's clock."""
    return _remote_factory(RemoteBackend, client_clock=True)


@dataclass(frozen=True)
class Broken:
    """One rule of docs/lease-contract.md, a backend that breaks it alone, and how the kit fails it."""

    name: str
    cls: type[Any]
    test: str
    """The kit test that must fail (a `-k` expression that selects it)."""
    says: str
    """A phrase the failure must contain: the rule, not only its symptom."""
    remote: bool = False
    """A `RemoteBackend`, for the clock tests' claimers in other processes."""
    client_clock: bool = False
    """Its store decides by each client's clock."""


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
    Broken("folded_names", FoldedNamesBackend, "test_names_compare_byte_wise", "code point by code point"),
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
    # Rules the kit let through until it was written from the contract rather than from its breakers.
    Broken("non_atomic_live_renew", NonAtomicLiveRenewBackend, "test_renew_and_takeover_race",
           "renew must be atomic"),
    Broken("forgets_ended_later", ForgetsEndedLaterBackend, "test_an_ended_slot_stays_done",
           "an ended record was forgotten"),
    Broken("forgetful_claims", ForgetfulClaimBackend, "test_claims_are_remembered_for_the_horizon",
           "within the declared horizon"),
    Broken("stale_after_by_client_clock", StaleAfterByClientClockBackend,
           "test_early_and_stale_after_follow_the_store_clock", "stale_after is store time", remote=True),
    Broken("renew_many_by_job", RenewManyByJobBackend,
           "TestRenewManyContract and test_two_slots_of_one_job_under_allow", "two slots of one job"),
    Broken("stops_at_refusal", StopsAtRefusalBackend, "test_a_batch_judges_each_claim_alone",
           "each judged as if sent alone"),
    Broken("release_many_by_name", ReleaseManyByNameBackend,
           "TestReleaseManyContract and test_results_follow_the_batch_order", "in the batch's order"),
    Broken("reissue_refreshes", ReissueRefreshesBackend, "test_a_reissued_lease_keeps_its_expiry",
           "same attempt, token and expiry"),
    Broken("reissue_announced", ReissueAnnouncedBackend, "test_a_reissued_lease_is_not_pushed",
           "not for a reissued lease"),
    Broken("inspect_client_now", InspectClientNowBackend, "test_inspect_reads_the_store_clock",
           "the client's clock, not the store's", remote=True),
    Broken("case_folded_namespace", CaseFoldedNamespaceBackend, "test_names_compare_byte_wise",
           "code point by code point"),
    Broken("hash_joined_names", HashJoinedNamesBackend, "test_joined_names_do_not_collide",
           "never run together"),
    Broken("cut_at_unit_separator", CutAtUnitSeparatorBackend, "test_a_name_is_never_cut", "never truncated"),
    Broken("colon_joined_history", ColonJoinedHistoryBackend, "test_joined_names_do_not_share_a_history",
           "never run together"),
    Broken("client_clock", RemoteBackend, "test_store_clock_decides", "the store's clock decides",
           remote=True, client_clock=True),
    Broken("client_clock_renewal", RemoteBackend, "test_a_renewal_follows_the_store_clock",
           "the store's clock decides", remote=True, client_clock=True),
    Broken("rounded_up_lease", RoundedUpLeaseBackend, "test_a_lease_is_not_granted_longer_than_asked",
           "was granted for"),
    Broken("late_expiry", LateExpiryBackend, "test_a_lease_is_not_granted_longer_than_asked",
           "later than its declared slack"),
    Broken("late_expiry_model", LateExpiryBackend, "test_backend_matches_reference_model",
           "expiry_slack_ms"),
    Broken("own_settings", OwnSettingsBackend, "test_the_base_class_names_are_left_to_it",
           "_settings holds"),
    Broken("renew_many_by_name", RenewManyByNameBackend,
           "TestRenewManyContract and test_results_follow_the_batch_order", "in the batch's order"),
    Broken("colon_joined_controls", ColonJoinedControlsBackend, "test_joined_names_do_not_share_controls",
           "never run together"),
]


def broken_factory(cls_name: str) -> BackendFactory:
    """The factory of this module's backend class `cls_name` on a store of its own."""
    cls = globals()[cls_name]
    assert isinstance(cls, type)
    return _factory(cls)


def broken(name: str) -> BackendFactory:
    """The factory of the broken backend `name` (see `BROKEN`)."""
    [entry] = [b for b in BROKEN if b.name == name]
    if entry.remote:
        return _remote_factory(entry.cls, entry.client_clock)
    return _factory(entry.cls)


def __getattr__(name: str) -> Any:
    """`module:two_winners` and the like, for `--anarchon-backend` and the console script."""
    if any(b.name == name for b in BROKEN):
        return lambda: broken(name)
    raise AttributeError(name)


__all__ = ["BROKEN", "Broken", "broken", "broken_factory", "client_clock", "correct", "fixed_lease", "remote"]
