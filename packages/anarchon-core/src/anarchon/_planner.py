"""The planner: when is each job's next claim due?

One heap of (due time, job, slot) for every job. The heap holds numbers only, each entry's due time
and sequence number packed into one int, so that sifting compares two ints, not two tuples whose due
times tie (the jobs of a group share theirs); the rest of each entry is a tuple of numbers and strings
beside it, which the garbage collector stops tracking, so thousands of entries waiting for the next
second are not traversed again and again. A boundary entry is due at `slot + jitter`; popping
it pushes the job's next slot, so no slot is lost while a claim is in flight. A backup's watch is an
entry too, due when the holder's lease expires (or at once on a pushed handover). Catch-up at start
is one entry for the latest missed slot, when that slot is worth the run (see `_plan_first`). Where
the backend announces wins, the instances share each boundary out (see `_slot_jitter`).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import logging
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._clock import Clock
from ._job import Job
from ._logs import fmt_slot
from ._outcomes import Action, Step
from ._schedules import At
from ._speed import OVERLAP_ALLOW as _ALLOW
from ._speed import OVERLAP_BUFFER_ONE as _BUFFER_ONE
from ._wakeup import Wakeup

__all__ = ["Due", "Plan", "Planner"]

_BATCH_WINDOW_MS = 5
# Jobs due at one moment are claimed in this many batches per instance, each with its own random
# delay: few round trips, yet each replica wins about its share of every boundary.
_JITTER_GROUPS = 4
# An instance claims a group that another instance leads at least this much later, in jitters, and
# later still when the leaders' wins take longer to be heard (see `Planner._follow`): by then the
# leader's wins have been pushed, and those claims are not sent.
_FOLLOW_JITTERS = 1
_FOLLOW_CAP_MS = 1000
# How long after its slot a leader's win is heard is the longest seen in a window of this length.
_HEARD_WINDOW_MS = 2000
# An instance that the store has not pushed a win of for this long no longer leads any group (one
# that is gone is dropped sooner: see `Planner._won`).
_MEMBER_TTL_MS = 120_000
# How long after the others' claims of a slot were due a win counts as one of theirs (`Planner._won`).
_FOLLOWED_WITHIN_MS = 1000
# A missed slot is caught up when the next slot is at least half an interval away, or this far.
_CATCH_UP_ROOM_MS = 300_000

# An entry's heap key is its due time shifted left by this many bits, plus its sequence number (which
# keeps ties in push order): the sequence wraps only after 2**32 pushes, none of which share a due time.
_SEQ_BITS = 32
_SEQ_MASK = (1 << _SEQ_BITS) - 1

def _follow_cap(interval_ms: int | None, jitter_ms: int) -> int:
    """The latest after its slot an instance claims a group another instance leads: 1 s, or for
    shorter intervals the interval less two jitters (and at least half of it).

    The wait grows to this only while the leaders' wins take that long to be heard (a busy store):
    claiming before then would send a claim of every slot from every instance, and the added load
    make the wins later still. Two jitters short of the next slot, a claim of a slot whose leader is
    gone still comes before the next slot is due."""
    if interval_ms is None:
        return _FOLLOW_CAP_MS
    return min(_FOLLOW_CAP_MS, max(interval_ms // 2, interval_ms - 2 * jitter_ms))


@dataclass(eq=False, slots=True)
class Plan:
    """One job's planning state."""

    job: Job
    jitter_ms: int
    group: int
    """Which of the jitter groups the job's claims are batched in."""
    fingerprint: str
    """The schedule's fingerprint, computed once."""
    # The slots this instance watches as a backup (taken or buffered), each with the generation
    # of its live heap entry so that stale entries are recognised. One slot at most, except under
    # overlap="allow", where every slot has its own record and each running one may need a takeover.
    watches: dict[int, int] = field(default_factory=dict)
    watch_gen: int = 0
    index: int = 0
    """Where the planner keeps it (its heap entries name it by this number)."""
    latest_slot: int | None = None
    """The newest slot claimed from a boundary or a catch-up."""
    next_due: int | None = None
    """When the job's next boundary entry is due (its slot plus jitter)."""
    decided: int | None = None
    """A slot the store pushed as won by another instance (`Planner.decided`), not yet claimed here."""
    decided_by: str = ""
    """The instance that won `decided`."""
    follow_cap_ms: int = _FOLLOW_CAP_MS
    """The latest this instance claims, after its slot, a group another instance leads (`_follow_cap`)."""
    until: int | None = None
    """A stored schedule's bound: no boundary slot later than this is queued (None: a code job)."""
    epoch: int = 0
    """Bumped when a stored schedule's job is replaced or retired: boundary entries queued before are void."""
    touched: int = 0
    """When an entry of this plan was last handed over for a claim (the clock's ms)."""
    not_before: int | None = None
    """A stored schedule's last write: no slot at or before it is caught up (it did not exist so)."""


@dataclass(slots=True)
class Due:
    """A claim that is due: one slot of one job."""

    due: int
    plan: Plan
    slot: int
    kind: str
    """"slot" (a boundary), "watch" (a backup's re-claim), "catchup", or "retry" (a boundary or
    catch-up claim sent again after it failed)."""
    gen: int = 0
    tries: int = 0
    """Claims of this slot that failed in a row (the store did not answer)."""
    following: int | None = None
    """The job's slot after `slot` (None when it has none), set once the planner accepts the entry."""


class Planner:
    """The timer heap of every job's next claim, and the loop that hands due claims over in batches."""

    def __init__(self, clock: Clock, log: logging.Logger, *, jitter_ms: int | None,
                 horizon_ms: int | None, shares: str | None = None) -> None:
        """`shares`: this instance's id, where the backend announces wins; the planner then splits
        each boundary's jitter groups among the instances whose wins it hears (see `_slot_jitter`)."""
        self._clock = clock
        self._log = log
        self._default_jitter_ms = jitter_ms
        self._horizon_ms = horizon_ms
        # Keys (due << _SEQ_BITS | sequence), and by key the rest: (slot, kind, gen, plan index, tries).
        self._heap: list[int] = []
        self._entries: dict[int, tuple[int, str, int, int, int]] = {}
        self._seq = 0
        self._wake = Wakeup()
        self._rng = random.Random()
        self._slot_draws: dict[int, tuple[float, str | None]] = {}
        """Each (slot, group)'s jitter draw and leader, by `slot * _JITTER_GROUPS + group` (an int key:
        no tuple to build and hash, twice per claim attempt)."""
        self._self_id = shares
        self._seen: dict[str, int] = {}
        """Other instances whose wins were pushed, and when last (the clock's ms)."""
        self._members: list[tuple[str, bytes]] = []
        self._members_at: int | None = None
        """When `_members` was worked out from `_seen`; None: to be worked out again."""
        self._leaders: list[str] = []
        """The leader of each group of one slot (see `_leader`)."""
        self._ranked: tuple[int, list[tuple[str, bytes]]] | None = None
        """The slot and the members `_leaders` was worked out for."""
        self._heard_ms = 0
        """How long after their slots leaders' wins were heard at most, in the last whole window."""
        self._heard_top = 0
        self._heard_at = 0
        self._plans: dict[str, Plan] = {}
        self._by_index: dict[int, Plan] = {}
        self._next_index = 0
        self._closed = False

    def add(self, job: Job, *, until: int | None = None, not_before: int | None = None) -> None:
        """Plan `job` from now on: its next boundary, and a catch-up of the slot it missed. With
        `until` (a stored schedule's), no boundary later than that slot is planned until `extend`;
        with `not_before`, no slot before that one is caught up (a schedule written after it)."""
        jitter = job.options.jitter_ms
        if jitter is None and until is not None:
            jitter = 0  # a stored schedule's slot has one claimer, its partition's sweeper: no race to spread
        if jitter is None:
            jitter = self._default_jitter_ms
        interval = job.schedule.min_interval_ms
        if jitter is None:
            jitter = 50 if interval is None else min(50, interval // 10)
        if job.name in self._plans:
            raise ValueError(f"job {job.name!r} is planned already")
        plan = Plan(job, jitter, zlib.crc32(job.name.encode()) % _JITTER_GROUPS, job.schedule.fingerprint,
                    index=self._next_index, follow_cap_ms=_follow_cap(interval, jitter), until=until,
                    not_before=not_before)
        self._next_index += 1
        self._plans[job.name] = plan
        self._by_index[plan.index] = plan
        self._plan_first(plan, self._clock.now_ms())

    def plan_of(self, name: str) -> Plan | None:
        """The plan of job `name`, if it is planned."""
        return self._plans.get(name)

    def extend(self, plan: Plan, until: int) -> None:
        """Plan the boundaries of a stored schedule's job up to slot `until`: the next one is queued
        if it was held back by the previous bound."""
        if plan.until is not None and until <= plan.until:
            return
        plan.until = until
        if plan.next_due is not None or self._closed:
            return
        now = self._clock.now_ms()
        latest = plan.latest_slot
        # After the latest slot claimed: a boundary held back while the sweep came late is claimed late
        # (a late boundary jumps to the newest due slot, as a code job's does), not skipped.
        nxt = plan.job.schedule.next_slot(now if latest is None else latest)
        if nxt is not None and nxt <= until:
            plan.next_due = nxt + self._slot_jitter(plan, nxt)
            self._push(plan.next_due, plan, nxt, "slot", plan.epoch)

    def replace(self, plan: Plan, job: Job, *, until: int | None, not_before: int | None) -> None:
        """Plan a stored schedule's changed job in place of the old one: the boundaries the old one
        queued are void, the slots it watches stay watched (a run of the old schedule is still taken
        over), and the new schedule's next boundary up to `until` is queued (no catch-up)."""
        plan.job = job
        plan.fingerprint = job.schedule.fingerprint
        plan.not_before = not_before
        self.retire(plan)
        if until is None:
            return
        plan.until = until
        now = self._clock.now_ms()
        nxt = job.schedule.next_slot(now)
        if nxt is not None and nxt <= until:
            plan.next_due = nxt + self._slot_jitter(plan, nxt)
            self._push(plan.next_due, plan, nxt, "slot", plan.epoch)

    def retire(self, plan: Plan) -> None:
        """Queue no more boundaries of this plan (a stored schedule removed or paused); the slots it
        watches stay watched until they settle."""
        plan.epoch += 1
        plan.next_due = None
        plan.until = -1

    def remove(self, name: str) -> None:
        """Plan job `name` no more: its queued entries are dropped as they come due."""
        plan = self._plans.pop(name, None)
        if plan is not None:
            self._by_index.pop(plan.index, None)

    def idle(self, plan: Plan, quiet_ms: int = 0) -> bool:
        """True when the plan has nothing queued (no boundary, no slot watched) and was handed over for
        no claim within the last `quiet_ms` (a claim in flight may still ask to watch a slot)."""
        return (plan.next_due is None and not plan.watches
                and self._clock.now_ms() - plan.touched >= quiet_ms)

    def close(self) -> None:
        """Plan nothing more: pushed handovers and new watches are ignored from now on."""
        self._closed = True
        self._heap.clear()
        self._entries.clear()

    async def run(self, claim: Callable[[list[Due]], None],
                  decided: Callable[[list[Due]], None] | None = None) -> None:
        """Hand every claim to `claim` when it is due, those due within a few ms in one batch; a
        boundary whose slot the store pushed as won elsewhere (`Planner.decided`) goes to `decided`
        instead, unclaimed."""
        heap, entries = self._heap, self._entries
        plans = self._by_index
        wake = self._wake
        yielded = False
        while True:
            if not heap:
                wake.clear()
                await wake.wait()
                continue
            now = self._clock.now_ms()
            delay = (heap[0] >> _SEQ_BITS) - now
            if delay > 0:
                wake.clear()
                await wake.wait(delay / 1000)
                continue
            if decided is not None and not yielded:
                # One turn of the loop first: wins that other replicas announced while this one was
                # busy are read before the batch is taken (a claim decided already is not sent).
                yielded = True
                await asyncio.sleep(0)
                continue
            yielded = False
            batch: list[Due] = []
            known: list[Due] = []
            limit = now + _BATCH_WINDOW_MS
            while heap and ((due := heap[0] >> _SEQ_BITS) <= now
                            or (due <= limit and entries[heap[0]][0] <= now)):
                slot, kind, gen, index, tries = entries.pop(heapq.heappop(heap))
                found = plans.get(index)
                if found is None:
                    continue  # a job planned no more (a stored schedule removed or evicted)
                plan = found
                entry = Due(due, plan, slot, kind, gen, tries)
                if self._accept(entry, now):
                    plan.touched = now
                    if plan.decided == slot and kind == "slot" and decided is not None:
                        known.append(entry)
                    else:
                        batch.append(entry)
            if known and decided is not None:
                decided(known)
            if batch:
                claim(batch)

    # -- what follows a claim -----------------------------------------------------------------

    def settle(self, plan: Plan, action: Action) -> None:
        """Update the job's watches after a claim's result: watch a slot again, or stop watching it."""
        watches = plan.watches
        # (A watch that supersedes needs no sweep: `_watch` clears the others outside overlap="allow",
        # and under "allow" nothing supersedes. A backup watches a slot per boundary: this runs often.)
        watch = action.step is Step.WATCH
        if action.supersedes and watches and not watch:
            for older in [w for w in watches if w < action.slot]:
                del watches[older]  # a newer slot superseded the older one this instance watched
        if watch:
            self._watch(plan, action.slot, action.delay_ms, backup=action.backup, jitter=True)
        else:
            watches.pop(action.slot, None)

    def retry(self, batch: list[Due], max_delay_ms: int) -> int:
        """Claim the slots of a failed batch again at once, each after a random delay within its
        job's jitter (at least 20 ms), doubling with each failure in a row up to `max_delay_ms`; not
        once a newer slot took its place. Returns the longest delay."""
        longest = 0
        for entry in batch:
            plan = entry.plan
            if plan.latest_slot == entry.slot or entry.kind == "watch":
                window = min(max(plan.jitter_ms, 20) << min(entry.tries, 10), max_delay_ms)
                delay = int(self._rng.random() * (window + 1))
                longest = max(longest, delay)
                self._watch(plan, entry.slot, delay, tries=entry.tries + 1,
                            kind="watch" if entry.kind == "watch" else "retry")
        return longest

    def again(self, entry: Due, delay_ms: int) -> None:
        """Claim `entry`'s slot again after `delay_ms` (plus jitter), unless a newer one took its place."""
        plan = entry.plan
        if plan.latest_slot == entry.slot or entry.kind == "watch":
            self._watch(plan, entry.slot, delay_ms + self.jitter(plan), tries=entry.tries,
                        kind="watch" if entry.kind == "watch" else "retry")

    def watch(self, job: Job, slot: int) -> None:
        """Claim `slot` of `job` again at once: a run handed over for a retry."""
        plan = self._plans.get(job.name)
        if plan is not None:
            self._watch(plan, slot, 0)

    def on_release(self, job_name: str, slot: int) -> None:
        """A pushed handover: a backup watching that job re-claims at once."""
        plan = self._plans.get(job_name)
        if plan is None or self._closed:
            return
        if plan.decided == slot:
            # Won elsewhere and handed over before this instance's claim was due: claim it after all.
            plan.decided = None
        if not plan.watches:
            return
        if slot in plan.watches:
            self._watch(plan, slot, self.jitter(plan))
        elif plan.job.options.claim_overlap is _BUFFER_ONE:  # (replace too: claimed as buffer_one)
            self._watch(plan, max(plan.watches), self.jitter(plan))

    def ended_here(self, job_name: str) -> None:
        """A run of the job ended on this instance: under `buffer_one` (and `replace`, claimed as
        it), the newer slot watched behind it is claimed again now, within the jitter."""
        plan = self._plans.get(job_name)
        if plan is None or self._closed or not plan.watches:
            return
        if plan.job.options.claim_overlap is _BUFFER_ONE:
            self._watch(plan, max(plan.watches), self.jitter(plan))

    def decided(self, owner: str, wins: Sequence[tuple[str, int]]) -> None:
        """The store pushed that `owner` won these (job, slot)s: their boundary claims here are
        skipped, and each slot watched as a backup as if the claim had been answered `taken`. With
        shares, `owner` is an instance that shares the boundaries."""
        now = self._clock.now_ms()
        shares = self._self_id is not None
        if shares:
            if owner not in self._seen:
                self._members_at = None
            self._seen[owner] = now
        plans = self._plans
        for job_name, slot in wins:
            plan = plans.get(job_name)
            if plan is None:
                continue
            if shares:
                self._won(plan, slot, owner, now)
            if plan.latest_slot is None or plan.latest_slot < slot:
                plan.decided = slot
                plan.decided_by = owner

    def heard(self, instance: str) -> int | None:
        """When a win of `instance` was last pushed (the clock's ms); None: not lately, or never."""
        return self._seen.get(instance)

    def won(self, plan: Plan, slot: int, owner: str, now: int | None = None) -> None:
        """`owner` (this instance) won `slot` of the job (see `_won`), as known at `now` (the clock's
        time when not given)."""
        self._won(plan, slot, owner, self._clock.now_ms() if now is None else now)

    def _won(self, plan: Plan, slot: int, owner: str, now: int) -> None:
        """`owner` won `slot` of the job, as known at `now`.

        A leader's win tells how long after its slot a win is heard here (`_follow`). A win by
        another instance, where another led here, that came when the others' claims were due means
        the leader did not claim in time (it is gone, or far behind): it leads nothing until its next
        pushed win. (An earlier win by another instance is one that counts itself the leader, as a new
        one does until it has heard of the others; a much later one is a takeover or a handover.)
        """
        drawn = self._slot_draws.get(slot * _JITTER_GROUPS + plan.group)
        if drawn is None:
            return
        leader = drawn[1]
        if leader == owner:
            heard = now - slot
            if self._heard_top < heard <= plan.follow_cap_ms + plan.jitter_ms:  # (later: a takeover)
                self._heard_top = heard
            if now - self._heard_at >= _HEARD_WINDOW_MS:
                self._heard_ms, self._heard_top, self._heard_at = self._heard_top, 0, now
            return
        if leader is None:
            return
        since = now - slot - self._follow(plan)
        if 0 <= since <= plan.jitter_ms + _FOLLOWED_WITHIN_MS and self._seen.pop(leader, None) is not None:
            self._members_at = None

    def _follow(self, plan: Plan) -> int:
        """How long after its slot this instance claims a group another instance leads: once the
        leader's wins are usually heard (a quarter more than the longest lately), at least a
        jitter (the leader claims within half of one, or less), at most `plan.follow_cap_ms`."""
        return max(_FOLLOW_JITTERS * plan.jitter_ms, min(self._heard_ms * 5 // 4, plan.follow_cap_ms))

    def jitter(self, plan: Plan) -> int:
        """A fresh random delay within the job's jitter."""
        return int(self._rng.random() * (plan.jitter_ms + 1)) if plan.jitter_ms > 0 else 0

    # -- the heap -------------------------------------------------------------------------------

    def _push(self, due: int, plan: Plan, slot: int, kind: str, gen: int = 0, tries: int = 0) -> None:
        if self._closed:
            return
        self._seq = seq = (self._seq + 1) & _SEQ_MASK
        key = due << _SEQ_BITS | seq
        self._entries[key] = (slot, kind, gen, plan.index, tries)
        heapq.heappush(self._heap, key)
        if self._heap[0] == key:
            self._wake.set()

    def _slot_jitter(self, plan: Plan, slot: int) -> int:
        """The job's jitter for `slot`: one draw per (instance, slot, group of jobs).

        Jobs due together share a draw with the other jobs of their group, so they go in one
        claim_many; the groups (a stable hash of the name) keep a boundary's wins spread over the
        replicas, so one crashed replica holds about 1/replicas of the jobs in flight, not all.

        With shares, each group of a slot has a leader among this instance and the others whose wins
        were pushed lately, the same on every instance that knows the same others (rendezvous
        hashing). This instance claims the groups it leads within the jitter, and the others once
        the leader's wins are usually heard (`_follow`): those claims are then not sent, and a leader
        that is gone only delays its groups' slots by that much.
        """
        jitter = plan.jitter_ms
        if jitter <= 0:
            return 0
        key = slot * _JITTER_GROUPS + plan.group
        drawn = self._slot_draws.get(key)
        if drawn is None:
            if len(self._slot_draws) > 4096:
                self._slot_draws.clear()
            leader = None if self._self_id is None else self._leader(slot, plan.group)
            drawn = self._slot_draws[key] = (self._rng.random(), leader)
        draw, leader = drawn
        if plan.until is not None:
            # A stored schedule's (with a jitter of its own): its partition's sweeper is its one
            # claimer, so no group leads and none follows.
            return int(draw * jitter)
        if leader is None:
            # Only the leader claims within the jitter: as early, on average, as the first of all
            # the replicas' draws would be.
            return int(draw * jitter / len(self._members)) if self._members else int(draw * jitter)
        return int(draw * jitter) + self._follow(plan)

    def _leader(self, slot: int, group: int) -> str | None:
        """The instance that leads `group` at `slot`: None when it is this one.

        Each group goes to the member with the highest hash of (slot, group, instance id), the same on
        every instance that knows the same members (rendezvous hashing), unless that one leads its
        share of the slot's groups already (four groups, three members: two each at most); then to
        the next. So no instance leads most of a boundary, and a member that comes or goes moves the
        lead of few groups."""
        now = self._clock.now_ms()
        if self._members_at is None or now - self._members_at >= 1000:
            self._members_at = now
            for owner in [o for o, at in self._seen.items() if now - at > _MEMBER_TTL_MS]:
                del self._seen[owner]
            assert self._self_id is not None
            self._members = [(o, o.encode()) for o in sorted([*self._seen, self._self_id])]
        members = self._members
        if len(members) < 2:
            return None
        if self._ranked != (slot, members):
            cap = -(-_JITTER_GROUPS // len(members))
            led = dict.fromkeys([owner for owner, _ in members], 0)
            leaders = []
            for g in range(_JITTER_GROUPS):
                point = f"{slot}/{g}/".encode()
                for owner, _ in sorted(members, reverse=True,
                                       key=lambda m: hashlib.blake2b(point + m[1], digest_size=8).digest()):
                    if led[owner] < cap:
                        led[owner] += 1
                        leaders.append(owner)
                        break
            self._leaders = leaders
            self._ranked = (slot, members)
        best = self._leaders[group]
        return None if best == self._self_id else best

    def _plan_first(self, plan: Plan, now: int) -> None:
        """The job's next boundary, and the latest missed slot when catching it up is worth it.

        A missed slot within `catch_up` is caught up only when the next slot is at least half an
        interval away (at most 5 minutes away for long intervals): the catch-up run then has as
        much time before the next slot as an on-time run of a short job has, so it does not make the
        next on-time slot skip (overlap) unless it lasts that long. Otherwise the next slot, due
        soon, is the job's first run.
        """
        job = plan.job
        opts = job.options
        prev = job.schedule.prev_slot(now)
        if prev is not None and (plan.not_before is None or prev > plan.not_before):
            late = now - prev
            nxt = job.schedule.next_slot(now)
            if opts.catch_up_ms > 0 and late <= opts.catch_up_ms:
                if nxt is None or nxt - now >= min((nxt - prev) // 2, _CATCH_UP_ROOM_MS):
                    self._push(now + self.jitter(plan), plan, prev, "catchup")
                else:
                    self._log.debug("%s slot=%s not caught up: the next slot is due in %d ms", job.name,
                                    fmt_slot(prev), nxt - now)
            elif isinstance(job.schedule, At):
                why = "catch_up is off" if opts.catch_up_ms == 0 else (
                    f"it is {late} ms in the past, beyond catch_up={opts.catch_up_ms} ms")
                self._log.warning("%s slot=%s will not run: %s", job.name, fmt_slot(prev), why)
        slot = job.schedule.next_slot(now)
        if slot is not None and (plan.until is None or slot <= plan.until):
            plan.next_due = slot + self._slot_jitter(plan, slot)
            self._push(plan.next_due, plan, slot, "slot", plan.epoch)

    def _watch(self, plan: Plan, slot: int, delay_ms: int, *, backup: bool = False, tries: int = 0,
               kind: str = "watch", jitter: bool = False) -> None:
        """Watch `slot`: claim it again after `delay_ms` (plus a fresh `jitter` when asked)."""
        allow = plan.job.options.overlap is _ALLOW
        if not allow:
            plan.watches.clear()
        plan.watch_gen += 1
        plan.watches[slot] = plan.watch_gen
        # A backup's watch (not under overlap="allow") is settled by the job's next boundary if that
        # comes first (see below); then no jitter is drawn for it either.
        settles = plan.next_due if backup and not allow else None
        now = self._clock.now_ms()
        delay = delay_ms if delay_ms > 0 else 0
        if jitter and (settles is None or now + delay < settles):
            delay_ms += self.jitter(plan)
            delay = delay_ms if delay_ms > 0 else 0
        due = now + delay
        if settles is not None and due >= settles:
            # The job's next boundary comes first and settles the slot: a newer claim either
            # supersedes it or is skipped, which watches it again. Queueing nothing keeps the heap
            # small with thousands of jobs; a pushed handover still finds the watch. (Not under
            # overlap="allow": there a newer slot neither supersedes nor skips an older one.)
            return
        self._push(due, plan, slot, kind, plan.watch_gen, tries)

    def _accept(self, entry: Due, now: int) -> bool:
        """Plan what follows a popped entry, and say whether it still needs a claim."""
        plan = entry.plan
        job = plan.job
        following = entry.following = job.schedule.next_slot(entry.slot)
        if entry.kind == "watch":
            return plan.watches.get(entry.slot) == entry.gen
        if entry.kind == "retry":
            # A newer slot claimed meanwhile takes its place: only the latest slot is worth a claim.
            return plan.watches.get(entry.slot) == entry.gen and plan.latest_slot == entry.slot
        if entry.kind == "slot":
            if entry.gen != plan.epoch:
                return False  # queued before the plan's job was replaced or retired
            nxt = following
            if nxt is not None and nxt <= now:
                # This instance is late (a blocked loop, a suspended host): jump to the newest due
                # slot instead of claiming every one it missed.
                nxt = max(nxt, job.schedule.prev_slot(now) or nxt)
            # (None for a job with no next slot, an `at` job: no boundary will settle its watches.)
            plan.next_due = None
            if nxt is not None and (plan.until is None or nxt <= plan.until):
                plan.next_due = nxt + self._slot_jitter(plan, nxt)
                self._push(plan.next_due, plan, nxt, "slot", plan.epoch)
            if following is not None and following + plan.jitter_ms <= now:
                # ... and not this one either: a newer slot is due (its entry is claimed with or
                # just after this batch), and winning this stale slot would make it skip the newer.
                self._log.info("%s slot=%s missed: this instance is %d ms late", job.name,
                               fmt_slot(entry.slot), now - entry.slot)
                return False
        elif entry.kind == "catchup" and following is not None and following <= now:
            return False  # the next boundary is due already: its entry claims the newer slot
        if plan.latest_slot is not None and entry.slot < plan.latest_slot:
            return False  # a newer slot was claimed already (e.g. catch-up raced a boundary)
        horizon = self._horizon_ms
        if horizon is not None and now - entry.slot > horizon // 2:
            self._log.warning(
                "%s slot=%s missed: %d ms late, beyond half the backend's dedupe horizon (%d ms)",
                job.name, fmt_slot(entry.slot), now - entry.slot, horizon,
            )
            return False
        plan.latest_slot = entry.slot
        return True
