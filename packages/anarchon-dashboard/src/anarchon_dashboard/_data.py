"""What the page shows, read from the store in one pass: a JSON-ready dict, nothing rendered.

Job records come from `InspectBackend.jobs`, pauses from `ControlBackend.controls`, and, where the store
keeps them (capability `history`), each job's registrations (schedule, next slot, replicas) from
`HistoryBackend.catalogue` and its newest ended runs from `HistoryBackend.history`. A store without a
capability is still shown; the page says what it cannot show and why.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from anarchon import Capability, Every, JobState, JobStatus, next_slot_of
from anarchon._controls import TRIGGER_SUFFIX
from anarchon._history import schedule_of
from anarchon.backends import CatalogueEntry, ControlBackend, HistoryBackend, InspectBackend, RunRecord

__all__ = ["RUNS_PER_JOB", "RECENT_RUNS", "TRIGGER_SUFFIX", "snapshot"]

RUNS_PER_JOB = 5
"""How many of each job's newest runs the page lists under the job."""
RECENT_RUNS = 25
"""How many runs, all jobs together, the page's recent-runs table lists."""


def _caps(backend: object) -> frozenset[Capability]:
    return frozenset(getattr(backend, "capabilities", frozenset()))


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


def _newest(run: dict[str, Any]) -> tuple[int, int, int]:
    return run["started_at"], run["slot"], run["attempt"]


def capabilities(backend: object) -> dict[str, bool]:
    """Which of the page's parts `backend` can feed: inspect, control, history."""
    caps = _caps(backend)
    return {"inspect": Capability.INSPECT in caps, "control": Capability.CONTROL in caps,
            "history": Capability.HISTORY in caps}


async def snapshot(backend: object, namespace: str) -> dict[str, Any]:
    """Read everything the page shows about `namespace` from an open `backend`."""
    can = capabilities(backend)
    notes: list[str] = []
    states: list[JobState] = []
    if can["inspect"]:
        states = await cast(InspectBackend, backend).jobs(namespace)
    else:
        notes.append(f"{type(backend).__name__} keeps no per-job record (it lacks the 'inspect' capability): "
                     "holders and leases are not shown")
    controls = {}
    if can["control"]:
        controls = await cast(ControlBackend, backend).controls(namespace)
    else:
        notes.append(f"{type(backend).__name__} stores no controls (it lacks the 'control' capability): "
                     "pause, resume and trigger are not available")
    catalogue: list[CatalogueEntry] = []
    if can["history"]:
        catalogue = await cast(HistoryBackend, backend).catalogue(namespace)
    else:
        notes.append(f"{type(backend).__name__} keeps no job catalogue or run history (it lacks the "
                     "'history' capability): schedules, next runs and recent runs are not shown")

    # The store's time as its records were read; with no record to read it from, this machine's.
    now = max((s.now for s in states), default=0) or int(time.time() * 1000)
    jobs: dict[str, dict[str, Any]] = {}

    def job(name: str) -> dict[str, Any]:
        return jobs.setdefault(name, {
            "job": name, "paused": False, "trigger_id": 0, "schedule": "", "kind": "", "timezone": "",
            "next_slot": None, "every_ms": None, "instances": [], "options": {}, "record": None,
            "trigger": None, "runs": [],
        })

    for state in states:
        if state.job.endswith(TRIGGER_SUFFIX):
            job(state.job.removesuffix(TRIGGER_SUFFIX))["trigger"] = _record(state)
        else:
            job(state.job)["record"] = _record(state)
    for name, control in controls.items():
        row = job(name)
        row["paused"] = control.paused
        row["trigger_id"] = control.trigger
    for entry in catalogue:
        row = job(entry.job)
        row["instances"].append(entry.instance)
        # Replicas of one deploy agree; during a rolling deploy the last one listed is as good as any.
        row.update(schedule=entry.schedule, kind=entry.kind, timezone=entry.timezone,
                   options=dict(entry.options))
        schedule = schedule_of(entry.fingerprint) if entry.fingerprint else None
        if isinstance(schedule, Every):  # the page moves the next run on by itself between polls
            row["every_ms"] = schedule.interval_ms
        # Published once a minute: a slot already past is computed again from the schedule.
        nxt = next_slot_of(entry, now)
        if nxt is not None:
            row["next_slot"] = nxt if row["next_slot"] is None else min(row["next_slot"], nxt)
    recent: list[dict[str, Any]] = []
    if can["history"]:
        store = cast(HistoryBackend, backend)
        # One read per job (the store has no namespace-wide one), sent together.
        names = [*jobs, *(name + TRIGGER_SUFFIX for name, row in jobs.items() if row["trigger"] is not None)]
        found = await asyncio.gather(*(store.history(namespace, name, RECENT_RUNS) for name in names))
        for runs in found:
            recent.extend(map(_run, runs))
        recent.sort(key=_newest, reverse=True)
        for run in recent:
            runs_of = jobs[run["job"]]["runs"]
            if len(runs_of) < RUNS_PER_JOB:
                runs_of.append(run)
    for row in jobs.values():
        if row["next_slot"] is not None:
            row["next_in_ms"] = row["next_slot"] - now
    return {
        "namespace": namespace,
        "now": now,
        "capabilities": can,
        "notes": notes,
        "jobs": [jobs[name] for name in sorted(jobs)],
        "recent": recent[:RECENT_RUNS],
    }
