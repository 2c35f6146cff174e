"""Every backend interface and result type, in one module.

A *claim backend* answers one question per (namespace, job, slot): did this instance win?
A *lease backend* adds the lease state machine: a lease renewed by heartbeats, takeover after
expiry or a graceful handover, attempts, fencing tokens and overlap policies. The rules are
published in docs/lease-contract.md; the docstrings below state them method by method.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_HISTORY",
    "ERROR_LIMIT",
    "AnnounceBackend",
    "Capability",
    "CatalogueEntry",
    "ClaimBackend",
    "ClaimOutcome",
    "ClaimRequest",
    "ClaimResult",
    "ControlBackend",
    "ForgetBackend",
    "HistoryBackend",
    "JobControl",
    "InspectBackend",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseBackend",
    "LeaseRecord",
    "Overlap",
    "ReleaseCallback",
    "ReleaseOutcome",
    "RunRecord",
    "SCHEDULE_PARTITIONS",
    "SCHEDULES_CHANGED",
    "ScheduleBackend",
    "ScheduleRecord",
    "ScheduleWrite",
    "ScheduleWriteResult",
    "schedule_partition",
    "WinsCallback",
]

ERROR_LIMIT = 2000
"""The most characters of a run's error text that its history keeps."""

DEFAULT_HISTORY = 100
"""How many ended runs of each job the history keeps unless `Scheduler(history=...)` says otherwise."""


class Capability(enum.StrEnum):
    """A feature a backend declares; the conformance kit tests each declared one."""

    CLAIM = "claim"
    """One winner per (namespace, job, slot) within the horizon (`ClaimBackend`)."""
    LEASE = "lease"
    """The lease state machine: renew, release, takeover, attempts, tokens, overlap (`LeaseBackend`)."""
    NOTIFY = "notify"
    """Handovers are pushed to `subscribe`rs, so a backup takes a handover over without polling."""
    INSPECT = "inspect"
    """`inspect` and `jobs` read the stored records (`InspectBackend`)."""
    CONTROL = "control"
    """Cluster-wide pause, resume and trigger are stored: `set_control` and `controls` (`ControlBackend`)."""
    HISTORY = "history"
    """The store keeps a job catalogue and a bounded history of ended runs (`HistoryBackend`)."""
    ANNOUNCE = "announce"
    """Won claims are pushed to `subscribe_wins` subscribers, who then skip claims already decided
    (`AnnounceBackend`)."""
    FORGET = "forget"
    """`forget` deletes everything stored of a job, and `namespaces` lists the namespaces the store
    holds (`ForgetBackend`)."""
    SCHEDULES = "schedules"
    """Schedules kept in the store as data, indexed by their next due slot (`ScheduleBackend`)."""


class ClaimOutcome(enum.StrEnum):
    """What a claim decided."""

    WON = "won"
    """This instance runs the slot; `ClaimResult.lease` is set."""
    TAKEN = "taken"
    """Another instance holds a live lease on this slot (`holder`, `expires_at`)."""
    DONE = "done"
    """This slot already ran to an end (done or failed)."""
    SKIPPED = "skipped"
    """An older slot is still running under a live lease, and the overlap policy is skip or buffer_one."""
    STALE = "stale"
    """The store already has a newer slot of this job: this instance is late."""
    EXHAUSTED = "exhausted"
    """The slot needs a takeover but has used `max_attempts` attempts."""
    EARLY = "early"
    """The slot lies more than `max_skew` in the store's future: this instance's clock is fast."""


class Overlap(enum.StrEnum):
    """What a claim of a new slot does while an older slot of the same job still runs."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    REPLACE = "replace"
    ALLOW = "allow"


class JobStatus(enum.StrEnum):
    """The status of a job's record."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    RELEASED = "released"


class ReleaseOutcome(enum.StrEnum):
    """How a run ended, as told to `release`."""

    DONE = "done"
    FAILED = "failed"
    HANDOVER = "handover"
    """A graceful stop: the record becomes `released`, and a backup may claim the next attempt at once."""

    @property
    def status(self) -> JobStatus:
        """The record's status after a release with this outcome."""
        return _STATUS_AFTER[self]


_STATUS_AFTER = {
    ReleaseOutcome.DONE: JobStatus.DONE,
    ReleaseOutcome.FAILED: JobStatus.FAILED,
    ReleaseOutcome.HANDOVER: JobStatus.RELEASED,
}


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One instance's request to run one slot of one job."""

    namespace: str
    job: str
    slot: int
    """The slot: the intended fire time in epoch milliseconds, UTC."""
    owner: str
    """The claiming instance's id."""
    lease_ms: int = 30_000
    max_attempts: int = 3
    overlap: Overlap = Overlap.SKIP
    fingerprint: str = ""
    """The schedule's fingerprint, stored with the record so that a changed schedule is noticed."""
    max_skew_ms: int = 2_000
    stale_after: int | None = None
    """The latest store time (epoch ms) at which the slot is still worth running: a claim that reaches
    the store later is **STALE** and changes nothing. None: no limit. The scheduler sets the job's
    next slot (a catch-up claim: also at most `catch_up` after its slot), so a claim delivered late,
    after the next slot was due, cannot start a past slot."""


@dataclass(frozen=True, slots=True)
class Lease:
    """The winner's right to run one slot, valid until `expires_at` by the store's clock."""

    namespace: str
    job: str
    slot: int
    attempt: int
    token: int
    """The fencing token: larger than the token of every earlier claim of this job."""
    owner: str
    expires_at: int
    """Store time, epoch ms. Zero on claim-only backends, which have no lease."""


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The store's answer to one claim."""

    outcome: ClaimOutcome
    job: str
    slot: int
    lease: Lease | None = None
    """Set exactly when `outcome` is WON."""
    holder: str | None = None
    """The instance that holds the record, when known."""
    attempt: int = 0
    """The record's attempt after the claim (0 when unknown)."""
    expires_at: int | None = None
    """The holder's lease expiry in store time, for TAKEN and SKIPPED."""
    now: int | None = None
    """The store's clock when it decided, epoch ms."""
    previous_status: JobStatus | None = None
    """For a takeover, the slot's status before: RELEASED (a handover) or RUNNING (an expired lease)."""
    fingerprint: str | None = None
    """The fingerprint stored with the record before this claim, when the backend keeps one."""
    record_slot: int | None = None
    """The slot the record held before this claim (the newer slot for STALE, the older one for SKIPPED)."""
    reissued: bool = False
    """WON by the owner of the slot's live record: its own lease again (a claim whose answer was lost),
    nothing written. Its `expires_at` may be near: renew it before relying on it."""

    @property
    def won(self) -> bool:
        """True when this instance runs the slot."""
        return self.outcome is ClaimOutcome.WON


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One stored record of a job's slot: what the lease rules (`decide` and its siblings) read and write."""

    slot: int
    attempt: int
    token: int
    """The fencing token of this slot's current run."""
    owner: str
    status: JobStatus
    expires_at: int
    """Store time, epoch ms. The lease is live while `expires_at > now`."""
    fingerprint: str
    updated_at: int
    """Store time of the last write, epoch ms."""

    def live(self, now: int) -> bool:
        """True while the record runs under an unexpired lease (expiry is inclusive)."""
        return self.status is JobStatus.RUNNING and self.expires_at > now

    def held_by(self, lease: Lease) -> bool:
        """True while this is the running record that `lease` was granted: same slot, token and owner."""
        return (self.status is JobStatus.RUNNING and self.slot == lease.slot and self.token == lease.token
                and self.owner == lease.owner)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobState(LeaseRecord):
    """A stored record as `inspect` reads it: the record, the job it belongs to, and when it was read.

    A subclass rather than a second list of fields: it is a `LeaseRecord` with an address and a time.
    """

    namespace: str
    job: str
    now: int
    """The store's clock when it was read, so `expires_at - now` is the lease's remaining time."""

    @classmethod
    def of(cls, record: LeaseRecord, *, namespace: str, job: str, now: int) -> JobState:
        """`record` of `job` in `namespace`, read at store time `now`."""
        return cls(
            slot=record.slot, attempt=record.attempt, token=record.token, owner=record.owner,
            status=record.status, expires_at=record.expires_at, fingerprint=record.fingerprint,
            updated_at=record.updated_at, namespace=namespace, job=job, now=now,
        )


@dataclass(frozen=True, slots=True)
class JobControl:
    """A job's cluster-wide controls, as stored."""

    paused: bool = False
    """True while the job is paused: no replica claims its scheduled slots."""
    trigger: int = 0
    """The id of the job's newest trigger (store time in epoch ms when it was issued); 0 for none."""


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One ended run of a job, as its history keeps it."""

    job: str
    slot: int
    attempt: int
    token: int
    instance: str
    """The id of the instance that ran it."""
    outcome: str
    """How it ended: "done", "failed", "handover", or "lost" (it ended without its lease)."""
    started_at: int
    """When the handler was called, epoch ms by the instance's clock."""
    duration_ms: int
    error: str = ""
    """The error's type and message, cut to `ERROR_LIMIT` characters; "" when there was none."""


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    """One replica's registration of a job, as published in the store."""

    job: str
    instance: str
    """The id of the instance that registered it."""
    schedule: str
    """The schedule in words, e.g. "every 10s" or "cron '0 8 * * 1-5' (Europe/Athens)"."""
    kind: str
    """"every", "cron" or "at"."""
    timezone: str
    """The schedule's timezone; "UTC" when it has none."""
    options: dict[str, str]
    """The job's options as display strings (lease, heartbeat, overlap, max_attempts, ...)."""
    next_slot: int | None
    """The job's next due slot (epoch ms) when published; None when it has none left."""
    seen_at: int = 0
    """Store time of the publication, epoch ms; set by the store (ignored on write)."""
    fingerprint: str = ""
    """The schedule's fingerprint (as stored with the job's lease record): a reader computes later
    slots from it once `next_slot` has passed (`anarchon.next_slot_of`)."""


ReleaseCallback = Callable[[str, int], None]
"""Called with (job, slot) when a handover of that slot is pushed by the store, or with
(job, `CONTROLS_CHANGED`) when the job's controls changed."""

WinsCallback = Callable[[str, Sequence[tuple[str, int]]], None]
"""Called with (owner, [(job, slot), ...]) when the store pushes claims that `owner` has won."""

CONTROLS_CHANGED: Final = -1
"""The slot a backend with `notify` and `control` pushes to say that a job's controls changed."""

SCHEDULES_CHANGED: Final = -2
"""The slot a backend with `notify` and `schedules` pushes (with the schedule's id as the job) to say
that a stored schedule was written or removed."""


@runtime_checkable
class ClaimBackend(Protocol):
    """A store that picks one winner per (namespace, job, slot). Claim-only backends stop here."""

    capabilities: ClassVar[frozenset[Capability]]
    """What this backend supports; `claim` is always present. A class attribute."""

    url_schemes: ClassVar[tuple[str, ...]]
    """URL schemes `from_url` accepts, e.g. ('redis', 'rediss'). A class attribute."""

    @property
    def horizon_ms(self) -> int | None:
        """How long the store remembers a claim (its dedupe horizon); None when it never forgets.

        A claim of a slot is answered TAKEN for at least this long after it was won. The scheduler
        never claims a slot older than half the horizon.
        """
        ...

    @property
    def url(self) -> str:
        """Where the store is, for messages, with any password redacted."""
        ...

    async def open(self) -> None:
        """Connect and prepare the store; raise `BackendUnavailable` when it cannot be reached.

        Idempotent: a second call while open does nothing.
        """
        ...

    async def close(self) -> None:
        """Release connections; idempotent. A client object passed in is left open."""
        ...

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Decide atomically in the store whether `request.owner` runs `request.slot` of `request.job`.

        Claim-only backends answer:
        - no earlier claim of this (namespace, job, slot) within the horizon: **WON**, attempt 1;
        - an earlier claim: **TAKEN** (`holder` when the store knows it), the same owner's included.
        They ignore `lease_ms`, `max_attempts` and `overlap`. Names are compared exactly (byte-wise):
        `report`, `Report` and `report ` are three jobs.
        """
        ...

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch; results are in request order, each judged as if claimed alone in that order.

        An empty batch returns `[]`.
        """
        ...


@runtime_checkable
class LeaseBackend(ClaimBackend, Protocol):
    """A store with the whole lease state machine of docs/lease-contract.md."""

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Decide atomically, with `now` read from the store's clock. One record per (namespace, job):

        - `request.slot > now + max_skew_ms`: **EARLY**; nothing changes.
        - `request.stale_after` set and `now > stale_after`: **STALE**; nothing changes.
        - no record: create `slot, attempt=1, token=1, running`, `expires_at = now + lease_ms`: **WON**.
        - record for the same slot, `running` and `expires_at > now`: held by `request.owner`: **WON**
          with that record's lease again (`reissued`, nothing written); else **TAKEN** (holder, expires_at).
        - same slot, `done` or `failed`: **DONE**.
        - same slot, `released`, or `running` with `expires_at <= now` (expiry is inclusive):
          if `attempt < max_attempts`: `attempt+1, token+1, owner=me, running`: **WON** (takeover,
          `previous_status` tells which); else **EXHAUSTED**.
        - record for an older slot, `running` with `expires_at > now`: by `overlap`:
          `skip`/`buffer_one`: **SKIPPED**; `replace`: the older lease is revoked (its renew fails)
          and the new slot is **WON** with `attempt=1, token+1`; `allow`: see below.
        - record for an older slot in any other state: `slot, attempt=1, token+1, running`: **WON**.
        - record for a newer slot: **STALE**.

        A won lease runs exactly `lease_ms` from the store's `now`, never less. The result's
        `fingerprint` is the one stored before this claim, not the request's.

        With `overlap=allow` there is one record per (job, slot), judged by the same-slot rows; a slot
        with no record that is older than the job's newest slot is **STALE**. The token is per job.
        An older slot released as done or failed loses its record at once; one released as handover
        keeps it (`released`, taken over as above) until a newer slot is won: a new slot drops every
        older record that is no longer `running`. `anarchon.backends.decide` is this table.
        """
        ...

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        """Extend the lease to store `now + lease_ms`, or return None when it is lost.

        - Succeeds only while the record of `lease.slot` has the lease's token and owner and status
          `running`, and its lease has not expired (`expires_at > now`): a renewal that reaches the
          store after the lease ended is lost, even when nobody took the slot over.
        - The new expiry counts from the store's `now`, never from the old expiry.
        - Returns the lease with the new `expires_at`; None when the job has no record at all.
        - Atomic: a renewal and a takeover of the same record never both succeed.
        `anarchon.backends.decide_renew` is this rule.
        """
        ...

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew each `(lease, lease_ms)` as `renew` would, in order; results are in order.

        - Each item is judged on its own: a lost lease is None and does not fail the rest.
        """
        ...

    async def release(self, lease: Lease, outcome: ReleaseOutcome) -> bool:
        """End the run: status `done`, `failed` or `released` (handover). Pushes a handover if `notify`.

        - Returns True, once, only while the record of `lease.slot` has the lease's token and owner
          and status `running`: a second release, a release after a takeover, and a release of a job
          with no record at all return False and change nothing.
        - `failed` is stored as `failed` (a claim answers DONE, `inspect` reads `failed`).
        - An older slot kept under `overlap=allow` that ends as done or failed loses its record;
          handed over, it keeps it (`released`) for a claim of the same slot to take over.
        - Atomic: a release and a takeover of the same record never both succeed.
        `anarchon.backends.decide_release` is this rule.
        """
        ...

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End each run as `release` would, in order; results are in order.

        - Each item is judged on its own: a stale lease is ignored (False) and does not fail the rest.
        - Handovers are pushed as `release` pushes them.
        """
        ...

    async def subscribe(self, namespace: str, callback: ReleaseCallback) -> None:
        """Call `callback(job, slot)` on this event loop whenever a run in `namespace` is released
        as a handover (capability `notify`).

        - Releases as done or failed need not be pushed (nothing is left to claim); a push the
          engine does not need is harmless, it only costs a claim.
        - Backends without `notify` accept the call and never call back.
        """
        ...


@runtime_checkable
class InspectBackend(Protocol):
    """A lease backend whose records can be read (capability `inspect`), e.g. by `anarchon status`."""

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Read one job's newest record, or None when the job has none."""
        ...

    async def jobs(self, namespace: str) -> list[JobState]:
        """Read the newest record of every job in a namespace, sorted by job name (code point order)."""
        ...



@runtime_checkable
class AnnounceBackend(ClaimBackend, Protocol):
    """A backend that pushes won claims (capability `announce`), lease or claim-only.

    The engine uses the push to skip its own claim of a slot that another replica has won, when the
    push arrives before that claim is due: the claim would only have been answered `taken`. The store
    stays the judge; a lost or late push costs the claim it would have saved, nothing else.
    """

    async def subscribe_wins(self, namespace: str, callback: WinsCallback) -> None:
        """Call `callback(owner, [(job, slot), ...])` on this event loop for claims won in `namespace`.

        - Only first attempts and takeovers (on a lease backend) that the store decided as won are
          pushed (not a reissued lease); the pushes of one batch may come in one call or in several.
        - A push may be lost (a subscriber reconnecting) or late; it is never sent for a claim the
          store did not decide as won.
        - The subscriber's own wins may be pushed to it too: `owner` tells them apart.
        """
        ...


@runtime_checkable
class ControlBackend(LeaseBackend, Protocol):
    """A lease backend that stores each job's cluster-wide controls (capability `control`).

    A job never controlled has no controls stored and reads as `JobControl()`.
    A backend that also declares `notify` pushes `(job, CONTROLS_CHANGED)` to the namespace's
    subscribers after every `set_control`, so replicas apply a control at once instead of at their
    next poll. A push may be lost (a subscriber reconnecting); replicas still poll every heartbeat.
    """

    async def set_control(self, namespace: str, job: str, *, paused: bool | None = None,
                          trigger: bool = False) -> JobControl:
        """Set `job`'s paused flag (None: leave it) and, with `trigger`, issue a new trigger; atomically.

        - A new trigger's id is the store's `now` in epoch ms, or the previous id + 1 when that is
          larger: ids of one job only ever grow.
        - Returns the job's controls after the write.
        """
        ...

    async def controls(self, namespace: str) -> dict[str, JobControl]:
        """Read the controls of every controlled job in `namespace`, in one round trip."""
        ...


@runtime_checkable
class HistoryBackend(LeaseBackend, Protocol):
    """A lease backend that keeps a job catalogue and a bounded run history (capability `history`).

    Both are for people and tools (`anarchon status`, `anarchon history`, dashboards); the lease
    rules never read them.
    """

    async def publish_catalogue(self, namespace: str, entries: Sequence[CatalogueEntry], ttl_ms: int) -> None:
        """Upsert one entry per (namespace, job, instance) in one round trip.

        - Each entry's `seen_at` becomes the store's `now`; the caller's value is ignored.
        - An entry is live while `seen_at + ttl_ms > now`; `catalogue` never returns one that is not,
          and the store drops it eventually (a store that expires keys drops it then).
        - Entries of other instances, and this instance's entries of jobs not in `entries`, are left alone.
        """
        ...

    async def catalogue(self, namespace: str) -> list[CatalogueEntry]:
        """Every live entry in `namespace`, sorted by job, then instance (code point order)."""
        ...

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        """Append ended runs in one round trip; each job then keeps only its newest `keep` runs.

        - Newest means the largest (slot, attempt); a run recorded again for the same (job, slot,
          attempt) replaces the earlier one.
        - `error` is stored cut to `ERROR_LIMIT` characters.
        - `keep` >= 1; runs of jobs not in `runs` are not touched.
        """
        ...

    async def history(self, namespace: str, job: str, limit: int) -> list[RunRecord]:
        """The job's newest runs, newest first (by slot, then attempt), at most `limit`; [] for none."""
        ...


@runtime_checkable
class ForgetBackend(Protocol):
    """A store that can list its namespaces and forget a job (capability `forget`), e.g. for
    `anarchon namespaces` and `anarchon forget`. Stores that keep per-job state declare it.

    Neither call is on a scheduler's path: both are for people cleaning up a shared store.
    """

    async def forget(self, namespace: str, job: str) -> bool:
        """Delete everything the store keeps of `job` in `namespace`; True when anything was deleted.

        - Its lease records (every slot kept under overlap=allow) and its token counter, its
          controls, its runs and its catalogue entries, where the store keeps each; other jobs,
          and the same name in other namespaces, are left alone.
        - Names are exact: the record of a job's triggers is stored under a name of its own, which
          the caller forgets with a second call.
        - A job claimed again after it was forgotten starts over at attempt 1 and token 1: only
          forget a job that no replica runs.
        - One atomic step where the store has one (a transaction, a statement); a store whose keys
          live apart (a Redis Cluster) deletes them one after another.
        """
        ...

    async def namespaces(self) -> list[str]:
        """Every namespace in which the store keeps anything (a record, controls, a run or a catalogue
        entry), sorted by code point."""
        ...


SCHEDULE_PARTITIONS = 64
"""How many partitions the due index of a namespace is cut into (`schedule_partition`)."""


def schedule_partition(schedule_id: str) -> int:
    """The partition of the due index that holds schedule `schedule_id`, in `range(SCHEDULE_PARTITIONS)`.

    The first byte of the MD5 digest of the id's UTF-8 bytes, modulo `SCHEDULE_PARTITIONS`: the same in
    every process and every store (PostgreSQL computes it as
    `get_byte(decode(md5(id), 'hex'), 0) % 64`), so a store can keep it beside the schedule and index it.
    """
    return hashlib.md5(schedule_id.encode(), usedforsecurity=False).digest()[0] % SCHEDULE_PARTITIONS


@dataclass(frozen=True, slots=True)
class ScheduleWrite:
    """A stored schedule as a client writes it: everything but what the store sets."""

    id: str
    """The schedule's id: its job name for claims, leases, history and controls."""
    task: str
    """The name of the task (a handler registered in code) that runs it."""
    spec: str
    """When it is due, as JSON text: `{"every": ms, "offset": ms}`, `{"cron": ..., "timezone": ...,
    "dst_gap": ..., "dst_fold": ...}` or `{"at": ms}`. The store keeps it as it is."""
    args: str
    """The task's keyword arguments, as JSON text of an object."""
    options: str
    """The job options given (overlap, timeout, ...), as JSON text of an object."""
    paused: bool
    next_due: int | None
    """The slot at which the schedule next needs a look (epoch ms), for the due index; None when it
    has no slot left."""


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A stored schedule as the store keeps it (`ScheduleWrite` plus what the store sets)."""

    id: str
    task: str
    spec: str
    args: str
    options: str
    paused: bool
    next_due: int | None
    version: int
    """The namespace's change counter (`schedules_version`) at the write that made this record: it grows
    with every write of the schedule, and a schedule removed and added again never has a version it had
    before, so a compare-and-set or a move of the due index meant for the old one cannot touch it."""
    created_at: int
    """Store time of its creation, epoch ms (kept by every later write)."""
    updated_at: int
    """Store time of its last write, epoch ms."""


@dataclass(frozen=True, slots=True)
class ScheduleWriteResult:
    """What a write or a removal did: `record` is the record written (or removed) when `written`, else
    the record that made the store refuse (None when there is none)."""

    written: bool
    record: ScheduleRecord | None


@runtime_checkable
class ScheduleBackend(LeaseBackend, Protocol):
    """A lease backend that keeps schedules as data (capability `schedules`), from any process.

    Each write bumps the namespace's change counter (`schedules_version`); a backend that also
    declares `notify` then pushes `(id, SCHEDULES_CHANGED)` to the namespace's subscribers, so that
    replicas look again at once instead of at their next poll. A push may be lost; replicas poll the
    counter every heartbeat. Ids are compared exactly (code point order), like job names.
    """

    async def put_schedule(self, namespace: str, write: ScheduleWrite, *,
                           expect: int | Literal["absent", "any"]) -> ScheduleWriteResult:
        """Write a schedule, atomically, by `expect`:

        - `"absent"`: only if no schedule has this id (an add); else refused with the current record.
        - `"any"`: create it, or replace the current one whatever its version (an upsert).
        - a version (int): only if the current schedule has exactly that version (a compare-and-set);
          else refused with the current record, or with None when there is none.
        - A write bumps the namespace's change counter, and the record's version is the counter's new
          value, in the same atomic step.
        - Created: `created_at` = `updated_at` = the store's now. Replaced: `created_at` kept,
          `updated_at` = now; every field of `write` replaces the old one.
        """
        ...

    async def put_schedules(self, namespace: str, writes: Sequence[ScheduleWrite], *,
                            expect: Literal["absent", "any"]) -> list[ScheduleWriteResult]:
        """Write many schedules, each by `expect` as `put_schedule` would, in few round trips; the
        answers in the order of `writes`.

        - Each write is judged alone: a refusal (an add of a taken id) answers the current record and
          the batch goes on.
        - Each write that is written bumps the change counter once, and its record's version is larger
          than the counter before it and at most the counter after it: versions grow in the order of
          `writes`, and the counter after the batch is the last written record's version. A refused
          write bumps nothing.
        - The ids of one batch are distinct: a repeated id is a `ValueError`, before anything is
          written. An empty batch is [] and touches nothing.
        - A batch is written in chunks, each chunk atomically (one transaction or script) and in one
          round trip where the store allows: another client may see a batch written in part, never
          a write in part.
        - A backend that declares `notify` pushes at least once per chunk that wrote anything, naming one
          of the ids written: replicas that count more writes than pushes read their schedules again.
        """
        ...

    async def remove_schedule(self, namespace: str, schedule_id: str, *, expect: int | None = None
                              ) -> ScheduleWriteResult:
        """Remove a schedule (only if its version is `expect`, when given), atomically.

        - Written: the removed record; refused: the current record (a version mismatch), or None when
          there is no such schedule. A removal bumps the change counter.
        - The job's lease records, controls and history are left alone (`ForgetBackend.forget`).
        """
        ...

    async def get_schedules(self, namespace: str, ids: Sequence[str]) -> list[ScheduleRecord | None]:
        """The schedules with these ids, in order (None where there is none), in one round trip."""
        ...

    async def list_schedules(self, namespace: str, *, after: str = "", limit: int, task: str | None = None,
                             prefix: str = "") -> list[ScheduleRecord]:
        """A page of schedules ordered by id (code point order): ids greater than `after` that start
        with `prefix` (and whose task is `task`, when given), at most `limit`.

        Paging from the last id of one page to the next never skips a schedule that exists from
        the first page to the last, nor returns one twice, while others are written meanwhile.
        """
        ...

    async def due_schedules(self, namespace: str, *, until: int, tasks: Sequence[str] | None = None,
                            partitions: Sequence[int] | None = None, after: tuple[int, str] | None = None,
                            limit: int) -> list[ScheduleRecord]:
        """A page of the due index: schedules whose `next_due` is set and at most `until` (whose task is
        one of `tasks`, and whose `schedule_partition` is one of `partitions`, when given), ordered by
        (`next_due`, id), greater than `after`, at most `limit`.

        It reads only those rows (an index on task, partition and next due), never every schedule, nor
        the due schedules of other tasks or other partitions: replicas that share the partitions out
        read disjoint rows. A partition outside `range(SCHEDULE_PARTITIONS)` matches nothing.
        """
        ...

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        """Move each `(id, version, next_due)` forward in the due index, in one round trip.

        - Only while the schedule still has that version (a write since then set its own next due),
          and only forward: a set `next_due` replaces a smaller one; None (no slot left) replaces any,
          and is replaced by nothing but a write.
        - A move changes nothing else and does not bump the change counter.
        """
        ...

    async def schedules_version(self, namespace: str) -> int:
        """The namespace's change counter: 0 before any write, and larger after each write or removal."""
        ...
