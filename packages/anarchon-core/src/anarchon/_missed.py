"""Missed slots: which slots of a job did no replica run, and who says so?

When a replica starts, it reads each job's newest record once (one `jobs()` call, where the store can
be inspected). The slots of the job's schedule after that record's slot, due once its run had ended
(slots due while it still ran were skipped by its overlap policy, not missed), and before the first
slot this replica then wins, ran nowhere: the cluster was down, or every replica had stopped. Catch-up
runs the newest of them at most; the others are missed.

Only the replica that wins that first slot (attempt 1, over the same record: `record_slot` where the
store reports it) reports the gap, so replicas that start together count it once. It logs one warning,
delivers the `anarchon_slots_missed` hook (metrics), and records the newest missed slots in the history,
outcome `missed` (attempt 0, so a replay of the same slot replaces its entry). A job paused at start is
not judged: its slots were skipped on purpose.

A stored schedule is judged when a replica plans it overdue (`StoredGaps`): its first slot that no run
settled is in the due index. The replica that then wins its first slot (attempt 1) reports the slots
from that one up to the slot it won, less those that the store's record shows were claimed since, the
same way: slots no replica claimed, beyond what catch-up ran.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ._history import HistoryWriter
from ._job import Job
from ._logs import fields, fmt_slot, short
from ._runs import Hook
from ._schedules import Every, Schedule
from .backends import ClaimResult, InspectBackend, JobStatus

__all__ = ["MAX_COUNTED", "MAX_GAPS", "Gap", "MissedSlots", "StoredGaps", "count_missed"]

MAX_COUNTED = 100_000
"""The most slots of a schedule other than `every` walked to count one gap (the count stops there)."""
MAX_GAPS = 100_000
"""The most overdue stored schedules a replica keeps waiting for their next claim."""



@dataclass(frozen=True, slots=True)
class Gap:
    """What a job's newest record said when this replica started."""

    slot: int
    """The newest slot any replica claimed."""
    ended: int
    """When that slot's run ended, or its lease did (store time, epoch ms)."""


def count_missed(schedule: Schedule, after: int, before: int, newest: int) -> tuple[int, list[int]]:
    """(How many, the newest `newest`, newest first) of `schedule`'s slots strictly between `after`
    and `before`."""
    first = schedule.next_slot(after)
    if first is None or first >= before:
        return 0, []
    if isinstance(schedule, Every):
        last = schedule.prev_slot(before - 1)
        count = (last - first) // schedule.interval_ms + 1
        return count, list(range(last, first - 1, -schedule.interval_ms))[:newest]
    kept: collections.deque[int] = collections.deque(maxlen=max(newest, 0))
    count = 0
    slot: int | None = first
    while slot is not None and slot < before and count < MAX_COUNTED:
        kept.append(slot)
        count += 1
        slot = schedule.next_slot(slot)
    return count, list(reversed(kept))


class MissedSlots:
    """One start's pending gaps: each job's settled by its first claim result."""

    def __init__(self, gaps: dict[str, Gap], *, namespace: str, instance_id: str, log: logging.Logger,
                 hook: Hook, history: HistoryWriter | None) -> None:
        self._gaps = gaps
        self._namespace = namespace
        self._instance_id = instance_id
        self._log = log
        self._hook = hook
        self._history = history

    @classmethod
    async def read(cls, backend: InspectBackend, namespace: str, instance_id: str, jobs: Iterable[Job],
                   paused: set[str], *, log: logging.Logger, hook: Hook,
                   history: HistoryWriter | None) -> MissedSlots | None:
        """Read the namespace's records once; None when nothing can be missed or the read failed."""
        wanted = {job.name: job for job in jobs if job.name not in paused}
        if not wanted:
            return None
        try:
            states = await backend.jobs(namespace)
        except Exception as exc:  # the claims say the store is away; missed slots go uncounted
            log.debug("missed slots: reading the records of namespace %r failed: %s", namespace, short(exc))
            return None
        gaps: dict[str, Gap] = {}
        for state in states:
            job = wanted.get(state.job)
            if job is None or (state.fingerprint and state.fingerprint != job.schedule.fingerprint):
                continue  # another replica's job, or another schedule: its slots are not this one's
            running = state.status is JobStatus.RUNNING
            gaps[state.job] = Gap(state.slot, state.expires_at if running else state.updated_at)
        if not gaps:
            return None
        return cls(gaps, namespace=namespace, instance_id=instance_id, log=log, hook=hook, history=history)

    @property
    def pending(self) -> bool:
        """True while a job's first claim result is awaited."""
        return bool(self._gaps)

    def settle(self, job: Job, result: ClaimResult) -> None:
        """`job`'s first claim result since the start: report the gap before it if this replica won."""
        gap = self._gaps.pop(job.name, None)
        lease = result.lease
        if gap is None or lease is None or lease.attempt != 1 or result.reissued or lease.slot <= gap.slot:
            return
        if result.record_slot is not None and result.record_slot != gap.slot:
            return  # another replica claimed a slot since the read: it ran, or reports, the gap
        report(job, max(gap.slot, gap.ended), lease.slot,
               f"found at start; the store's newest slot was {fmt_slot(gap.slot)}", namespace=self._namespace,
               instance_id=self._instance_id, log=self._log, hook=self._hook, history=self._history)


class StoredGaps:
    """The stored schedules planned here overdue, each judged by its first claim result here."""

    def __init__(self, *, namespace: str, instance_id: str, log: logging.Logger, hook: Hook,
                 history: HistoryWriter | None) -> None:
        self._gaps: dict[str, tuple[int, int]] = {}
        """Per stored schedule planned overdue: (its first slot not settled, its version)."""
        self._namespace = namespace
        self._instance_id = instance_id
        self._log = log
        self._hook = hook
        self._history = history

    def overdue(self, name: str, version: int, first: int | None) -> None:
        """Version `version` of stored schedule `name` is planned here with `first`, a slot already
        due, as its first slot not settled; None: it is planned due later.

        A gap is kept while its schedule is planned no more (the sweep may move the due index past a
        long gap, and plan the schedule again when its next slot is near), until a write of it."""
        kept = self._gaps.get(name)
        if kept is not None and kept[1] == version:
            return
        if first is None:
            self._gaps.pop(name, None)
            return
        if len(self._gaps) >= MAX_GAPS:
            self._gaps.clear()  # (gaps whose next slots went to other replicas; theirs are counted there)
        self._gaps[name] = (first, version)

    def settle(self, job: Job, result: ClaimResult) -> None:
        """`job`'s first claim result since it was planned overdue: report the slots before the slot
        won that no replica claimed, if this replica won it."""
        if not self._gaps:
            return
        kept = self._gaps.pop(job.name, None)
        lease = result.lease
        if kept is None:
            return
        first = kept[0]
        if lease is None or lease.attempt != 1 or result.reissued or lease.slot <= first:
            return
        after = first - 1 if result.record_slot is None else max(first - 1, result.record_slot)
        found = f"found in the due index; its first slot not settled was {fmt_slot(first)}"
        report(job, after, lease.slot, found, namespace=self._namespace, instance_id=self._instance_id,
               log=self._log, hook=self._hook, history=self._history)


def report(job: Job, after: int, before: int, found: str, *, namespace: str, instance_id: str,
           log: logging.Logger, hook: Hook, history: HistoryWriter | None) -> None:
    """Say, count and record the slots of `job` strictly between `after` and `before`, if any."""
    keep = history.keep if history is not None else 1
    count, slots = count_missed(job.schedule, after, before, max(keep, 1))
    if not count:
        return
    span = (f"from {fmt_slot(slots[-1])} to {fmt_slot(slots[0])}" if count == len(slots)
            else f"up to {fmt_slot(slots[0])}")
    text = f"{count} slot(s) missed {span}: no replica ran them ({found})"
    log.warning("%s: %s", job.name, text, extra=fields(job.name, slots[0], instance_id, outcome="missed"))
    hook.emit("anarchon_slots_missed", namespace=namespace, job=job.name, count=count, slots=slots,
              instance=instance_id, task=job.task)
    if history is not None:
        history.record_missed(job.name, slots, text)
