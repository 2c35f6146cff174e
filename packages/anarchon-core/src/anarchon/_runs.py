"""The run supervisor: how does a won slot run, end and get released?

Each run is one task: it confirms a late lease, calls the handler (an `async def` on the loop, a plain
function in a worker thread), applies `timeout`, turns the handler's end into an outcome (done, failed,
handover, or nothing when the lease was lost), retries after an error when asked, and has the keeper
release the run. `stop` signals every run, waits `stop_timeout`, then cancels the handlers still running.

A run is released only once its handler has really ended. A plain function in a worker thread cannot
be cancelled: after its `timeout`, or a stop's `stop_timeout`, its run keeps its lease (renewed by the
keeper) until the thread returns, so no other run of the job starts beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._context import CancelSignal, JobContext
from ._errors import RunCancelled
from ._history import HistoryWriter
from ._job import Job
from ._keeper import Held, Keeper
from ._logs import SlotText, fields, fmt_slot, handler_exc_info, qualname, short
from ._speed import RELEASE_DONE as _DONE
from ._speed import RELEASE_FAILED as _FAILED
from ._speed import RELEASE_HANDOVER as _HANDOVER
from ._tasks import Tasks
from .backends import Lease, ReleaseOutcome

__all__ = ["LEASE_LOST", "REPLACED", "STOP", "TIMEOUT", "Hook", "Runs", "running_for"]

STOP = "stop"
LEASE_LOST = "lease lost"
TIMEOUT = "timeout"
REPLACED = "replaced"


_CANCEL_GRACE_S = 1.0
"""After a stop cancels the async handlers still running: how long they have to end before the log
names those that did not."""


class Hook(Protocol):
    """Calls an observer hook by name with keyword arguments; a plugin's failure is logged, never raised."""

    def emit(self, name: str, /, **kwargs: Any) -> None:
        """Deliver the hook `name` to whoever receives it."""
        ...

    def wants(self, name: str) -> bool:
        """True when anybody receives the hook `name` (else its arguments need not be built)."""
        ...

# The owner (a scheduler) whose run the current task, or a task it started, is executing.
_OWNER: contextvars.ContextVar[object | None] = contextvars.ContextVar("anarchon_in_run", default=None)


def running_for() -> object | None:
    """The scheduler whose handler is running in this task, if any."""
    return _OWNER.get()


@dataclass(eq=False, slots=True)
class _Run:
    job: Job
    ctx: JobContext
    runs: Runs = field(repr=False)
    held: Held = field(init=False)
    task: asyncio.Task[None] | None = None
    in_handler: bool = False
    """True while the task is in the handler: what a stop after `stop_timeout` cancels."""
    lost: bool = False
    began: float | None = None
    """When the handler was called (the loop's clock); None while it has not been."""
    thread: asyncio.Future[Any] | None = None
    """A plain function's call in a worker thread: it goes on until it returns, whatever is cancelled."""

    @property
    def handler_running(self) -> bool:
        """True while the handler has not ended (a thread outlives a cancelled call)."""
        return self.in_handler or (self.thread is not None and not self.thread.done())

    def __call__(self, why: str) -> None:
        """The keeper lost the run's lease (`Held.on_lost`): the run itself is the callback, so a run
        costs no closure."""
        self.runs._lost(self, why)


class Runs:
    """Every run of one scheduler while it is started."""

    def __init__(self, *, owner: object, keeper: Keeper, tasks: Tasks, log: logging.Logger, hook: Hook,
                 namespace: str, instance_id: str, on_handover: Callable[[Job, int], None],
                 on_settled: Callable[[Job, int], None] | None = None,
                 history: HistoryWriter | None = None) -> None:
        self._keeper = keeper
        self._tasks = tasks
        self._log = log
        self._hook = hook
        self._namespace = namespace
        self._instance_id = instance_id
        self._on_handover = on_handover
        self._on_settled = on_settled
        """Told of each slot whose run ended done or failed (a trigger's aside)."""
        self._by_name: dict[str, int] = {}
        """The runs in progress of each job."""
        self._history = history
        self._runs: set[_Run] = set()
        self._keys: dict[tuple[str, int], list[int]] = {}
        """(job, slot) of each run in progress: the tokens of its runs (one, but for a takeover of a
        slot that this instance also still runs)."""
        self._stopping = False
        # Each run's task gets a copy of this context, where `running_for` names the owner already:
        # setting it in each task would add objects per run that outlive a young GC collection.
        self._context = contextvars.copy_context()
        self._context.run(_OWNER.set, owner)

    @property
    def active(self) -> list[JobContext]:
        """Contexts of the runs in progress."""
        return [r.ctx for r in self._runs]

    def running(self, name: str, slot: int, token: int | None = None) -> bool:
        """True while a run of job `name` for `slot` is in progress (holding `token`, if given)."""
        tokens = self._keys.get((name, slot))
        return tokens is not None and (token is None or token in tokens)

    def running_job(self, name: str) -> bool:
        """True while a run of job `name` is in progress here (any slot)."""
        return name in self._by_name

    def _forget(self, run: _Run) -> None:
        """Drop an ended run from the (job, slot) and the name indexes."""
        name = run.ctx.name
        left = self._by_name.get(name, 0) - 1
        if left > 0:
            self._by_name[name] = left
        else:
            self._by_name.pop(name, None)
        key = (run.ctx.name, run.ctx.slot)
        tokens = self._keys.get(key)
        if tokens is not None:
            tokens.remove(run.ctx.token)
            if not tokens:
                del self._keys[key]

    def names(self) -> list[str]:
        """The names of the jobs running now."""
        return [r.job.name for r in self._runs]

    def start(self, job: Job, lease: Lease, sent: float) -> None:
        """Run `job` for the slot `lease` won, by a claim sent at `sent` (keeper clock)."""
        # (Positional: this runs once per run. In order: name, slot, attempt, token, instance_id,
        # namespace, signal, logger (looked up on first use), triggered, task.)
        ctx = JobContext(job.name, lease.slot, lease.attempt, lease.token, self._instance_id, self._namespace,
                         CancelSignal(asyncio.get_running_loop()), None, lease.job != job.name, job.task)
        run = _Run(job, ctx, self)
        run.held = self._keeper.hold(lease, job, sent, run)
        if self._stopping:
            ctx.signal.set(STOP)
        self._runs.add(run)
        self._keys.setdefault((job.name, lease.slot), []).append(lease.token)
        self._by_name[job.name] = self._by_name.get(job.name, 0) + 1
        run.task = self._tasks.start(self._run(run), "run", self._context.copy())

    def replace(self, name: str, slot: int, by: int, grace_s: float) -> None:
        """Ask the run of job `name`'s `slot` to end, for its newer slot `by` (`overlap="replace"`):
        its signal now; an `async def` handler still running after `grace_s` is cancelled. The run
        keeps its lease until its handler has ended, so `by` never starts beside it."""
        for run in self._runs:
            ctx = run.ctx
            if ctx.name != name or ctx.slot != slot or ctx.signal.cancelled or not run.handler_running:
                continue
            ctx.signal.set(REPLACED)
            kind = ("a plain function in a worker thread, which cannot be cancelled: the newer slot waits "
                    "until it returns" if run.thread is not None
                    else f"an async handler, cancelled if it still runs in {int(grace_s * 1000)} ms")
            self._log.info("%s slot=%s attempt=%d: replaced by slot %s; handler %s is asked to end (%s), and "
                           "keeps its lease until it has", name, fmt_slot(slot), ctx.attempt, fmt_slot(by),
                           qualname(run.job.handler), kind, extra=_fields(ctx, "replaced"))
            if run.thread is None and run.task is not None:
                asyncio.get_running_loop().call_later(grace_s, self._cancel_replaced, run)

    @staticmethod
    def _cancel_replaced(run: _Run) -> None:
        """Cancel a replaced run's `async def` handler that is still running after its grace."""
        if run.in_handler and run.thread is None and run.task is not None and not run.task.done():
            run.task.cancel()

    def stopping(self) -> None:
        """The scheduler stops: a run that starts from now on has its signal set at once, and a run
        handed over after an error is not claimed again."""
        self._stopping = True

    async def stop(self, timeout_s: float, stuck: Callable[[], str] | None = None) -> None:
        """Signal every run; after `timeout_s`, cancel the async handlers still running; wait for the
        ends, however long a handler that cannot be cancelled takes: its lease is kept meanwhile.

        `stuck` is called once if a handler is still running after that: it says, for the log line
        naming the handler, what ends the wait early (e.g. a second signal)."""
        self._stopping = True
        runs = list(self._runs)
        for run in runs:
            run.ctx.signal.set(STOP)
        pending = [r.task for r in runs if r.task is not None]
        if not pending:
            return
        # asyncio.wait, not asyncio.timeout: the runs must go on past the timeout (a run that is
        # releasing is never cut); only the handlers still running are cancelled then.
        _done, still = await asyncio.wait(pending, timeout=timeout_s)
        if not still:
            return
        cancelled = False
        for run in runs:
            # A thread cannot be cancelled: cancelling the task would only stop waiting for it.
            if run.task in still and run.in_handler and run.thread is None:
                run.task.cancel()
                cancelled = True
        if cancelled:  # a cancelled coroutine ends at its next await; one that ignores it does not
            _done, still = await asyncio.wait(still, timeout=_CANCEL_GRACE_S)
        left = [r for r in runs if r.task in still and r.handler_running]
        if left:
            self._say_stuck(left, timeout_s, stuck() if stuck is not None else "")
        if still:
            await asyncio.wait(still)

    def _say_stuck(self, runs: list[_Run], timeout_s: float, then: str) -> None:
        """One line per run whose handler outlives a stop's `stop_timeout`: it keeps its lease."""
        for run in runs:
            job, ctx = run.job, run.ctx
            kind = ("a plain function in a worker thread, which cannot be cancelled" if run.thread is not None
                    else "a coroutine that did not end when cancelled")
            self._log.warning(
                "%s slot=%s attempt=%d: handler %s still runs %d ms after the stop began (%s): its lease "
                "is kept and renewed until it returns, so no other replica runs the slot meanwhile%s",
                job.name, fmt_slot(ctx.slot), ctx.attempt, qualname(job.handler), int(timeout_s * 1000),
                kind, f"; {then}" if then else "", extra=_fields(ctx, "stopping"))

    def _lost(self, run: _Run, why: str) -> None:
        run.lost = True
        run.ctx.signal.set(LEASE_LOST)
        self._hook.emit("anarchon_lease_lost", ctx=run.ctx, reason=why)

    async def _run(self, run: _Run) -> None:
        # (In a context of its own, where `running_for` names the owner: stop() called from the handler
        # must not wait for it.)
        try:
            job, ctx = run.job, run.ctx
            outcome: ReleaseOutcome | None = _DONE
            error: BaseException | None = None
            try:
                if run.held.late and not await self._keeper.confirm(run.held):
                    # Its lease ran out before the run could start, and an expired lease does not renew:
                    # claim the slot again at once, so it runs as a takeover (here or elsewhere).
                    if not self._stopping:
                        self._on_handover(job, ctx.slot)
                    return
                if self._hook.wants("anarchon_run_started"):
                    self._hook.emit("anarchon_run_started", ctx=ctx)
                run.began = asyncio.get_running_loop().time()
                try:
                    run.in_handler = True
                    try:
                        if job.is_async and job.options.timeout_ms is None:
                            await job.handler(*((ctx,) if job.takes_ctx else ()))  # (no frames in between)
                        else:
                            await self._call(run)
                    finally:
                        run.in_handler = False
                except asyncio.CancelledError as exc:  # a stop or a replace cancelled the handler
                    _uncancel()
                    error, outcome = exc, _FAILED if ctx.signal.reason == REPLACED else _HANDOVER
                except RunCancelled as exc:
                    error, outcome = exc, self._cancel_outcome(run)
                except Exception as exc:
                    error, outcome = exc, _FAILED
                    if ctx.signal.reason != TIMEOUT:
                        self._log.error("%s slot=%s attempt=%d failed after %d ms: %s", job.name,
                                        fmt_slot(ctx.slot), ctx.attempt, _ms_since(run.began), short(exc),
                                        exc_info=handler_exc_info(exc, self._log),
                                        extra=_fields(ctx, "failed"))
                        outcome = await self._maybe_retry(run)
                if ctx.signal.reason == TIMEOUT:
                    outcome = _FAILED
                    self._log.warning("%s slot=%s failed: timeout after %d ms", job.name, fmt_slot(ctx.slot),
                                      job.options.timeout_ms, extra=_fields(ctx, "failed"))
                if run.thread is not None and not run.thread.done():
                    await self._outlive(run)
            except asyncio.CancelledError as exc:  # the scheduler itself is going away
                error, outcome = exc, _HANDOVER
            except BaseException as exc:  # SystemExit or KeyboardInterrupt from the handler: unfinished
                error, outcome = exc, _HANDOVER
                raise
            finally:
                if run.lost:
                    outcome = None
                if outcome is None:
                    self._keeper.drop(run.held)
                else:
                    # The lease is renewed until the release lands: a release queued behind other work
                    # in a busy store must not let the lease run out, or a backup re-runs a finished slot.
                    await self._keeper.release(run.held, outcome)
                    if run.lost:
                        outcome = None
                # Break the cycle run -> held -> callback -> run: the keeper may keep `held` for up to a
                # heartbeat after the run's end, and a cycle would hold the run's objects until a full
                # garbage collection. A run that has ended is told of no loss.
                run.held.on_lost = _ended
                self._runs.discard(run)
                self._forget(run)
                self._finished(run, outcome, error)
        except Exception:
            self._log.error("task %s failed", _task_name(), exc_info=True)
        finally:
            # (Started with `Tasks.start`: no done callback to end its ownership.)
            self._tasks.ended(run.task, "run")

    async def _call(self, run: _Run) -> None:
        """Call the handler in this task; with `timeout`, cancel it once that has passed."""
        job, ctx = run.job, run.ctx
        timeout = job.options.timeout_ms
        if timeout is None:
            await _invoke(run)
            return
        async with asyncio.timeout(None) as limit:
            # Not asyncio.timeout(seconds) alone: the signal must be set before the cancellation
            # reaches the handler, so its cleanup sees why. The timer sets it, then ends the limit.
            timer = asyncio.get_running_loop().call_later(timeout / 1000, _expire, ctx.signal, limit)
            try:
                await _invoke(run)
            finally:
                timer.cancel()

    async def _outlive(self, run: _Run) -> None:
        """Wait for a handler's thread that outlived its timeout: the run keeps its lease until it
        returns, so the job's next slot cannot start beside it."""
        job, ctx, thread = run.job, run.ctx, run.thread
        assert thread is not None
        self._log.warning(
            "%s slot=%s: handler %s outlived its timeout of %d ms (a plain function in a worker thread "
            "cannot be cancelled): the run keeps its lease until it returns, then ends failed",
            job.name, fmt_slot(ctx.slot), qualname(job.handler), job.options.timeout_ms,
            extra=_fields(ctx, "failed"))
        await asyncio.wait((thread,))
        if not thread.cancelled():
            thread.exception()  # (retrieved: its error, if any, is the timeout's to report)
        self._log.info("%s slot=%s: handler %s returned %d ms after it was called, past its timeout",
                       job.name, fmt_slot(ctx.slot), qualname(job.handler), _ms_since(run.began),
                       extra=_fields(ctx, "failed"))

    def _finished(self, run: _Run, outcome: ReleaseOutcome | None, error: BaseException | None) -> None:
        """Log the run's end (a failure was logged as it happened), then tell the observers."""
        job, ctx = run.job, run.ctx
        duration_ms = None if run.began is None else (asyncio.get_running_loop().time() - run.began) * 1000
        if duration_ms is not None and self._log.isEnabledFor(logging.INFO):
            ms = int(duration_ms)
            if outcome is _DONE:
                self._log.info("%s slot=%s done in %d ms", job.name, SlotText(ctx.slot), ms,
                               extra=_fields(ctx, "done"))
            elif outcome is _HANDOVER:
                self._log.info("%s slot=%s released for handover after %d ms attempt=%d", job.name,
                               SlotText(ctx.slot), ms, ctx.attempt, extra=_fields(ctx, "handover"))
            elif outcome is None:
                self._log.info("%s slot=%s ended after %d ms without its lease: not released", job.name,
                               SlotText(ctx.slot), ms, extra=_fields(ctx, "lost"))
            elif ctx.signal.reason == REPLACED:
                self._log.info("%s slot=%s ended after %d ms, replaced by a newer slot: released as failed",
                               job.name, SlotText(ctx.slot), ms, extra=_fields(ctx, "failed"))
        if self._hook.wants("anarchon_run_finished"):
            self._hook.emit("anarchon_run_finished", ctx=ctx, outcome=outcome, error=error,
                            duration_ms=duration_ms)
        if self._history is not None and duration_ms is not None:
            timed_out = ctx.signal.reason == TIMEOUT and outcome is _FAILED
            self._history.record(ctx, outcome, error, duration_ms,
                                 timeout_ms=job.options.timeout_ms if timed_out else None)
        if outcome is _HANDOVER and job.options.retry_ms is not None and not self._stopping:
            self._on_handover(job, ctx.slot)
        elif (outcome is _DONE or outcome is _FAILED) and self._on_settled is not None and not ctx.triggered:
            self._on_settled(job, ctx.slot)

    async def _maybe_retry(self, run: _Run) -> ReleaseOutcome:
        """After a handler error: wait the backoff, then hand the slot over for another attempt."""
        retry, attempt = run.job.options.retry_ms, run.ctx.attempt
        if retry is None or attempt >= run.job.options.max_attempts or run.lost:
            return _FAILED
        backoff = retry * 2 ** (attempt - 1)
        self._log.info("%s slot=%s retry in %d ms", run.job.name, fmt_slot(run.ctx.slot), backoff,
                       extra=_fields(run.ctx))
        with contextlib.suppress(RunCancelled):
            await run.ctx.sleep(backoff / 1000)
        return _HANDOVER

    @staticmethod
    def _cancel_outcome(run: _Run) -> ReleaseOutcome | None:
        reason = run.ctx.signal.reason
        if run.lost or reason == LEASE_LOST:
            return None
        if reason in (TIMEOUT, REPLACED):
            return _FAILED
        return _HANDOVER


async def _invoke(run: _Run) -> None:
    job = run.job
    args = (run.ctx,) if job.takes_ctx else ()
    if job.is_async:
        await job.handler(*args)
        return
    # Shielded: a cancellation (a timeout) must not stop us from knowing when the thread ends.
    call = functools.partial(job.handler, *args)
    thread = run.thread = asyncio.get_running_loop().run_in_executor(None, call)
    result = await asyncio.shield(thread)
    if inspect.isawaitable(result):
        await result


def _ended(_why: str) -> None:
    """The lease callback of a run that has ended."""


def _fields(ctx: JobContext, outcome: str | None = None) -> dict[str, object]:
    return fields(ctx.name, ctx.slot, ctx.instance_id, attempt=ctx.attempt, outcome=outcome)


def _ms_since(began: float | None) -> int:
    """Milliseconds since `began` on the running loop's clock (virtual in tests)."""
    return 0 if began is None else int((asyncio.get_running_loop().time() - began) * 1000)


def _expire(signal: CancelSignal, limit: asyncio.Timeout) -> None:
    signal.set(TIMEOUT)
    limit.reschedule(asyncio.get_running_loop().time())


def _task_name() -> str:
    task = asyncio.current_task()
    return "?" if task is None else task.get_name()


def _uncancel() -> None:
    """A cancellation this task handled (a stop, not the scheduler going away) is over: later
    `asyncio.timeout`s in the task must not mistake it for theirs."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
