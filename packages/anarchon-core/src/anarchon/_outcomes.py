"""Claim outcomes: what does the store's answer to one claim mean for that slot?

`verdict` is a pure function, like `decide` on the store's side: the same job, result, claim and facts
always give the same `Action`, log line included, and the engine only carries it out. It is `react`
(the store's answer alone, the table below) refined by what this instance knows of itself (the second
table). Every row of both tables is tested on its own.

| outcome | when | step | slot watched or dropped |
| --- | --- | --- | --- |
| won | the instance stops, lease backend | hand back (release as handover at once) | the slot |
| won | otherwise | run (a claim-only slot won while stopping runs, its signal set) | the slot |
| taken | lease backend | watch: at the holder's expiry, within a heartbeat without push | the slot |
| taken | claim-only | drop | the slot |
| skipped | `buffer_one`, `replace` | watch: poll every heartbeat for the older run's end | the slot |
| skipped | another holds the older run | watch it: take it over if its holder dies | the older slot |
| skipped | otherwise | drop | the slot |
| early | | watch: once the store's clock has reached the slot | the slot |
| exhausted, done, stale | | drop | the slot |

Every outcome but skipped and early also supersedes the watches of older slots (a newer slot's claim
settles them), except under `overlap="allow"`, where each slot keeps a record of its own.

What this instance knows of itself then refines the action (`verdict`):

| result | when | step |
| --- | --- | --- |
| won, reissued | it still runs that slot with that token | nothing: its run goes on |
| won, attempt 1 | the job's next slot was due first (not "allow") | release unrun, as done |
| won, reissued | otherwise | run, renewing the lease first |
| skipped, older slot its own | it runs it, `overlap="replace"` | ask that run to end (lease kept till then) |
| skipped, older slot its own | the slot it released unrun | claim again soon (backing off) |
| skipped, older slot its own | it does not run it (answer lost) | free it, then claim again |

(A reissued win is this instance's own lease again, from a claim whose answer was lost. Only the
latest slot runs, so a first attempt won after the next slot was due is released without running.)
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ._errors import BackendError
from ._job import Job
from ._logs import SlotText
from ._speed import CLAIM_EARLY as _EARLY
from ._speed import CLAIM_EXHAUSTED as _EXHAUSTED
from ._speed import CLAIM_SKIPPED as _SKIPPED
from ._speed import CLAIM_TAKEN as _TAKEN
from ._speed import CLAIM_WON as _WON
from ._speed import OVERLAP_ALLOW as _ALLOW
from ._speed import OVERLAP_BUFFER_ONE as _BUFFER_ONE
from ._speed import OVERLAP_REPLACE as _REPLACE
from ._speed import STATUS_RELEASED as _RELEASED
from .backends import ClaimResult, Lease

__all__ = ["Action", "Claim", "Facts", "Running", "Step", "is_takeover", "late_by", "react", "react_taken",
           "skips", "verdict"]


class Step(enum.Enum):
    """What the engine does next with a claimed slot."""

    RUN = "run"
    """Start a run on `result.lease`."""
    HAND_BACK = "hand back"
    """Won as the instance stops: release the slot as a handover at once, for a backup to run."""
    WATCH = "watch"
    """Claim `Action.slot` again after `Action.delay_ms` plus the job's jitter."""
    DROP = "drop"
    """Stop watching `Action.slot`."""
    UNRUN = "release unrun"
    """Won too late to run (the job's next slot was due): release the lease as done at once."""
    FREE_OWN = "free own"
    """Skipped behind `Action.older`, held by this instance's own unanswered claim: claim that slot
    (its own lease comes back, reissued), release it, then claim the entry's slot again."""
    RETRY = "retry"
    """Claim the entry's slot again soon, within the job's jitter and backing off (the older slot it
    waits on is being released)."""
    NOTHING = "nothing"
    """This instance already runs the slot: nothing to do."""


# The steps, read from the class once (the claim outcomes and overlaps: anarchon/_speed.py).
_RUN, _HAND_BACK, _WATCH, _DROP = Step.RUN, Step.HAND_BACK, Step.WATCH, Step.DROP
_UNRUN, _FREE_OWN, _RETRY, _NOTHING = Step.UNRUN, Step.FREE_OWN, Step.RETRY, Step.NOTHING
_DEBUG, _INFO = logging.DEBUG, logging.INFO


@dataclass(frozen=True, slots=True)
class Facts:
    """What a claim's meaning depends on besides the claim: the instance and its backend."""

    instance_id: str
    leases: bool
    """The backend keeps leases (takeover, backups); claim-only backends do not."""
    notify: bool
    """The backend pushes handovers, so a backup need not poll for them."""
    announced: bool = False
    """The backend pushes wins: a boundary's win is told to the planner (leaders' shares)."""


class Running(Protocol):
    """What the verdict asks of this instance's runs."""

    def running(self, name: str, slot: int, token: int | None = None) -> bool:
        """True while a run of job `name` for `slot` (holding `token`, if given) is in progress."""
        ...


@dataclass(frozen=True, slots=True)
class Claim:
    """The claim a result answers, as the planner made it."""

    slot: int
    kind: str
    """"slot" (a boundary), "catchup", "retry" or "watch" (a backup's re-claim)."""
    following: int | None
    """The job's slot after `slot`, if any."""


@dataclass(slots=True)  # (not frozen: a frozen dataclass's __init__ is a call per field, per claim)
class Action:
    """What to do with one claim's result, and the log line that says so."""

    step: Step
    slot: int
    """The slot to run, hand back, watch or drop (for a skipped claim, possibly the older slot)."""
    delay_ms: int = 0
    """For WATCH: how long until the claim is due again, before jitter."""
    backup: bool = False
    """For WATCH: a backup's watch, which the job's next boundary may settle first."""
    supersedes: bool = False
    """Watches of slots older than the result's slot are settled by it and dropped."""
    level: int = logging.DEBUG
    message: str = ""
    args: tuple[object, ...] = ()
    skipped: bool = False
    """The slot is skipped for good (an overlap skip not buffered to run later): observers are told."""
    takeover: bool = False
    """RUN: a takeover of a holder whose lease ran out (observers are told)."""
    announce: bool = False
    """RUN: a boundary's win that the planner counts (leaders' shares)."""
    renew_first: bool = False
    """RUN: its own lease again (reissued), perhaps about to expire: renewed before the run starts."""
    older: int = 0
    """FREE_OWN: the older slot to free."""
    replaces: int | None = None
    """WATCH under `overlap="replace"`: the older slot whose run on this instance is asked to end."""
    late_ms: int = 0
    """UNRUN: how late after its slot the win came."""


def verdict(job: Job, result: ClaimResult, claim: Claim, *, stopping: bool, facts: Facts, now: int,
            runs: Running, not_run: Mapping[str, int]) -> Action:
    """The whole verdict on `result`, the answer to `claim` of `job`: `react`, refined by what this
    instance knows of itself (`runs` in progress, each job's slot released unrun in `not_run`) at
    `now` (the clock's time). The engine carries it out as it is.

    Raises `BackendError` for a won result without a lease: a backend bug, reported per result.
    """
    action = react(job, result, watching=claim.kind == "watch", stopping=stopping, facts=facts)
    outcome = result.outcome
    if outcome is _SKIPPED:
        action.skipped = skips(result, action)
        if result.holder == facts.instance_id:
            _skipped_by_itself(job, result, action, runs, not_run)
        if claim.kind == "watch" and job.options.claim_overlap is _BUFFER_ONE and action.level == _INFO:
            action.level = _DEBUG  # (said at the first claim: each heartbeat's poll adds nothing)
        return action
    lease = result.lease
    if lease is None:
        return action
    if result.reissued and runs.running(job.name, result.slot, lease.token):
        action.step = _NOTHING  # its own run, already going
        return action
    if action.step is not _RUN:
        return action
    late = late_by(job, lease, claim.following if lease.slot == claim.slot else None, now)
    if late is not None:
        action.step, action.late_ms = _UNRUN, late
        return action
    action.announce = facts.announced and claim.kind == "slot"
    action.takeover = lease.attempt > 1 and is_takeover(result)
    action.renew_first = result.reissued
    return action


def _skipped_by_itself(job: Job, result: ClaimResult, action: Action, runs: Running,
                       not_run: Mapping[str, int]) -> None:
    """The store skipped `result.slot` behind an older slot that this very instance holds.

    Held by a claim answered too late and released just now (UNRUN): claim again after a heartbeat,
    once the release has landed. Held by a claim whose answer never came (the client gave up; the
    request still reached the store): free that older slot, then claim again (FREE_OWN). A run of
    this instance that is still going or still releasing is left alone, but under `overlap="replace"`
    it is asked to end (`Action.replaces`).
    """
    older = result.record_slot
    if older is None:
        return
    if not_run.get(job.name) == older:
        action.step = _RETRY
        return
    if runs.running(job.name, older):
        if job.options.overlap is _REPLACE:
            action.replaces = older
            action.message = ("%s slot=%s replaces slot %s, which runs here: asking that run to end; "
                              "this slot starts once it has ended")
            action.args = (job.name, SlotText(result.slot), SlotText(older))
        return
    action.step, action.older = _FREE_OWN, older
    action.level = logging.INFO
    action.message = ("%s slot=%s waits: slot %s is held by this instance's own unanswered claim "
                      "(its answer was lost); releasing it")
    action.args = (job.name, SlotText(result.slot), SlotText(older))


def late_by(job: Job, lease: Lease, following: int | None, now: int) -> int | None:
    """How late (ms after its slot) a first attempt was won, when the job's next slot was due before
    (`following`, computed when not given): only the latest slot runs, and this one would make it
    skip. None when it may run: in time, a takeover of an older slot, or `overlap="allow"`."""
    if lease.attempt > 1 or job.options.overlap is _ALLOW:
        return None
    if following is None:
        following = job.schedule.next_slot(lease.slot)
    if following is None or following > now:
        return None
    return now - lease.slot


def react(job: Job, result: ClaimResult, *, watching: bool, stopping: bool, facts: Facts) -> Action:
    """The action for `result`, the answer to a claim of `job` (`watching`: a backup's re-claim).

    Raises `BackendError` for a won result without a lease: a backend bug, reported per result.
    """
    outcome = result.outcome
    if outcome is _TAKEN:  # (first: the answer of most claims)
        return react_taken(job, result.slot, result.holder, watching=watching, facts=facts,
                           expires_at=result.expires_at, now=result.now)
    slot = SlotText(result.slot)
    # Skipped and early leave older watched slots alone: the older run is still live, or nothing was decided.
    supersedes = job.options.overlap is not _ALLOW and outcome is not _SKIPPED and outcome is not _EARLY
    if outcome is _WON:
        lease = result.lease
        if lease is None:
            raise BackendError(f"{result!r}: a won claim carries no lease")
        # A claim-only slot won as the instance stops has no handover (the others were told `taken`):
        # it runs, its signal already set.
        step = _HAND_BACK if stopping and facts.leases else _RUN
        # (Positional here and for `taken`, the outcomes of nearly every claim: keywords cost a
        # name match each. In field order: step, slot, delay_ms, backup, supersedes, level, message, args.)
        if lease.attempt > 1:
            how = "takeover" if is_takeover(result) else "handover"
            return Action(step, result.slot, 0, False, supersedes, _INFO, "%s slot=%s %s attempt=%d (%s)",
                          (job.name, slot, how, lease.attempt, facts.instance_id))
        return Action(step, result.slot, 0, False, supersedes, _INFO, "%s slot=%s won attempt=%d (%s)",
                      (job.name, slot, lease.attempt, facts.instance_id))
    if outcome is _SKIPPED:
        older = SlotText(result.record_slot) if result.record_slot else "?"
        message = "%s slot=%s skipped (overlap): slot %s still runs on %s"
        args: tuple[object, ...] = (job.name, slot, older, result.holder)
        if job.options.claim_overlap is _BUFFER_ONE:  # buffer_one, or replace (claimed as buffer_one)
            if job.options.overlap is _REPLACE:
                message = "%s slot=%s waits (overlap=replace): slot %s still runs on %s, which ends it"
            # The older run's normal end is not pushed: poll for it every heartbeat.
            delay = _backup_delay(job, result.expires_at, result.now, facts, poll=True)
            return Action(_WATCH, result.slot, delay, backup=True, level=logging.INFO, message=message,
                          args=args)
        if result.record_slot is not None and facts.leases and result.holder != facts.instance_id:
            # Keep an eye on the older run: if its holder dies, it is taken over as attempt 2.
            delay = _backup_delay(job, result.expires_at, result.now, facts)
            return Action(_WATCH, result.record_slot, delay, backup=True, level=logging.INFO,
                          message=message, args=args)
        return Action(_DROP, result.slot, level=logging.INFO, message=message, args=args)
    if outcome is _EARLY:
        ahead = result.slot - (result.now or result.slot)
        return Action(_WATCH, result.slot, ahead, level=logging.WARNING, message=(
            "%s slot=%s early: this instance's clock runs %d ms ahead of the store's; waiting"),
            args=(job.name, slot, ahead))
    if outcome is _EXHAUSTED:
        return Action(_DROP, result.slot, supersedes=supersedes, level=logging.WARNING,
                      message="%s slot=%s exhausted: %d attempt(s) used, max_attempts=%d",
                      args=(job.name, slot, result.attempt, job.options.max_attempts))
    return Action(_DROP, result.slot, supersedes=supersedes, message="%s slot=%s %s",
                  args=(job.name, slot, outcome.value))


def react_taken(job: Job, slot: int, holder: str | None, *, watching: bool, facts: Facts,
                expires_at: int | None = None, now: int | None = None) -> Action:
    """`react` to a claim of `job`'s `slot` answered TAKEN by `holder` (the holder's lease expiry and
    the store's clock when the answer tells them), without a `ClaimResult`: a win pushed by another
    instance settles a slot as this answer does, thousands of times a boundary."""
    # (A loss is no news: every replica but one loses every slot. DEBUG, not INFO.)
    level = _DEBUG
    supersedes = job.options.overlap is not _ALLOW
    taken: tuple[object, ...] = (job.name, SlotText(slot), holder or "another instance")
    if not facts.leases:
        return Action(_DROP, slot, 0, False, supersedes, level, "%s slot=%s taken by %s", taken)
    return Action(_WATCH, slot, _backup_delay(job, expires_at, now, facts), True, supersedes, level,
                  "%s slot=%s taken by %s", taken)


def is_takeover(result: ClaimResult) -> bool:
    """True for a slot won from a holder whose lease ran out (not handed over, not a first attempt)."""
    return (result.lease is not None and result.lease.attempt > 1
            and result.previous_status != _RELEASED)


def skips(result: ClaimResult, action: Action) -> bool:
    """True when `result` skips its slot for good (an overlap skip that is not buffered to run later)."""
    return (result.outcome is _SKIPPED
            and not (action.step is _WATCH and action.slot == result.slot))



def _backup_delay(job: Job, expires_at: int | None, now: int | None, facts: Facts, *, poll: bool = False
                  ) -> int:
    """When a backup should look again: at the holder's expiry (by the store's clock), and no later
    than one heartbeat where the backend does not push handovers (or with `poll`)."""
    delay = expires_at - now if expires_at is not None and now is not None else job.options.lease_ms
    if poll or not facts.notify:
        delay = min(delay, job.options.heartbeat_ms)
    return delay
