"""Hook specifications for anarchon plugins (pluggy).

A plugin is a module or object with functions marked `@anarchon.hookimpl`, registered under the
entry-point group `anarchon`. Set `ANARCHON_DISABLE_PLUGIN_AUTOLOAD=1` to load none.

Every process that builds a `Scheduler` loads every installed plugin module, so a backend plugin should
import its client library only inside its hooks. A backend plugin implements `anarchon_backends`; with
`anarchon_backend_schemes` as well, `backend_for_url` imports only the one class a URL needs.

The observer hooks (`anarchon_claim`, `anarchon_run_started`, `anarchon_run_finished`,
`anarchon_lease_lost`, `anarchon_takeover`, `anarchon_slot_skipped`, `anarchon_slots_missed`) are called
on the scheduler's event loop, in every process that runs a scheduler, for each scheduler there; they
must return quickly. Each plugin's implementation is called through pluggy on its own, in pluggy's
order (the plugin registered last first; `tryfirst` and `trylast` move it): one that raises is logged,
and the others still run. A wrapper (`@hookimpl(wrapper=True)`) wraps each plugin's call. An
implementation may take any subset of a hook's arguments. `Scheduler.on` delivers the same events to
one scheduler's listeners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ._context import JobContext
    from .backends import ClaimRequest, ClaimResult, ReleaseOutcome

__all__ = [
    "anarchon_backend_schemes",
    "anarchon_backends",
    "anarchon_claim",
    "anarchon_lease_lost",
    "anarchon_run_finished",
    "anarchon_run_started",
    "anarchon_slot_skipped",
    "anarchon_slots_missed",
    "anarchon_takeover",
    "hookimpl",
    "hookspec",
]

hookspec = pluggy.HookspecMarker("anarchon")
"""Marks a hook specification."""
hookimpl = pluggy.HookimplMarker("anarchon")
"""Marks a plugin's hook implementation."""


@hookspec
def anarchon_backends() -> list[type[Any]]:  # type: ignore[empty-body]
    """Return backend classes this plugin provides; each has `url_schemes` and `from_url(url)`."""


@hookspec
def anarchon_backend_schemes() -> dict[str, str]:  # type: ignore[empty-body]
    """Map each URL scheme this plugin handles to its backend class's import path, "module:ClassName"."""


@hookspec
def anarchon_claim(request: ClaimRequest, result: ClaimResult, latency_ms: float) -> None:
    """Observe one claim and the store's answer, `latency_ms` after the claim was sent."""


@hookspec
def anarchon_run_started(ctx: JobContext) -> None:
    """Observe a handler starting."""


@hookspec
def anarchon_run_finished(
    ctx: JobContext, outcome: ReleaseOutcome | None, error: BaseException | None, duration_ms: float | None
) -> None:
    """Observe a run ending; `outcome` is None when the lease was lost, `duration_ms` is how long the
    handler ran (None when it was never called)."""


@hookspec
def anarchon_lease_lost(ctx: JobContext, reason: str) -> None:
    """Observe a run losing its lease."""


@hookspec
def anarchon_takeover(request: ClaimRequest, result: ClaimResult, task: str | None) -> None:
    """Observe this instance taking over a slot whose holder's lease ran out (`result.lease.attempt` > 1);
    `task` is a stored schedule's task (`request.job` its id), None for a code job."""


@hookspec
def anarchon_slot_skipped(request: ClaimRequest, result: ClaimResult, task: str | None) -> None:
    """Observe a slot skipped: an older slot of the job still runs (`overlap`), or the job is paused
    (then `result.holder` is None and the store was not asked); `task` as for `anarchon_takeover`."""


@hookspec
def anarchon_slots_missed(namespace: str, job: str, count: int, slots: list[int], instance: str,
                          task: str | None) -> None:
    """Observe slots of `job` that no replica ran, found by `instance` when it started (or planned a
    stored schedule overdue) and won the job's next slot: `count` of them, `slots` the newest (epoch
    ms, newest first). Reported once per gap; `task` as for `anarchon_takeover`."""
