"""Cluster-wide controls on a replica: which jobs are paused, and which triggers are still to claim.

The controls live in the store (capability `control`), so every replica, and any process that reaches
the store, reads and writes the same ones; there is no leader. A replica reads its namespace's
controls once per heartbeat in one call. A paused job's slots are skipped before they are claimed. A
trigger is claimed like a slot, under a record of its own (`trigger_key`) whose slot is the trigger's
id, so exactly one replica runs it and it never shares a record with a scheduled slot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ._context import TRIGGER_SUFFIX
from ._job import Job
from ._logs import fields, fmt_slot, short
from .backends import (
    ClaimOutcome,
    ClaimRequest,
    ControlBackend,
    JobControl,
    Lease,
    Overlap,
)

__all__ = ["TRIGGER_SUFFIX", "ControlState", "trigger_key"]

# Outcomes after which a trigger is claimed again at the next poll: another replica may still fail it
# (taken: it is taken over once its lease expires), an older trigger still runs, or a clock is behind.
_AGAIN = frozenset({ClaimOutcome.TAKEN, ClaimOutcome.SKIPPED, ClaimOutcome.EARLY})


def trigger_key(job: str) -> str:
    """The store's record name for the triggers of `job`."""
    return job + TRIGGER_SUFFIX


class ControlState:
    """One engine's view of the controls: polled each heartbeat, applied at once when set locally."""

    def __init__(self, backend: ControlBackend, *, namespace: str, instance_id: str, max_skew_ms: int,
                 log: logging.Logger, jobs: Callable[[str], Job | None],
                 run: Callable[[Job, Lease], None],
                 spawn: Callable[[Coroutine[Any, Any, None], str], object]) -> None:
        self._backend = backend
        self._namespace = namespace
        self._instance_id = instance_id
        self._max_skew_ms = max_skew_ms
        self._log = log
        self._jobs = jobs
        self._run = run
        self._spawn = spawn
        self.paused: set[str] = set()
        """The names of the paused jobs."""
        self._settled: dict[str, int] = {}
        """Per job, the newest trigger id this replica needs to claim no more."""
        self._claiming: set[str] = set()
        self._won: set[tuple[str, int]] = set()
        """The triggers this replica won and may still run: (job, trigger id), the newest per job."""
        self._failing = False
        """Whether the last read failed: a store that stays away is warned about once, not per poll."""

    async def poll(self) -> None:
        """Read the namespace's controls (one call) and apply them; a store error is logged, not raised."""
        try:
            controls = await self._backend.controls(self._namespace)
        except Exception as exc:
            # One warning when the store stops answering (the claims warn too), then quiet until it is back.
            self._log.log(logging.DEBUG if self._failing else logging.WARNING,
                          "reading the controls of namespace %r failed: %s", self._namespace, short(exc))
            self._failing = True
            return
        if self._failing:
            self._failing = False
            self._log.debug("controls of namespace %r read again", self._namespace)
        for name in {*self.paused, *controls}:
            self.apply(name, controls.get(name, JobControl()))

    def apply(self, name: str, control: JobControl) -> None:
        """Take `name`'s controls into account: pause or resume it, claim a new trigger."""
        job = self._jobs(name)
        if job is None:
            return  # not registered here: another replica's job
        if control.paused and name not in self.paused:
            self.paused.add(name)
            self._log.info("%s paused: its slots are skipped until it is resumed", name)
        elif not control.paused and name in self.paused:
            self.paused.discard(name)
            self._log.info("%s resumed", name)
        if control.trigger > self._settled.get(name, 0) and name not in self._claiming:
            self._claiming.add(name)
            self._spawn(self._claim(job, control.trigger), name)

    def handed_over(self, job: Job, slot: int) -> bool:
        """A run of `job`'s `slot` was handed over: True (claim it again at the next poll) when it is a
        trigger's run."""
        if (job.name, slot) not in self._won:
            return False
        self._won.discard((job.name, slot))
        self._settled[job.name] = min(self._settled.get(job.name, 0), slot - 1)
        return True

    async def _claim(self, job: Job, trigger: int) -> None:
        o = job.options
        request = ClaimRequest(self._namespace, trigger_key(job.name), trigger, self._instance_id,
                               o.lease_ms, o.max_attempts, Overlap.SKIP, "", self._max_skew_ms)
        try:
            result = await self._backend.claim(request)
        except Exception as exc:
            self._log.warning("%s: claiming trigger %s failed: %s; trying again at the next heartbeat",
                              job.name, fmt_slot(trigger), short(exc))
            return
        finally:
            self._claiming.discard(job.name)
        if result.outcome in _AGAIN:
            return
        self._settled[job.name] = max(trigger, self._settled.get(job.name, 0))
        if result.lease is not None:
            extra = fields(job.name, trigger, self._instance_id, attempt=result.lease.attempt, outcome="won")
            self._log.info("%s trigger=%s won: running it now", job.name, fmt_slot(trigger), extra=extra)
            # An older trigger of this job has ended (overlap skip holds a newer one back): forget it.
            self._won = {(name, won) for name, won in self._won if name != job.name}
            self._won.add((job.name, trigger))
            self._run(job, result.lease)
