"""What the page shows, read from the store in one pass through `anarchon.inspect`: a JSON-ready dict,
nothing rendered.

Job records, pauses, triggers, registrations (schedule, next slot, replicas), stored schedules and each
job's newest history entries come from `Inspector.overview`. A store without a capability is still
shown; the page says what it cannot show and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from anarchon import Capability, Every, JobState, JobStatus, RunRecord, StoredSchedule
from anarchon.inspect import MISSED_WINDOW_MS, TRIGGER_SUFFIX, Inspector, JobView, Overview

__all__ = ["NEXT_SLOTS", "RECENT_RUNS", "RUNS_PER_JOB", "TRIGGER_SUFFIX", "capabilities", "job_state",
           "schedule_row", "snapshot"]

RUNS_PER_JOB = 5
"""How many of each job's newest runs the page lists under the job."""
RECENT_RUNS = 25
"""How many runs, all jobs together, the page's recent-runs table lists; also how many of each job's
newest history entries are read (a job's own page lists them all)."""
NEXT_SLOTS = 5
"""How many of a job's next slots its page lists."""


def _record(state: JobState) -> dict[str, Any]:
    live = state.status is JobStatus.RUNNING and state.expires_at > state.now
    return {
        "slot": state.slot,
        "attempt": state.attempt,
        "token": state.token,
        "status": str(state.status),
        "holder": state.owner if live else "",
        "owner": state.owner,
        "live": live,
        "expires_in_ms": state.expires_at - state.now if live else None,
        "updated_at": state.updated_at,
    }


def _run(run: RunRecord) -> dict[str, Any]:
    job = run.job.removesuffix(TRIGGER_SUFFIX)
    return {
        "job": job,
        "trigger": job != run.job,
        "slot": run.slot,
        "attempt": run.attempt,
        "instance": run.instance,
        "outcome": run.outcome,
        "started_at": run.started_at,
        "duration_ms": run.duration_ms,
        "error": run.error,
    }


def _capabilities(caps: frozenset[Capability]) -> dict[str, bool]:
    return {"inspect": Capability.INSPECT in caps, "control": Capability.CONTROL in caps,
            "history": Capability.HISTORY in caps, "schedules": Capability.SCHEDULES in caps}


def capabilities(backend: object) -> dict[str, bool]:
    """Which of the page's parts `backend` can feed: inspect, control, history, schedules."""
    return _capabilities(frozenset(getattr(backend, "capabilities", frozenset())))


def schedule_row(schedule: StoredSchedule, now: int, tasks: Mapping[str, Sequence[str]] | None
                 ) -> dict[str, Any]:
    """A stored schedule as the page shows it: its JSON view, its next slot after `now` (epoch ms; none
    while paused) and, when `tasks` (each live task with its replicas) is known, whether a live replica
    has its task."""
    row = schedule.to_json()
    slot = None if schedule.paused else schedule.schedule.next_slot(now)
    row["next_slot"] = slot
    row["next_in_ms"] = None if slot is None else slot - now
    row["every_ms"] = schedule.schedule.interval_ms if isinstance(schedule.schedule, Every) else None
    row["task_live"] = None if tasks is None else schedule.task in tasks
    row["replicas"] = list((tasks or {}).get(schedule.task, ()))
    return row


def _job(view: JobView, runs: int, tasks: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    entry = view.entry
    stored = view.stored
    row: dict[str, Any] = {
        "job": view.name, "origin": view.origin, "paused": view.paused, "trigger_id": view.control.trigger,
        "control_paused": view.control.paused, "pending_trigger": view.pending_trigger,
        "schedule": view.schedule or "", "kind": entry.kind if entry else "",
        "timezone": entry.timezone if entry else "", "next_slot": view.next_slot, "every_ms": view.every_ms,
        "instances": view.instances, "options": dict(entry.options) if entry else {},
        "record": None if view.record is None else _record(view.record),
        "trigger": None if view.trigger_record is None else _record(view.trigger_record),
        "runs": [_run(r) for r in view.runs[:runs]],
        "last_success": view.last_success_at, "missed": view.missed,
        "stored": None, "task_live": view.task_live,
    }
    if stored is not None:
        # A stored schedule: its own definition, and the replicas that have its task run it.
        row["stored"] = spec = stored.to_json()
        row["kind"] = stored.kind
        row["timezone"] = spec.get("timezone", "UTC")
        row["options"] = dict(stored.options)
        row["instances"] = list(tasks.get(stored.task, ()))
    if view.next_slot is not None:
        row["next_in_ms"] = view.next_slot - view.now
    return row


def _state(overview: Overview) -> dict[str, Any]:
    return {
        "namespace": overview.namespace,
        "now": overview.now,
        "capabilities": _capabilities(overview.capabilities),
        "notes": list(overview.notes),
        "missed_window_ms": MISSED_WINDOW_MS,
        "jobs": [_job(view, RUNS_PER_JOB, overview.tasks) for view in overview.jobs],
        "recent": [_run(r) for r in overview.recent[:RECENT_RUNS]],
        "tasks": {task: list(replicas) for task, replicas in overview.tasks.items()},
        "orphans": [view.name for view in overview.orphans],
    }


async def snapshot(backend: object, namespace: str) -> dict[str, Any]:
    """Read everything the page shows about `namespace` from an open `backend`."""
    return _state(await Inspector(backend, namespace=namespace, close=False).overview(runs=RECENT_RUNS))


async def job_state(store: Inspector, name: str) -> dict[str, Any] | None:
    """Everything a job's own page shows: its row, every history entry read and its next slots; None
    when the store knows nothing of it."""
    overview = await store.overview(runs=RECENT_RUNS)
    view = overview.job(name)
    if view is None:
        return None
    row = _job(view, RECENT_RUNS, overview.tasks)
    row["next_slots"] = view.upcoming(NEXT_SLOTS)
    return {"namespace": store.namespace, "now": view.now, "capabilities": capabilities(store.backend),
            "missed_window_ms": view.missed_window_ms, "job": row}
