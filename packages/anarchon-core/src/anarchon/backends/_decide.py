"""The DESIGN §3 claim decision as one pure function, for lease backends that decide in Python.

A backend reads the job's records and the store's `now` inside one atomic step (a transaction, a
lock), calls `decide`, writes what the `ClaimDecision` says in that same step, and returns its
`result`. `MemoryBackend` (the reference model) and `SqliteBackend` both work this way, so the
decision table has one implementation. Backends that decide inside the store (a Lua script, SQL)
cannot call it; the conformance kit holds them to the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._protocols import ClaimOutcome, ClaimRequest, ClaimResult, JobStatus, Lease, Overlap

__all__ = ["ClaimDecision", "LeaseRecord", "decide"]


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One stored record of a job's slot (DESIGN §3): what `decide` reads and writes."""

    slot: int
    attempt: int
    token: int
    owner: str
    status: JobStatus
    expires_at: int
    """Store time, epoch ms. The lease is live while `expires_at > now`."""
    fingerprint: str
    updated_at: int

    def live(self, now: int) -> bool:
        """True while the record runs under an unexpired lease (expiry is inclusive)."""
        return self.status is JobStatus.RUNNING and self.expires_at > now


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
    kept: LeaseRecord | None = None,
) -> ClaimDecision:
    """Decide one claim by the DESIGN §3 table (see `LeaseBackend.claim`), with `now` the store's clock.

    - `head`: the job's newest record, or None when the job has none.
    - `token`: the job's token counter, the largest token any claim of the job was given (equal to
      `head.token` unless overlap=allow took over an older slot; 0 for a new job).
    - `kept`: the record of `request.slot` when that slot is older than `head` and still kept under
      overlap=allow (running, or released for handover); read it whenever `request.slot < head.slot`.
      It counts only for a request with overlap=allow.

    Nothing is mutated; the caller stores `ClaimDecision.write` as its flags say.
    """
    r = request
    if kept is not None and kept.slot != r.slot:
        raise ValueError(f"kept record is for slot {kept.slot!r}, but the request claims slot {r.slot!r}")
    if r.slot > now + r.max_skew_ms:
        return ClaimDecision(ClaimResult(ClaimOutcome.EARLY, r.job, r.slot, now=now))
    if head is None:
        return _start(r, now, token, None, keep_previous=False)
    if r.slot == head.slot:
        return _same_slot(r, now, token, head)
    if r.slot < head.slot:
        if r.overlap is Overlap.ALLOW and kept is not None:
            return _same_slot(r, now, token, kept)
        return ClaimDecision(ClaimResult(
            ClaimOutcome.STALE, r.job, r.slot, holder=head.owner, attempt=head.attempt, now=now,
            fingerprint=head.fingerprint, record_slot=head.slot,
        ))
    # A newer slot than the record's.
    if head.live(now):
        if r.overlap in (Overlap.SKIP, Overlap.BUFFER_ONE):
            return ClaimDecision(ClaimResult(
                ClaimOutcome.SKIPPED, r.job, r.slot, holder=head.owner, attempt=head.attempt,
                expires_at=head.expires_at, now=now, fingerprint=head.fingerprint, record_slot=head.slot,
            ))
        return _start(r, now, token, head, keep_previous=r.overlap is Overlap.ALLOW)
    return _start(r, now, token, head, keep_previous=False)


def _start(
    r: ClaimRequest, now: int, token: int, previous: LeaseRecord | None, *, keep_previous: bool
) -> ClaimDecision:
    """A new slot: attempt 1, the next token."""
    rec = LeaseRecord(r.slot, 1, token + 1, r.owner, JobStatus.RUNNING, now + r.lease_ms, r.fingerprint, now)
    result = _won(r, rec, now, None, previous)
    return ClaimDecision(result, rec, new_slot=True, keep_previous=keep_previous)


def _same_slot(r: ClaimRequest, now: int, token: int, rec: LeaseRecord) -> ClaimDecision:
    """The rows for a record of the claimed slot itself."""
    if rec.live(now):
        return ClaimDecision(ClaimResult(
            ClaimOutcome.TAKEN, r.job, r.slot, holder=rec.owner, attempt=rec.attempt,
            expires_at=rec.expires_at, now=now, fingerprint=rec.fingerprint, record_slot=rec.slot,
        ))
    if rec.status in (JobStatus.DONE, JobStatus.FAILED):
        return ClaimDecision(ClaimResult(
            ClaimOutcome.DONE, r.job, r.slot, holder=rec.owner, attempt=rec.attempt, now=now,
            fingerprint=rec.fingerprint, record_slot=rec.slot,
        ))
    # Released, or running with an expired lease: a takeover, if attempts remain.
    if rec.attempt >= r.max_attempts:
        return ClaimDecision(ClaimResult(
            ClaimOutcome.EXHAUSTED, r.job, r.slot, holder=rec.owner, attempt=rec.attempt, now=now,
            previous_status=rec.status, fingerprint=rec.fingerprint, record_slot=rec.slot,
        ))
    taken = LeaseRecord(
        rec.slot, rec.attempt + 1, token + 1, r.owner, JobStatus.RUNNING, now + r.lease_ms, r.fingerprint, now
    )
    return ClaimDecision(_won(r, taken, now, rec.status, rec), taken)


def _won(
    r: ClaimRequest, rec: LeaseRecord, now: int, previous_status: JobStatus | None,
    previous: LeaseRecord | None,
) -> ClaimResult:
    lease = Lease(r.namespace, r.job, rec.slot, rec.attempt, rec.token, rec.owner, rec.expires_at)
    return ClaimResult(
        ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=rec.owner, attempt=rec.attempt,
        expires_at=rec.expires_at, now=now, previous_status=previous_status,
        fingerprint=None if previous is None else previous.fingerprint,
        record_slot=None if previous is None else previous.slot,
    )
