"""Every row of the claim table, run against MemoryBackend (the reference) and the Lua scripts.

Each scenario is a list of steps; both backends must give the same normalised answers, and those
answers must be the expected ones. Leases are either long (60 s, live) or zero (expired at once,
since expiry is inclusive), so no step depends on timing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from anarchon.backends import (
    ClaimRequest,
    ClaimResult,
    Lease,
    MemoryBackend,
    Overlap,
    ReleaseOutcome,
)
from anarchon_redis import RedisBackend, ValkeyBackend

LIVE = 60_000
NS = "sm"

# A step: ("claim", name, slot offset, owner, options) | ("renew", name, lease_ms)
#         | ("release", name, outcome) | ("inspect", job)
Step = tuple[Any, ...]
C = "claim"

SCENARIOS: dict[str, tuple[list[Step], list[str | bool | None]]] = {
    "none-won": ([(C, "a", 0, "A", {})], ["won"]),
    "same-slot-live-taken": ([(C, "a", 0, "A", {}), (C, "b", 0, "B", {})], ["won", "taken"]),
    "same-slot-done": (
        [(C, "a", 0, "A", {}), ("release", "a", ReleaseOutcome.DONE), (C, "b", 0, "B", {})],
        ["won", True, "done"],
    ),
    "same-slot-failed": (
        [(C, "a", 0, "A", {}), ("release", "a", ReleaseOutcome.FAILED), (C, "b", 0, "B", {})],
        ["won", True, "done"],
    ),
    "same-slot-released-takeover": (
        [(C, "a", 0, "A", {}), ("release", "a", ReleaseOutcome.HANDOVER), (C, "b", 0, "B", {}),
         ("renew", "a", LIVE), ("renew", "b", LIVE)],
        ["won", True, "won", None, "lease"],
    ),
    "same-slot-expired-takeover": (
        [(C, "a", 0, "A", {"lease_ms": 0}), (C, "b", 0, "B", {}), ("release", "a", ReleaseOutcome.DONE)],
        ["won", "won", False],
    ),
    "exhausted": (
        [(C, "a", 0, "A", {"max_attempts": 2}), ("release", "a", ReleaseOutcome.HANDOVER),
         (C, "b", 0, "B", {"max_attempts": 2}), ("release", "b", ReleaseOutcome.HANDOVER),
         (C, "c", 0, "C", {"max_attempts": 2})],
        ["won", True, "won", True, "exhausted"],
    ),
    "exhausted-expired": (
        [(C, "a", 0, "A", {"max_attempts": 1, "lease_ms": 0}), (C, "b", 0, "B", {"max_attempts": 1})],
        ["won", "exhausted"],
    ),
    "expired-but-not-taken-is-lost": (
        [(C, "a", 0, "A", {"lease_ms": 0}), ("renew", "a", LIVE), (C, "b", 0, "B", {})],
        ["won", None, "won"],
    ),
    "past-stale-after-is-stale": (
        [(C, "a", 0, "A", {"stale_after": 1}), (C, "a", 0, "A", {"stale_after": 10**13}),
         (C, "b", 0, "B", {"stale_after": 1})],
        ["stale", "won", "stale"],
    ),
    "older-live-skip": (
        [(C, "a", 0, "A", {}), (C, "b", 1000, "B", {"overlap": Overlap.SKIP})], ["won", "skipped"],
    ),
    "older-live-buffer-one": (
        [(C, "a", 0, "A", {}), (C, "b", 1000, "B", {"overlap": Overlap.BUFFER_ONE}),
         ("release", "a", ReleaseOutcome.DONE), (C, "c", 1000, "B", {"overlap": Overlap.BUFFER_ONE})],
        ["won", "skipped", True, "won"],
    ),
    "older-live-replace": (
        [(C, "a", 0, "A", {}), (C, "b", 1000, "B", {"overlap": Overlap.REPLACE}), ("renew", "a", LIVE),
         ("release", "a", ReleaseOutcome.DONE), ("inspect", "j")],
        ["won", "won", None, False, "state"],
    ),
    "older-live-allow": (
        [(C, "a", 0, "A", {"overlap": Overlap.ALLOW}), (C, "b", 1000, "B", {"overlap": Overlap.ALLOW}),
         ("renew", "a", LIVE), (C, "a2", 0, "C", {"overlap": Overlap.ALLOW}),
         ("release", "a", ReleaseOutcome.DONE), (C, "a3", 0, "C", {"overlap": Overlap.ALLOW}),
         ("release", "b", ReleaseOutcome.DONE), ("inspect", "j")],
        ["won", "won", "lease", "taken", True, "stale", True, "state"],
    ),
    "allow-older-takeover-after-expiry": (
        [(C, "a", 0, "A", {"overlap": Overlap.ALLOW}), (C, "b", 1000, "B", {"overlap": Overlap.ALLOW}),
         ("renew", "a", 0), (C, "c", 0, "C", {"overlap": Overlap.ALLOW}), ("renew", "a", LIVE),
         ("renew", "c", LIVE), ("release", "c", ReleaseOutcome.HANDOVER),
         # The handed-over older slot keeps its record (released, attempt 2), judged as the newest.
         (C, "d", 0, "D", {"overlap": Overlap.ALLOW, "max_attempts": 2}),
         (C, "e", 0, "E", {"overlap": Overlap.ALLOW, "max_attempts": 3}), ("renew", "b", LIVE)],
        ["won", "won", "lease", "won", None, "lease", True, "exhausted", "won", "lease"],
    ),
    "allow-older-handover-superseded-by-newer-slot": (
        [(C, "a", 0, "A", {"overlap": Overlap.ALLOW}), (C, "b", 1000, "B", {"overlap": Overlap.ALLOW}),
         ("release", "a", ReleaseOutcome.HANDOVER), (C, "c", 2000, "C", {"overlap": Overlap.ALLOW}),
         (C, "d", 0, "D", {"overlap": Overlap.ALLOW}), ("renew", "b", LIVE)],
        ["won", "won", True, "won", "stale", "lease"],
    ),
    "allow-others-pruned-after-end": (
        [(C, "a", 0, "A", {"overlap": Overlap.ALLOW}), (C, "b", 1000, "B", {"overlap": Overlap.ALLOW}),
         ("release", "b", ReleaseOutcome.DONE), (C, "c", 2000, "C", {"overlap": Overlap.ALLOW}),
         ("renew", "a", LIVE), (C, "d", 3000, "D", {"overlap": Overlap.SKIP})],
        ["won", "won", True, "won", "lease", "skipped"],
    ),
    "older-expired-new-slot": (
        [(C, "a", 0, "A", {"lease_ms": 0}), (C, "b", 1000, "B", {}), ("renew", "a", LIVE)],
        ["won", "won", None],
    ),
    "older-done-new-slot": (
        [(C, "a", 0, "A", {}), ("release", "a", ReleaseOutcome.DONE), (C, "b", 1000, "B", {})],
        ["won", True, "won"],
    ),
    "older-released-new-slot": (
        [(C, "a", 0, "A", {}), ("release", "a", ReleaseOutcome.HANDOVER), (C, "b", 1000, "B", {})],
        ["won", True, "won"],
    ),
    "newer-slot-stale": ([(C, "a", 1000, "A", {}), (C, "b", 0, "B", {})], ["won", "stale"]),
    "early": ([(C, "a", 60_000, "A", {}), (C, "b", 60_000, "A", {"max_skew_ms": 120_000})],
              ["early", "won"]),
    "fingerprint-kept-and-reported": (
        [(C, "a", 0, "A", {"fingerprint": "every:10s"}), (C, "b", 0, "B", {"fingerprint": "every:20s"}),
         ("release", "a", ReleaseOutcome.DONE), (C, "c", 1000, "B", {"fingerprint": "every:20s"}),
         ("inspect", "j")],
        ["won", "taken", True, "won", "state"],
    ),
    "token-per-job": (
        [(C, "a", 0, "A", {}), (C, "b", 0, "A", {"job": "k"}), ("release", "a", ReleaseOutcome.DONE),
         (C, "c", 1000, "B", {}), (C, "d", 1000, "B", {"job": "k"})],
        ["won", "won", True, "won", "skipped"],
    ),
    "release-wrong-token-ignored": (
        [(C, "a", 0, "A", {"lease_ms": 0}), (C, "b", 0, "B", {}), ("release", "a", ReleaseOutcome.HANDOVER),
         ("renew", "b", LIVE), ("release", "b", ReleaseOutcome.HANDOVER),
         ("release", "b", ReleaseOutcome.DONE)],
        ["won", "won", False, "lease", True, False],
    ),
    "inspect-missing": ([("inspect", "nothing")], [None]),
}


def _norm_result(r: ClaimResult, base: int, now: int) -> tuple[Any, ...]:
    def rel(v: int | None) -> int | None:
        return None if v is None else v - base

    lease = r.lease
    return (
        r.outcome.value, r.holder, r.attempt, r.previous_status, r.fingerprint, rel(r.record_slot),
        None if lease is None else (rel(lease.slot), lease.attempt, lease.token, lease.owner),
        r.expires_at is None, r.now is not None,
    )


async def _run(backend: Any, steps: list[Step], base: int) -> tuple[list[Any], list[str | bool | None]]:
    leases: dict[str, Lease] = {}
    seen: list[Any] = []
    kinds: list[str | bool | None] = []
    for step in steps:
        if step[0] == C:
            _, name, offset, owner, opts = step
            opts = dict(opts)
            job = opts.pop("job", "j")
            lease_ms = opts.pop("lease_ms", LIVE)
            req = ClaimRequest(NS, job, base + offset, owner, lease_ms, **opts)
            result = await backend.claim(req)
            if result.lease is not None:
                leases[name] = result.lease
            seen.append(_norm_result(result, base, 0))
            kinds.append(result.outcome.value)
        elif step[0] == "renew":
            lease = leases[step[1]]
            renewed = await backend.renew(lease, step[2])
            if renewed is not None:
                assert (renewed.slot, renewed.token, renewed.owner) == (lease.slot, lease.token, lease.owner)
                leases[step[1]] = renewed
            seen.append(None if renewed is None else "lease")
            kinds.append(None if renewed is None else "lease")
        elif step[0] == "release":
            done = await backend.release(leases[step[1]], step[2])
            seen.append(done)
            kinds.append(done)
        else:
            state = await backend.inspect(NS, step[1])
            seen.append(None if state is None else (
                state.slot - base, state.attempt, state.token, state.owner, state.status, state.fingerprint,
            ))
            kinds.append(None if state is None else "state")
    return seen, kinds


@pytest.fixture(params=["redis", "valkey"])
async def make_backend(
    request: pytest.FixtureRequest, redis_url: str, prefix: str
) -> AsyncIterator[Callable[[], Any]]:
    made: list[RedisBackend] = []

    def make() -> RedisBackend:
        if request.param == "valkey":
            backend: RedisBackend = ValkeyBackend(redis_url.replace("redis", "valkey", 1), prefix=prefix)
        else:
            backend = RedisBackend(redis_url, prefix=prefix)
        made.append(backend)
        return backend

    yield make
    for b in made:
        await b.close()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_row_matches_memory_backend(name: str, make_backend: Callable[[], RedisBackend]) -> None:
    steps, expected = SCENARIOS[name]
    backend = make_backend()
    await backend.open()
    # Base the slots on the store's clock, so `early` means the same on both sides.
    now = (await backend.claim(ClaimRequest("probe", "probe", 0, "probe"))).now
    assert now is not None
    base = now - 5_000
    redis_seen, redis_kinds = await _run(backend, steps, base)
    memory_seen, memory_kinds = await _run(MemoryBackend(), steps, base)
    assert redis_kinds == expected
    assert memory_kinds == expected
    assert redis_seen == memory_seen
