"""Deliberately broken backends: the kit must fail every one of them."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from anarchon import ConfigError, MemoryBackend, MemoryStore
from anarchon.backends import ClaimOutcome, ClaimRequest, ClaimResult, JobStatus, Lease, Overlap
from anarchon_conformance import BackendFactory, StoreClock


class TwoWinnersBackend(MemoryBackend):
    """Check-then-act across an await: concurrent claims of a fresh slot all win."""

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        with self.store.lock:
            job = self.store.jobs.get((request.namespace, request.job))
            fresh = job is None or job.current is None or job.current.slot < request.slot
        await asyncio.sleep(0)  # another client's claim runs here
        result = await super().claim(request)
        if fresh and result.outcome is ClaimOutcome.TAKEN:
            lease = Lease(
                request.namespace, request.job, request.slot, 1, 1, request.owner, result.expires_at or 0
            )
            return ClaimResult(ClaimOutcome.WON, request.job, request.slot, lease=lease, attempt=1)
        return result


class NonOwnerRenewBackend(MemoryBackend):
    """Renews any lease on the job's current slot, whoever holds it."""

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        with self.store.lock:
            job = self.store.jobs.get((lease.namespace, lease.job))
            rec = job.current if job else None
            if rec is None or rec.slot != lease.slot or rec.status is not JobStatus.RUNNING:
                return None
            assert job is not None
            job.current = replace(rec, expires_at=self.store.clock.now_ms() + lease_ms)
            return replace(lease, expires_at=job.current.expires_at)


class IgnoresMaxAttemptsBackend(MemoryBackend):
    """Takes a slot over however many attempts it has had."""

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        return await super().claim(replace(request, max_attempts=1_000_000))


def _factory(cls: type[MemoryBackend], store: MemoryStore) -> BackendFactory:
    async def make() -> MemoryBackend:
        backend = cls(store)
        await backend.open()
        return backend

    return make


def two_winners() -> BackendFactory:
    """Lets two winners through under concurrency."""
    return _factory(TwoWinnersBackend, MemoryStore(StoreClock()))


def non_owner_renew() -> BackendFactory:
    """Lets a non-owner renew."""
    return _factory(NonOwnerRenewBackend, MemoryStore(StoreClock()))


def ignores_max_attempts() -> BackendFactory:
    """Ignores max_attempts."""
    return _factory(IgnoresMaxAttemptsBackend, MemoryStore(StoreClock()))


def client_clock() -> BackendFactory:
    """Reads the client's clock (the process's `time.time_ns`) instead of the store's."""
    return _factory(MemoryBackend, MemoryStore())


def correct() -> BackendFactory:
    """The reference model, for contrast: the kit passes it."""
    return _factory(MemoryBackend, MemoryStore(StoreClock()))


class FixedLeaseBackend(MemoryBackend):
    """A correct store whose lease length is fixed (as a NATS bucket's TTL), refusing `allow`."""

    fixed_lease_ms = 400

    def _check(self, lease_ms: int, overlap: Overlap = Overlap.SKIP) -> None:
        if lease_ms != self.fixed_lease_ms:
            raise ConfigError(f"lease {lease_ms} ms: this store's lease is fixed at {self.fixed_lease_ms} ms")
        if overlap is Overlap.ALLOW:
            raise ConfigError("overlap='allow' is not supported: one lease per job")

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        self._check(request.lease_ms, request.overlap)
        return await super().claim(request)

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        self._check(lease_ms)
        return await super().renew(lease, lease_ms)


class AllowLeavesRecordBackend(FixedLeaseBackend):
    """Says it refuses `overlap="allow"`, but claims the slot (as `skip`) before it does."""

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        if request.overlap is Overlap.ALLOW:
            await super().claim(replace(request, overlap=Overlap.SKIP))
        return await super().claim(request)


def fixed_lease() -> BackendFactory:
    """The reference model with a fixed lease, refusing overlap='allow': the kit passes it."""
    return _factory(FixedLeaseBackend, MemoryStore(StoreClock()))


def allow_leaves_record() -> BackendFactory:
    """Refuses overlap='allow' only after changing the record."""
    return _factory(AllowLeavesRecordBackend, MemoryStore(StoreClock()))
