"""The object each suite test works with: its backend, more clients, a namespace and slots."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from anarchon import ConfigError
from anarchon.backends import (
    Capability,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    Lease,
    Overlap,
    ReleaseOutcome,
)

from ._support import BackendPool, request

__all__ = [
    "LONG_LEASE_MS",
    "EXPIRY_MARGIN_MS",
    "PATIENCE_S",
    "SHORT_LEASE_MS",
    "THOROUGH_PATIENCE_S",
    "Kit",
    "allow_refusal",
    "expire",
    "fixed_lease_ms",
    "expiry_slack_ms",
    "lease_for",
]

LONG_LEASE_MS = 30_000
"""A lease that never runs out during a test."""
SHORT_LEASE_MS = 400
"""A lease the suite lets run out, in real time: a real store's clock cannot be faked."""
EXPIRY_MARGIN_MS = 100
"""How long after a lease's end (and its slack) the kit looks: timers and round trips on a busy host."""
PATIENCE_S = 3.0
"""How long the suite waits, at least, before it checks that something kept "forever" (an ended
record, a claim without a horizon) is still there."""
THOROUGH_PATIENCE_S = 15.0
"""The same wait under `--anarchon-thorough`."""


async def expire(lease_ms: int = SHORT_LEASE_MS) -> None:
    """Wait, in real time, until a lease of `lease_ms` granted before the call has expired."""
    await asyncio.sleep(lease_ms / 1000 + 0.15)


def fixed_lease_ms(backend: Any) -> int | None:
    """The one lease length the backend's store allows (`backend.fixed_lease_ms`), or None.

    Some stores fix the lease per store (NatsKVBackend: the bucket's TTL) and refuse any other
    length with `ConfigError`. Such a backend declares `fixed_lease_ms`; the suite then asks for
    exactly that lease in every claim and renew, both where it wants a lease that outlasts the test
    and where it wants one to run out, and waits it out in real time.
    """
    fixed = getattr(backend, "fixed_lease_ms", None)
    if fixed is None:
        return None
    if not isinstance(fixed, int) or isinstance(fixed, bool) or fixed <= 0:
        raise TypeError(f"{backend!r} declares fixed_lease_ms={fixed!r}: declare a positive int (ms) or None")
    return fixed


def expiry_slack_ms(backend: Any) -> int:
    """How much later than its length the backend's store may end a lease (`backend.expiry_slack_ms`,
    0 when undeclared).

    A store that ages leases out with timers of its own on each replica (a replicated NATS Key-Value
    bucket, whose stream leader removes an entry after its TTL) may end one somewhat late. Such a
    backend declares the slack; the suite waits that much longer for a lease to run out.
    """
    slack = getattr(backend, "expiry_slack_ms", 0)
    if not isinstance(slack, int) or isinstance(slack, bool) or slack < 0:
        raise TypeError(f"{backend!r} declares expiry_slack_ms={slack!r}: declare an int (ms) >= 0")
    return slack


async def allow_refusal(backend: Any, req: ClaimRequest) -> ConfigError | None:
    """Claim `req` (overlap="allow"); return the `ConfigError` if the backend refuses the policy.

    A store that keeps one lease per job cannot run two slots side by side (NatsKVBackend): it
    must refuse `overlap="allow"` loudly, with `anarchon.ConfigError`, never treat it as another
    policy. Any other answer is a claim, checked by the caller.
    """
    assert req.overlap is Overlap.ALLOW
    try:
        await backend.claim(req)
    except ConfigError as exc:
        return exc
    return None


def lease_for(backend: Any, lease_ms: int) -> int:
    """`lease_ms`, or the backend's fixed lease when it declares one."""
    fixed = fixed_lease_ms(backend)
    return lease_ms if fixed is None else fixed


def past_slot() -> int:
    """A minute-aligned slot ten minutes ago: never early, whatever the store's clock."""
    return (time.time_ns() // 1_000_000 - 600_000) // 60_000 * 60_000


@dataclass
class Kit:
    """One suite test's view of the backend under test."""

    backend: Any
    """The first client, opened."""
    pool: BackendPool
    namespace: str
    slot: int
    """A slot safely in the past; `slot + k * 60_000` are the next ones."""
    thorough: bool = False
    """`--anarchon-thorough`: wait longer where a rule says "forever" (see `patience_s`)."""

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What the backend declares."""
        caps: frozenset[Capability] = self.backend.capabilities
        return caps

    @property
    def fixed_lease(self) -> bool:
        """True when the backend's store fixes the lease length (`fixed_lease_ms`)."""
        return fixed_lease_ms(self.backend) is not None

    @property
    def long_lease_ms(self) -> int:
        """A lease that outlasts the test (the backend's fixed lease, if it declares one)."""
        return lease_for(self.backend, LONG_LEASE_MS)

    @property
    def short_lease_ms(self) -> int:
        """A lease the test lets run out (the backend's fixed lease, if it declares one)."""
        return lease_for(self.backend, SHORT_LEASE_MS)

    @property
    def slack_ms(self) -> int:
        """How much later than its length the store may end a lease (`expiry_slack_ms`)."""
        return expiry_slack_ms(self.backend)

    @property
    def patience_s(self) -> float:
        """How long to wait before checking that something kept "forever" is still kept: at least
        `PATIENCE_S` (`THOROUGH_PATIENCE_S` under `--anarchon-thorough`), and at least three times the
        short lease and its slack, so that no timer a store sets from the leases it was asked for (a
        key's TTL, a multiple of the lease) has yet to run out when the kit looks."""
        floor = THOROUGH_PATIENCE_S if self.thorough else PATIENCE_S
        return max(floor, 3 * (self.short_lease_ms + self.slack_ms) / 1000)

    async def expire(self) -> None:
        """Wait until a short lease granted before the call has expired."""
        await expire(self.short_lease_ms + expiry_slack_ms(self.backend))

    def req(
        self,
        job: str,
        owner: str = "a",
        slot: int | None = None,
        *,
        lease_ms: int = LONG_LEASE_MS,
        max_attempts: int = 3,
        overlap: Overlap = Overlap.SKIP,
        namespace: str | None = None,
        fingerprint: str = "",
        max_skew_ms: int = 2_000,
        stale_after: int | None = None,
    ) -> ClaimRequest:
        """A claim request in this test's namespace (with the backend's fixed lease, if any)."""
        return request(
            self.namespace if namespace is None else namespace,
            job,
            self.slot if slot is None else slot,
            owner,
            lease_ms=lease_for(self.backend, lease_ms),
            max_attempts=max_attempts,
            overlap=overlap,
            fingerprint=fingerprint,
            max_skew_ms=max_skew_ms,
            stale_after=stale_after,
        )

    async def claim(
        self, job: str, owner: str = "a", slot: int | None = None, *, on: Any = None, **kw: Any
    ) -> ClaimResult:
        """Claim through `on` (default: the first client) and check the result's shape."""
        req = self.req(job, owner, slot, **kw)
        result: ClaimResult = await (on or self.backend).claim(req)
        check_result(req, result)
        return result

    async def won(self, job: str, owner: str = "a", slot: int | None = None, **kw: Any) -> Lease:
        """Claim and insist on winning; return the lease."""
        result = await self.claim(job, owner, slot, **kw)
        assert result.outcome is ClaimOutcome.WON, f"claim of a free slot: expected WON, got {result!r}"
        assert result.lease is not None
        return result.lease

    async def client(self) -> Any:
        """Another client on its own connection."""
        return await self.pool.new()

    async def release(self, lease: Lease, outcome: ReleaseOutcome, *, on: Any = None) -> bool:
        """Release through `on` (default: the first client)."""
        released: bool = await (on or self.backend).release(lease, outcome)
        return released

    async def renew(self, lease: Lease, lease_ms: int = LONG_LEASE_MS, *, on: Any = None) -> Lease | None:
        """Renew through `on` (default: the first client)."""
        renewed: Lease | None = await (on or self.backend).renew(lease, lease_for(self.backend, lease_ms))
        return renewed


def check_result(req: ClaimRequest, result: Any) -> None:
    """Every claim result: a ClaimResult for the asked job and slot, with a lease exactly when WON."""
    assert isinstance(result, ClaimResult), f"claim returned {result!r}, not a ClaimResult"
    where = f"claim of ({req.job!r}, {req.slot}) answered for ({result.job!r}, {result.slot})"
    assert result.job == req.job, where
    assert result.slot == req.slot, where
    assert isinstance(result.outcome, ClaimOutcome), f"outcome {result.outcome!r} is not a ClaimOutcome"
    if result.outcome is ClaimOutcome.WON:
        lease = result.lease
        assert lease is not None, f"WON without a lease: {result!r}"
        assert (lease.namespace, lease.job, lease.slot, lease.owner) == (
            req.namespace,
            req.job,
            req.slot,
            req.owner,
        ), f"lease {lease!r} does not match request {req!r}"
        assert lease.attempt >= 1, f"lease attempt {lease.attempt} < 1"
    else:
        assert result.lease is None, f"{result.outcome} with a lease: {result!r}"
