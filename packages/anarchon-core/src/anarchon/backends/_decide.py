"""The lease rules as pure functions, for lease backends that decide in Python.

`decide` judges a claim, `decide_renew` a renewal, `decide_release` a release (the rules of
docs/lease-contract.md). A backend reads the job's records and the store's `now` inside one
atomic step (a transaction, a lock, a compare-and-set round), calls the function, writes what its
decision says in that same step, and returns its answer. `MemoryBackend` (the reference model),
`SqliteBackend` and `NatsKVBackend` all work this way, so each rule has one implementation.
Backends that decide inside the store (a Lua script, SQL) cannot call them; the conformance kit
holds them to the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._speed import CLAIM_DONE as _DONE
from .._speed import CLAIM_EARLY as _EARLY
from .._speed import CLAIM_EXHAUSTED as _EXHAUSTED
from .._speed import CLAIM_SKIPPED as _SKIPPED
from .._speed import CLAIM_STALE as _STALE
from .._speed import CLAIM_TAKEN as _TAKEN
from .._speed import CLAIM_WON as _WON
from .._speed import OVERLAP_ALLOW as _ALLOW
from .._speed import OVERLAP_BUFFER_ONE as _BUFFER_ONE
from .._speed import OVERLAP_SKIP as _SKIP
from .._speed import RELEASE_HANDOVER as _HANDOVER
from .._speed import STATUS_DONE as _STATUS_DONE
from .._speed import STATUS_FAILED as _STATUS_FAILED
from .._speed import STATUS_RUNNING as _RUNNING
from .._speed import fast_init
from ._protocols import (
    ClaimRequest,
    ClaimResult,
    JobStatus,
    Lease,
    LeaseRecord,
    ReleaseOutcome,
)

__all__ = ["ClaimDecision", "ReleaseDecision", "RenewDecision", "decide", "decide_release", "decide_renew"]


@fast_init  # a speed trick: see anarchon._speed
@dataclass(frozen=True, slots=True)
class ClaimDecision:
    """What `decide` found: the answer to return, and what to write in the same atomic step."""

    result: ClaimResult
    write: LeaseRecord | None = None
    """The record to store for the claimed slot; None: write nothing. Its `token` is the job's new
    token counter. Unless `new_slot`, it replaces the stored record of `write.slot` (a takeover of
    the newest record, or of an older one kept under overlap=allow)."""
    new_slot: bool = False
    """`write` starts a slot newer than every stored one: it becomes the job's newest record, and
    older records that are no longer running are deleted (an older slot released for handover and
    not yet taken over included: the newer slot supersedes it, as it supersedes a released newest
    record)."""
    keep_previous: bool = False
    """With `new_slot`: the previous newest record still runs under overlap=allow, so keep it as an
    older record (renewable, judged by the same-slot rows); otherwise delete it, which revokes its
    lease (overlap=replace) or forgets a run that is over."""


def decide(
    head: LeaseRecord | None, request: ClaimRequest, now: int, *, token: int,
    kept: LeaseRecord | None = None, check_early: bool = True,
) -> ClaimDecision:
    """Decide one claim by the claim table (see `LeaseBackend.claim`), with `now` the store's clock.

    - `head`: the job's newest record, or None when the job has none.
    - `token`: the job's token counter, the largest token any claim of the job was given (equal to
      `head.token` unless overlap=allow took over an older slot; 0 for a new job).
    - `kept`: the record of `request.slot` when that slot is older than `head` and still kept under
      overlap=allow (running, or released for handover); read it whenever `request.slot < head.slot`.
      It counts only for a request with overlap=allow.
    - `request.stale_after`: after that store time the claim is STALE (right after the EARLY row),
      whatever the record says, and nothing is written.
    - `check_early=False` leaves out the EARLY row, for a store whose clock can only be learned by
      writing: decide on the latest store time seen, write, then decide again on the write's time.

    Nothing is mutated; the caller stores `ClaimDecision.write` as its flags say.
    """
    r = request
    if kept is not None and kept.slot != r.slot:
        raise ValueError(f"kept record is for slot {kept.slot!r}, but the request claims slot {r.slot!r}")
    if check_early and r.slot > now + r.max_skew_ms:
        return ClaimDecision(ClaimResult(_EARLY, r.job, r.slot, now=now))
    if r.stale_after is not None and now > r.stale_after:
        # Delivered too late to be worth running (after the job's next slot was due): never revive it.
        if head is None:
            return ClaimDecision(ClaimResult(_STALE, r.job, r.slot, now=now))
        return ClaimDecision(ClaimResult(
            _STALE, r.job, r.slot, holder=head.owner, attempt=head.attempt, now=now,
            fingerprint=head.fingerprint, record_slot=head.slot,
        ))
    if head is None:
        return _start(r, now, token, None, keep_previous=False)
    if r.slot == head.slot:
        return _same_slot(r, now, token, head)
    if r.slot < head.slot:
        if r.overlap is _ALLOW and kept is not None:
            return _same_slot(r, now, token, kept)
        return ClaimDecision(ClaimResult(
            _STALE, r.job, r.slot, holder=head.owner, attempt=head.attempt, now=now,
            fingerprint=head.fingerprint, record_slot=head.slot,
        ))
    # A newer slot than the record's.
    if head.live(now):
        if r.overlap in (_SKIP, _BUFFER_ONE):
            return ClaimDecision(ClaimResult(
                _SKIPPED, r.job, r.slot, holder=head.owner, attempt=head.attempt,
                expires_at=head.expires_at, now=now, fingerprint=head.fingerprint, record_slot=head.slot,
            ))
        return _start(r, now, token, head, keep_previous=r.overlap is _ALLOW)
    return _start(r, now, token, head, keep_previous=False)


def _start(
    r: ClaimRequest, now: int, token: int, previous: LeaseRecord | None, *, keep_previous: bool
) -> ClaimDecision:
    """A new slot: attempt 1, the next token."""
    rec = LeaseRecord(r.slot, 1, token + 1, r.owner, _RUNNING, now + r.lease_ms, r.fingerprint, now)
    result = _won(r, rec, now, None, previous)
    return ClaimDecision(result, rec, new_slot=True, keep_previous=keep_previous)


def _same_slot(r: ClaimRequest, now: int, token: int, rec: LeaseRecord) -> ClaimDecision:
    """The rows for a record of the claimed slot itself."""
    if rec.live(now):
        if rec.owner == r.owner:
            # The claimer holds it already (a claim whose answer was lost): its own lease again, so it
            # can run or release it at once instead of waiting for it to expire.
            lease = Lease(r.namespace, r.job, rec.slot, rec.attempt, rec.token, rec.owner, rec.expires_at)
            return ClaimDecision(ClaimResult(
                _WON, r.job, r.slot, lease=lease, holder=rec.owner, attempt=rec.attempt,
                expires_at=rec.expires_at, now=now, fingerprint=rec.fingerprint, record_slot=rec.slot,
                reissued=True,
            ))
        # (Positional, as in `_won`: these two rows answer nearly every claim, and keywords cost a name
        # match each. ClaimResult's fields in order: outcome, job, slot, lease, holder, attempt,
        # expires_at, now, previous_status, fingerprint, record_slot, reissued.)
        return ClaimDecision(ClaimResult(_TAKEN, r.job, r.slot, None, rec.owner, rec.attempt, rec.expires_at,
                                         now, None, rec.fingerprint, rec.slot))
    if rec.status in (_STATUS_DONE, _STATUS_FAILED):
        return ClaimDecision(ClaimResult(
            _DONE, r.job, r.slot, holder=rec.owner, attempt=rec.attempt, now=now,
            fingerprint=rec.fingerprint, record_slot=rec.slot,
        ))
    # Released, or running with an expired lease: a takeover, if attempts remain.
    if rec.attempt >= r.max_attempts:
        return ClaimDecision(ClaimResult(
            _EXHAUSTED, r.job, r.slot, holder=rec.owner, attempt=rec.attempt, now=now,
            previous_status=rec.status, fingerprint=rec.fingerprint, record_slot=rec.slot,
        ))
    taken = LeaseRecord(
        rec.slot, rec.attempt + 1, token + 1, r.owner, _RUNNING, now + r.lease_ms, r.fingerprint, now
    )
    return ClaimDecision(_won(r, taken, now, rec.status, rec), taken)


def _won(
    r: ClaimRequest, rec: LeaseRecord, now: int, previous_status: JobStatus | None,
    previous: LeaseRecord | None,
) -> ClaimResult:
    lease = Lease(r.namespace, r.job, rec.slot, rec.attempt, rec.token, rec.owner, rec.expires_at)
    if previous is None:
        return ClaimResult(_WON, r.job, r.slot, lease, rec.owner, rec.attempt, rec.expires_at, now,
                           previous_status)
    return ClaimResult(_WON, r.job, r.slot, lease, rec.owner, rec.attempt, rec.expires_at, now,
                       previous_status, previous.fingerprint, previous.slot)


@fast_init  # a speed trick: see anarchon._speed
@dataclass(frozen=True, slots=True)
class RenewDecision:
    """What `decide_renew` found: the lease to return, and the record to write in the same atomic step."""

    lease: Lease | None
    """The renewed lease; None: the lease is lost, and nothing is written."""
    write: LeaseRecord | None = None
    """The record to store in place of the record of `lease.slot`."""


def decide_renew(rec: LeaseRecord | None, lease: Lease, lease_ms: int, now: int) -> RenewDecision:
    """Renew `lease` for `lease_ms` at store time `now` (see `LeaseBackend.renew`).

    - `rec`: the stored record of `lease.slot` (the job's newest, or an older one kept under
      overlap=allow), or None when there is none.
    - Lost unless `rec` is running with the lease's token and owner (`LeaseRecord.held_by`) and its
      lease is still live (`expires_at > now`): a renewal that arrives after the lease ended is lost
      even when nobody took the slot over, so a renewal delayed in the network never revives a run
      its holder has given up on.
    - The new expiry is `now + lease_ms`: from the store's now, never from the old expiry.
    """
    if rec is None or not rec.held_by(lease) or rec.expires_at <= now:
        return RenewDecision(None)
    # (Built field by field, not with dataclasses.replace: several times cheaper, once per renewal.)
    write = LeaseRecord(rec.slot, rec.attempt, rec.token, rec.owner, rec.status, now + lease_ms,
                        rec.fingerprint, now)
    renewed = Lease(lease.namespace, lease.job, lease.slot, lease.attempt, lease.token, lease.owner,
                    write.expires_at)
    return RenewDecision(renewed, write)


@fast_init  # a speed trick: see anarchon._speed
@dataclass(frozen=True, slots=True)
class ReleaseDecision:
    """What `decide_release` found: the answer, and what to write in the same atomic step."""

    released: bool
    """The answer to return; False: the release is ignored, and nothing is written."""
    write: LeaseRecord | None = None
    """The record to store in place of the record of the lease's slot."""
    forget: bool = False
    """Delete the record of the lease's slot instead: an older slot kept under overlap=allow whose
    run is over, so nothing is left to take over."""
    push: bool = False
    """Tell subscribers (capability `notify`): a handover, which a backup may take over at once."""


def decide_release(
    rec: LeaseRecord | None, lease: Lease, outcome: ReleaseOutcome, now: int, *, newest: bool
) -> ReleaseDecision:
    """End the run of `lease` with `outcome` at store time `now` (see `LeaseBackend.release`).

    - `rec`: the stored record of `lease.slot`, or None when there is none; `newest`: whether it is
      the job's newest record (False: an older one kept under overlap=allow).
    - Ignored (False) unless `rec` is running with the lease's token and owner: a second release,
      or one after a takeover, changes nothing.
    - The status becomes `outcome.status` (done, failed, released). An older record that ends as
      done or failed is forgotten instead; a handed-over one stays, `released`, for a backup.
    """
    if rec is None or not rec.held_by(lease):
        return ReleaseDecision(False)
    handover = outcome is _HANDOVER
    if not newest and not handover:
        return ReleaseDecision(True, forget=True)
    write = LeaseRecord(rec.slot, rec.attempt, rec.token, rec.owner, outcome.status, rec.expires_at,
                        rec.fingerprint, now)
    return ReleaseDecision(True, write, push=handover)
