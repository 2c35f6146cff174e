"""The engine: how do the planner, the claims, the runs and the keeper work together while a scheduler runs?

One slot's path: the planner hands the claims due now over in a batch; the engine sends them in one
`claim_many`; for each result, `react` says what it means; the planner updates its watches, the run
supervisor starts a run, or the keeper hands the slot back. The run's lease is the keeper's from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import cast

from ._controls import ControlState
from ._history import HistoryWriter
from ._job import Job
from ._keeper import Keeper, Sibling, open_keeper
from ._logs import SkipSummary, fields, fmt_slot, short
from ._missed import MissedSlots, StoredGaps
from ._outcomes import Claim, Facts, Step, late_by, react_taken, verdict
from ._planner import Due, Planner
from ._runs import Hook, Runs
from ._settings import Settings
from ._speed import OVERLAP_ALLOW as _ALLOW
from ._sweeper import Sweeper, Task
from ._tasks import Tasks
from .backends import (
    CONTROLS_CHANGED,
    SCHEDULES_CHANGED,
    AnnounceBackend,
    Capability,
    ClaimBackend,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    ControlBackend,
    HistoryBackend,
    InspectBackend,
    Lease,
    LeaseBackend,
    ReleaseOutcome,
    ScheduleBackend,
)

__all__ = ["CLAIM_CHUNK", "Engine", "stale_after"]

CLAIM_CHUNK = 2_000
"""The most claims sent in one `claim_many`: a larger batch (a herd of stored schedules due at one
second) goes as chunks, one after the other, so the first runs start while the rest wait their turn."""
_RECOVERY_S = 15.0
"""After a store outage, how long further claim failures count as the same outage (not warned again)."""

# The steps, read from the class once (see anarchon/_speed.py: module globals cost less per claim).
_RUN, _HAND_BACK = Step.RUN, Step.HAND_BACK
_UNRUN, _FREE_OWN, _RETRY = Step.UNRUN, Step.FREE_OWN, Step.RETRY
_SETTLED = frozenset({ClaimOutcome.DONE, ClaimOutcome.STALE, ClaimOutcome.EXHAUSTED})
"""Answers that leave nothing to run of the slot claimed."""



def stale_after(entry: Due) -> int | None:
    """The latest store time at which `entry`'s slot is still worth running (`ClaimRequest.stale_after`).

    Only the latest slot runs: a slot is worth running until the job's next slot is due, and a
    catch-up no later than `catch_up` after its slot. A backup's re-claim (a takeover) gets one lease
    more: the older run's live lease made the next slot skip, so its takeover is the run of that
    window. So a claim that reaches the store late (sent before a partition, delivered at its heal)
    cannot start a slot that is past. Under `overlap="allow"` every slot runs on its own: no limit.
    """
    job = entry.plan.job
    o = job.options
    if o.overlap is _ALLOW:
        return None
    following = entry.following
    limit = None if following is None else following - 1
    if limit is not None and entry.kind == "watch":
        limit += o.lease_ms
    if entry.kind == "catchup":
        cap = entry.slot + o.catch_up_ms
        limit = cap if limit is None else min(limit, cap)
    return limit


class Engine:
    """One start of a scheduler, until its stop: every claim, run and lease in between."""

    def __init__(self, backend: ClaimBackend, config: Settings, keeper: Keeper, *, hook: Hook,
                 owner: object) -> None:
        self._backend = backend
        self._config = config
        self._log = config.log
        self._hook = hook
        self.keeper = keeper
        self.tasks = Tasks(config.log)
        caps = backend.capabilities
        self._announced = Capability.ANNOUNCE in caps
        self.planner = Planner(config.clock, config.log, jitter_ms=config.jitter_ms,
                               horizon_ms=backend.horizon_ms,
                               shares=config.instance_id if self._announced else None)
        self._jobs: dict[str, Job] = {}
        self.history: HistoryWriter | None = None
        """Writes ended runs and this instance's jobs, on a backend that keeps them (`history`)."""
        if config.history > 0 and Capability.HISTORY in caps:
            self.history = HistoryWriter(
                cast(HistoryBackend, backend), namespace=config.namespace, instance_id=config.instance_id,
                keep=config.history, clock=config.clock, log=config.log, jobs=self._jobs.values,
                leases=Capability.LEASE in caps,
            )
        self.runs = Runs(owner=owner, keeper=keeper, tasks=self.tasks, log=config.log, hook=hook,
                         namespace=config.namespace, instance_id=config.instance_id,
                         on_handover=self._handed_over, on_settled=self._settled, history=self.history)
        self.controls: ControlState | None = None
        """The cluster-wide controls, on a backend that stores them (capability `control`)."""
        if Capability.CONTROL in caps:
            self.controls = ControlState(
                cast(ControlBackend, backend), namespace=config.namespace, instance_id=config.instance_id,
                max_skew_ms=config.max_skew_ms, log=config.log, jobs=self._job, run=self._run_trigger,
                spawn=lambda coro, name: self.tasks.spawn(coro, "claim", name=f"anarchon-trigger-{name}"),
            )
        self._facts = Facts(config.instance_id, leases=Capability.LEASE in caps,
                            notify=Capability.NOTIFY in caps, announced=self._announced)
        self._stopping = False
        self._down_since: float | None = None
        """Since when claims have failed (the keeper's clock), or None while the store answers."""
        self._failures = 0
        """Claim batches failed in a row since `_down_since`."""
        self._up_since = -math.inf
        """When the store answered again after an outage that was warned about (the keeper's clock)."""
        self._retry_cap_ms = max(1, min(1000, config.heartbeat_ms // 2))
        """The longest wait before a failed claim is sent again."""
        self._not_run: dict[str, int] = {}
        """Each job's newest slot won too late and released without running (see `_release_unrun`): the
        store's record holds a job's newest claimed slot, so only that one is asked after. One entry
        per job, so that thousands of late wins in one round are all remembered."""
        self._late: list[tuple[Job, Lease, int]] | None = None
        """While a claim batch's results are applied: its wins found too late, told in one line."""
        self._freeing: list[tuple[Due, Job, int]] | None = None
        """While a claim batch's results are applied: the older slots held by this instance's own
        unanswered claims that its skipped claims found (see `Step.FREE_OWN`), freed in one batch."""
        self._warned: set[str] = set()
        """Jobs whose schedule differs from the store's, warned about once."""
        self._skips = SkipSummary(config.log)
        """The slots skipped since the last summary line (one a minute at most)."""
        self._missed: MissedSlots | None = None
        """The slots no replica ran before this start, each job's reported by its first won claim."""
        self.sweeper: Sweeper | None = None
        """Plans the stored schedules due soon (a store with `schedules`, a scheduler with tasks)."""
        self._gaps: StoredGaps | None = None
        """The stored schedules planned overdue, each reported by its first won claim here."""

    @classmethod
    async def start(cls, backend: ClaimBackend, config: Settings, jobs: Iterable[Job], *, hook: Hook,
                    owner: object, sibling: Sibling, tasks: Mapping[str, Task] | None = None) -> Engine:
        """Start a keeper (beside the loop when `sibling` gives a second connection), then plan `jobs`
        and, where the store keeps schedules and `tasks` run them, the stored schedules due soon."""
        engine: Engine | None = None

        def running() -> list[str]:
            return engine.runs.names() if engine is not None else []

        keeper = await open_keeper(backend, sibling, config.log, heartbeat_ms=config.heartbeat_ms,
                                   block_limit_ms=config.block_limit_ms, running=running)
        try:
            engine = cls(backend, config, keeper, hook=hook, owner=owner)
            if Capability.NOTIFY in backend.capabilities:
                await cast(LeaseBackend, backend).subscribe(config.namespace, engine._pushed)
            if engine._announced:
                await cast(AnnounceBackend, backend).subscribe_wins(config.namespace, engine._won)
        except BaseException:
            await keeper.crash()  # nothing is held yet: its thread, if any, just ends
            raise
        for job in jobs:
            engine._jobs[job.name] = job
        if engine.controls is not None:
            await engine.controls.poll()  # a paused job skips even its first slot
            engine.tasks.spawn(engine._poll_controls(), "ticks", name="anarchon-controls")
        if Capability.INSPECT in backend.capabilities:
            engine._missed = await MissedSlots.read(
                cast(InspectBackend, backend), config.namespace, config.instance_id, jobs,
                engine.controls.paused if engine.controls is not None else set(), log=config.log,
                hook=hook, history=engine.history)
        for job in jobs:
            engine.planner.add(job)
        if tasks and Capability.SCHEDULES in backend.capabilities:
            sweeper = engine._start_sweeper(tasks)
            try:
                await sweeper.sweep()  # the schedules due at once
            except Exception as exc:
                config.log.warning("sweeping the stored schedules failed: %s; trying again in a heartbeat",
                                   short(exc))
        engine.tasks.spawn(engine.planner.run(engine._claim, engine._decided if engine._announced else None),
                           "ticks", name="anarchon-ticks")
        if engine.sweeper is not None:
            engine.tasks.spawn(engine.sweeper.run(), "ticks", name="anarchon-sweep")
        if engine.history is not None:
            engine.tasks.spawn(engine.history.run(), "history", name="anarchon-history")
        return engine

    def _start_sweeper(self, tasks: Mapping[str, Task]) -> Sweeper:
        c = self._config
        gaps = self._gaps = StoredGaps(namespace=c.namespace, instance_id=c.instance_id, log=c.log,
                                       hook=self._hook, history=self.history)
        sweeper = self.sweeper = Sweeper(
            cast(ScheduleBackend, self._backend), self._config, self.planner, tasks=tasks,
            code_jobs=self._jobs, running=self.runs.running_job, skips=self._skips,
            forget=self._forget_job, heard=self.planner.heard, overdue=gaps.overdue,
            announced=self._announced)
        if self.history is not None:
            self.history.tasks = lambda: tasks.keys()
        return sweeper

    def _job(self, name: str) -> Job | None:
        """Job `name`: a code job, or a stored schedule's planned here (else fetched at the next sweep)."""
        job = self._jobs.get(name)
        if job is None and self.sweeper is not None:
            job = self.sweeper.job(name, fetch=True)
        return job

    def tasks_changed(self, tasks: Mapping[str, Task]) -> None:
        """A task was registered while running: sweep the stored schedules from now on, if not yet."""
        if self.sweeper is None and Capability.SCHEDULES in self._backend.capabilities and not self._stopping:
            sweeper = self._start_sweeper(tasks)
            self.tasks.spawn(sweeper.run(), "ticks", name="anarchon-sweep")
            sweeper.poke()
        if self.history is not None:
            self.history.jobs_changed()

    def add(self, job: Job) -> None:
        """Plan a job registered while running."""
        self._jobs[job.name] = job
        self.planner.add(job)
        if self.history is not None:
            self.history.jobs_changed()

    async def stop(self, stuck: Callable[[], str] | None = None) -> None:
        """No new claims; let claims in flight finish; stop the runs; then the keeper. `stuck`: see
        `Runs.stop`."""
        self._stopping = True
        self.runs.stopping()
        self.planner.close()
        self.tasks.cancel("ticks")
        try:
            # Claims in flight finish, so a slot won just now is handed over, not stranded.
            await self.tasks.wait("claim", within=5)
            await self.runs.stop(self._config.stop_timeout_ms / 1000, stuck)
        finally:
            await self.keeper.stop()  # whatever happened: its thread never outlives the stop
        self._skips.say()
        if self.history is not None:
            self.tasks.cancel("history")
            await self.tasks.wait("history", within=1)
            await self.history.close(within_s=2)
        await self.tasks.wait(within=5)

    async def crash(self) -> None:
        """Vanish like a killed process: every task ends, nothing is released."""
        await self.keeper.crash()
        self.tasks.cancel()
        await self.tasks.wait(within=5)

    # -- claims -----------------------------------------------------------------------------------

    def _claim(self, batch: list[Due]) -> None:
        if self.controls is not None and self.controls.paused:
            batch = [entry for entry in batch if not self._skip_paused(entry)]
            if not batch:
                return
        if len(batch) <= CLAIM_CHUNK:
            self.tasks.spawn(self._claim_batch(batch), "claim")
        else:
            self.tasks.spawn(self._claim_chunks(batch), "claim")

    async def _claim_chunks(self, batch: list[Due]) -> None:
        """Claim a large batch a chunk at a time, each applied as it is answered: chunks sent at once
        would compete for the store's cores (and the claims of the first would be answered last)."""
        for start in range(0, len(batch), CLAIM_CHUNK):
            await self._claim_batch(batch[start:start + CLAIM_CHUNK])

    # -- controls ---------------------------------------------------------------------------------

    async def _poll_controls(self) -> None:
        assert self.controls is not None
        while True:
            await asyncio.sleep(self._config.heartbeat_ms / 1000)
            await self.controls.poll()

    def _pushed(self, job: str, slot: int) -> None:
        """The store pushed a handover of `job`'s `slot`, a change of `job`'s controls, or a write of
        stored schedule `job`."""
        if slot == SCHEDULES_CHANGED:
            if self.sweeper is not None and not self._stopping:
                self.sweeper.poke(job)
        elif slot != CONTROLS_CHANGED:
            self.planner.on_release(job, slot)
        elif self.controls is not None and not self._stopping:
            self.tasks.spawn(self.controls.poll(), "ticks", name="anarchon-controls-pushed")

    def _won(self, owner: str, wins: Sequence[tuple[str, int]]) -> None:
        """The store pushed claims that `owner` won: this instance need not claim those slots."""
        if owner == self._config.instance_id or self._stopping:
            return
        self.planner.decided(owner, wins)

    def _decided(self, batch: list[Due]) -> None:
        """Boundaries whose slots the store pushed as won by another instance: each is settled as a
        claim answered `taken` would be (watched as a backup), with no claim sent."""
        facts, log, settle = self._facts, self._log, self.planner.settle
        info = log.isEnabledFor(logging.INFO)  # (the level of a pushed win's line: asked once a batch)
        for entry in batch:
            plan = entry.plan
            job = plan.job
            action = react_taken(job, entry.slot, plan.decided_by, watching=False, facts=facts)
            if info if action.level == logging.INFO else log.isEnabledFor(action.level):
                extra = fields(job.name, entry.slot, self._config.instance_id, outcome="taken")
                log.log(action.level, action.message + " (pushed)", *action.args, extra=extra)
            settle(plan, action)

    def _skip_paused(self, entry: Due) -> bool:
        """Skip `entry` when its job is paused: a due slot is logged and reported as skipped."""
        assert self.controls is not None
        job = entry.plan.job
        if job.name not in self.controls.paused:
            return False
        if entry.kind != "watch":  # a watch re-claims a slot already reported
            # Per slot at DEBUG: the pause itself was said once, and the skips add up to one line a
            # minute (`_skips`).
            self._skips.add("paused", job.name)
            if self._log.isEnabledFor(logging.DEBUG):
                extra = fields(job.name, entry.slot, self._config.instance_id, outcome="paused")
                self._log.debug("%s slot=%s skipped (paused)", job.name, fmt_slot(entry.slot), extra=extra)
            (request,) = self._requests([entry])
            result = ClaimResult(ClaimOutcome.SKIPPED, job.name, entry.slot)
            self._hook.emit("anarchon_slot_skipped", request=request, result=result, reason="paused",
                            task=job.task)
        return True

    def _run_trigger(self, job: Job, lease: Lease) -> None:
        if self._stopping:
            self.keeper.hand_back(lease)
        else:
            self.runs.start(job, lease, self.keeper.now())

    def _forget_job(self, name: str) -> None:
        """A stored schedule's job is planned no more: forget what was kept of it."""
        self._not_run.pop(name, None)

    def _settled(self, job: Job, slot: int) -> None:
        """A run of `job`'s `slot` ended done or failed: a stored schedule's due index moves past it,
        and a newer slot waiting for it (`buffer_one`, `replace`) is claimed at once, not at its poll."""
        if self.sweeper is not None:
            self.sweeper.settled(job.name, slot)
        self.planner.ended_here(job.name)

    def _handed_over(self, job: Job, slot: int) -> None:
        if self.controls is None or not self.controls.handed_over(job, slot):
            self.planner.watch(job, slot)

    def _requests(self, batch: list[Due]) -> list[ClaimRequest]:
        """The claim request of each entry (one loop for the batch: it runs once per claim attempt)."""
        c = self._config
        namespace, owner, max_skew_ms = c.namespace, c.instance_id, c.max_skew_ms
        requests: list[ClaimRequest] = []
        for e in batch:
            plan = e.plan
            job = plan.job
            o = job.options
            requests.append(ClaimRequest(namespace, job.name, e.slot, owner, o.lease_ms, o.max_attempts,
                                         o.claim_overlap, plan.fingerprint, max_skew_ms, stale_after(e)))
        return requests

    async def _claim_batch(self, batch: list[Due]) -> None:
        requests = self._requests(batch)
        backend = self._backend
        sent = self.keeper.now()
        try:
            results = await self._send(requests)
        except Exception as exc:  # the store failed: retry, never lose the slot or die
            # At once, within the jitter (a reset connection is re-established on the way), backing
            # off to half a heartbeat (1 s at most) while the store stays away, so the first claim
            # after it answers again leaves half a heartbeat for a new connection; a newer slot
            # replaces an older one.
            retry_ms = self.planner.retry(batch, self._retry_cap_ms)
            down_since = self._down_since
            first = down_since is None
            if down_since is None:
                down_since = self._down_since = self.keeper.now()
                self._failures = 0
            self._failures += 1
            # A single failure answered by the retry is a blip (a reset, a dead pooled connection): one
            # line. Failing again, the store is away: one warning, then one line when it answers again.
            # Failures soon after it came back (connections opened before the outage dying one by one)
            # belong to the same outage: no second warning.
            recovering = down_since - self._up_since < _RECOVERY_S
            if self._failures == 2 and not recovering:
                self._log.warning("claims on %s fail: %s; the store looks unreachable, retrying every "
                                  "%d ms at most", backend.url, short(exc), self._retry_cap_ms)
            else:
                self._log.log(logging.INFO if first else logging.DEBUG,
                              "claim of %d slot(s) failed on %s: %s; retrying within %d ms",
                              len(batch), backend.url, short(exc), retry_ms)
            return
        if self._down_since is not None:
            now, down_since = self.keeper.now(), self._down_since
            warned = self._failures > 1 and down_since - self._up_since >= _RECOVERY_S
            self._log.log(logging.INFO if warned else logging.DEBUG,
                          "claims on %s answer again, after %d ms", backend.url,
                          int((now - down_since) * 1000))
            self._down_since = None
            if warned:
                self._up_since = now
        latency_ms = (self.keeper.now() - sent) * 1000
        observed = self._hook.wants("anarchon_claim")
        freeing: list[tuple[Due, Job, int]] = []
        self._freeing = freeing
        now_ms = self._config.clock.now_ms()
        try:
            with self._late_in_one_line():
                for entry, request, result in zip(batch, requests, results, strict=True):
                    if observed:
                        self._hook.emit("anarchon_claim", request=request, result=result,
                                        latency_ms=latency_ms)
                    try:
                        self._apply(entry, request, result, sent, now_ms)
                    except Exception:  # one bad result must not lose the rest of the batch
                        self._log.exception("%s slot=%s: handling the claim's result failed",
                                            entry.plan.job.name, fmt_slot(entry.slot))
        finally:
            self._freeing = None
            if freeing:
                self.tasks.spawn(self._free_own(freeing), "claim")

    async def _send(self, requests: list[ClaimRequest]) -> list[ClaimResult]:
        """The store's answers to these claims: one request alone as `claim`, more as `claim_many`."""
        if len(requests) == 1:
            return [await self._backend.claim(requests[0])]
        return await self._backend.claim_many(requests)

    @contextlib.contextmanager
    def _late_in_one_line(self) -> Iterator[None]:
        """Say the wins that `_release_unrun` releases inside the block in one warning, after it."""
        late: list[tuple[Job, Lease, int]] = []
        self._late = late
        try:
            yield
        finally:
            self._late = None
            if late:
                self._say_late(late)

    def _apply(self, entry: Due, request: ClaimRequest, result: ClaimResult, sent: float, now: int) -> None:
        """Carry out the verdict on one claim's result (`verdict` decides; nothing is decided here)."""
        plan = entry.plan
        job = plan.job
        if self._missed is not None:
            self._settle_missed(job, result)
        if self._gaps is not None and job.task is not None:
            self._gaps.settle(job, result)
        # (A stored schedule's changes are its own: only a code job's fingerprint is compared.)
        if result.fingerprint and result.fingerprint != plan.fingerprint and plan.until is None:
            self._check_fingerprint(plan.fingerprint, job, result)
        action = verdict(job, result, Claim(entry.slot, entry.kind, entry.following), stopping=self._stopping,
                         facts=self._facts, now=now, runs=self.runs, not_run=self._not_run)
        if self._log.isEnabledFor(action.level):
            attempt = result.lease.attempt if result.lease is not None else result.attempt
            extra = fields(job.name, result.slot, self._config.instance_id, attempt=attempt,
                           outcome=result.outcome.value)
            self._log.log(action.level, action.message, *action.args, extra=extra)
        self.planner.settle(plan, action)
        if action.skipped:
            self._skips.add("overlap", job.name)
            self._hook.emit("anarchon_slot_skipped", request=request, result=result, reason="overlap",
                            task=job.task)
        if plan.until is not None and self.sweeper is not None and (
                action.skipped or action.step is _UNRUN or result.outcome in _SETTLED):
            self.sweeper.settled(job.name, result.slot)  # (a stored schedule's slot: nothing left to run)
        if action.replaces is not None:
            self.runs.replace(job.name, action.replaces, result.slot, self._config.stop_timeout_ms / 1000)
        step = action.step
        lease = result.lease
        if step is _RUN:
            assert lease is not None
            if action.announce:
                self.planner.won(plan, entry.slot, self._config.instance_id, now)
            if action.takeover:
                self._hook.emit("anarchon_takeover", request=request, result=result, task=job.task)
            if action.renew_first:
                sent = self.keeper.now() - job.options.lease_ms / 1000
            self.runs.start(job, lease, sent)
        elif step is _HAND_BACK:  # won as the instance stops: hand it over at once (batched)
            assert lease is not None
            self.keeper.hand_back(lease)
        elif step is _UNRUN:
            assert lease is not None
            self._release_unrun(job, lease, action.late_ms)
        elif step is _FREE_OWN:
            if self._freeing is not None:
                self._freeing.append((entry, job, action.older))
            else:
                self.tasks.spawn(self._free_own([(entry, job, action.older)]), "claim")
        elif step is _RETRY:
            self.planner.retry([entry], self._config.heartbeat_ms)

    async def _free_own(self, held: list[tuple[Due, Job, int]]) -> None:
        """Release each older slot held by this instance's own unanswered claim (one claim for all),
        then claim each entry's slot again."""
        c = self._config
        requests = [ClaimRequest(c.namespace, job.name, older, c.instance_id, job.options.lease_ms,
                                 job.options.max_attempts, job.options.claim_overlap, entry.plan.fingerprint,
                                 c.max_skew_ms) for entry, job, older in held]
        entries = [entry for entry, _, _ in held]
        try:
            results = await self._send(requests)
        except Exception:  # the store is away: the newer slots' claims are retried as any failed one
            self.planner.retry(entries, c.heartbeat_ms)
            return
        now = c.clock.now_ms()
        with self._late_in_one_line():
            for (_, job, older), result in zip(held, results, strict=True):
                lease = result.lease
                if result.reissued and lease is not None:
                    # Not worth running now either: released as done (and said, where it is late).
                    late = late_by(job, lease, None, now)
                    if late is not None:
                        self._release_unrun(job, lease, late)
                    else:
                        self.keeper.hand_back(lease, ReleaseOutcome.DONE)
                        self._not_run[job.name] = older
        self.planner.retry(entries, c.heartbeat_ms)

    def _release_unrun(self, job: Job, lease: Lease, late_ms: int) -> None:
        """Release as done a slot won `late_ms` after it, too late to run (see `late_by`); the wins
        of one claim batch are said in one line."""
        if self._late is not None:
            self._late.append((job, lease, late_ms))
        else:
            self._say_late([(job, lease, late_ms)])
        self.keeper.hand_back(lease, ReleaseOutcome.DONE)
        self._not_run[job.name] = lease.slot

    def _say_late(self, late: list[tuple[Job, Lease, int]]) -> None:
        """One warning for the wins of one claim batch that `_release_unrun` released (an overloaded
        store or replica answers thousands at once: a line each would add to the load)."""
        job, lease, late_ms = late[0]
        extra = fields(job.name, lease.slot, self._config.instance_id, attempt=lease.attempt)
        if len(late) == 1:
            self._log.warning("%s slot=%s won %d ms late, after the next slot was due: not run (only the "
                              "latest slot runs); released as done", job.name, fmt_slot(lease.slot),
                              late_ms, extra=extra)
            return
        self._log.warning("%d slots won %d to %d ms late, after their next slots were due (the first: %s "
                          "slot=%s): not run (only the latest slot runs); released as done", len(late),
                          min(n for *_, n in late), max(n for *_, n in late), job.name, fmt_slot(lease.slot),
                          extra=extra)

    def _settle_missed(self, job: Job, result: ClaimResult) -> None:
        """A job's first claim result since the start: the slots missed before it, if this replica won."""
        assert self._missed is not None
        self._missed.settle(job, result)
        if not self._missed.pending:
            self._missed = None

    def _check_fingerprint(self, fingerprint: str, job: Job, result: ClaimResult) -> None:
        if result.fingerprint and result.fingerprint != fingerprint and job.name not in self._warned:
            self._warned.add(job.name)
            self._log.warning(
                "%s: the store holds schedule %r but this instance has %r (a rolling deploy?)",
                job.name, result.fingerprint, fingerprint,
            )
