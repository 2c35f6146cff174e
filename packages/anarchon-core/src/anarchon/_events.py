"""Events: what happened to a slot on this instance, for plugins (hooks) and listeners (`Scheduler.on`).

There is one event path. The engine calls an observer hook by name (`anarchon_run_finished`, ...); the
scheduler hands the call to every plugin that implements the hook, each on its own, then to its own
listeners for that event as one `Event`. A plugin or a listener that raises is logged, never raised.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

import pluggy

from ._errors import ConfigError
from ._plugins import each_plugin

if TYPE_CHECKING:
    from ._context import JobContext
    from .backends import ClaimRequest, ClaimResult, ReleaseOutcome

__all__ = ["Event", "EventName", "Listener", "Listeners", "Observers"]

EventName: TypeAlias = Literal["claim", "started", "finished", "lease_lost", "takeover", "skipped", "missed"]
"""The events a listener can subscribe to with `Scheduler.on`."""

_HOOKS: dict[str, EventName] = {
    "anarchon_claim": "claim",
    "anarchon_run_started": "started",
    "anarchon_run_finished": "finished",
    "anarchon_lease_lost": "lease_lost",
    "anarchon_takeover": "takeover",
    "anarchon_slot_skipped": "skipped",
    "anarchon_slots_missed": "missed",
}
"""Each observer hook and the listener event it is delivered as."""
_NAMES: frozenset[str] = frozenset(get_args(EventName))


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to one slot on this instance, as a listener receives it."""

    name: EventName
    """`claim`, `started`, `finished`, `lease_lost`, `takeover`, `skipped` or `missed`."""
    job: str
    slot: int
    """The slot, epoch milliseconds (UTC)."""
    namespace: str
    instance: str
    """The id of the instance the event happened on."""
    attempt: int = 0
    """The attempt, where one is known (0 otherwise)."""
    outcome: str | None = None
    """For `claim`, the claim's outcome (`won`, `taken`, `skipped`, ...); for `finished`, `done`,
    `failed`, `handover` or `lost` (the lease was lost, so the run was not released)."""
    error: BaseException | None = None
    """For `finished`, what the handler raised, if it did."""
    duration_ms: float | None = None
    """For `finished`, how long the handler ran (None when it was never called)."""
    latency_ms: float | None = None
    """For `claim`, from sending the claim to the store's answer."""
    reason: str | None = None
    """For `lease_lost`, why the lease was lost; for `skipped`, why the slot was skipped: `overlap` (an
    older run of the job still runs) or `paused` (the job is paused cluster-wide)."""
    holder: str | None = None
    """For `claim`, `skipped` and `takeover`: the instance the store names as the slot's holder."""
    context: JobContext | None = None
    """For `started`, `finished` and `lease_lost`: the run's context."""
    count: int | None = None
    """For `missed`, how many slots no replica ran (`slot` is the newest of them)."""
    task: str | None = None
    """A stored schedule's task (`job` is then the schedule's id); None for a code job."""


Listener: TypeAlias = Callable[[Event], object]
"""A function or a coroutine function that takes one `Event`."""


def check_event(name: object) -> EventName:
    """Return `name` if it is an event's name; raise `ConfigError` saying which names are otherwise."""
    if not isinstance(name, str) or name not in _NAMES:
        raise ConfigError(f"unknown event {name!r}: use one of {', '.join(sorted(_NAMES))}")
    return name  # type: ignore[return-value]


def _from_hook(name: EventName, kwargs: dict[str, Any]) -> Event:
    """The `Event` for an observer hook's call."""
    ctx: JobContext | None = kwargs.get("ctx")
    if ctx is not None:
        outcome: ReleaseOutcome | None = kwargs.get("outcome")
        return Event(
            name, ctx.name, ctx.slot, ctx.namespace, ctx.instance_id, ctx.attempt,
            outcome=("lost" if outcome is None else outcome.value) if name == "finished" else None,
            error=kwargs.get("error"), duration_ms=kwargs.get("duration_ms"), reason=kwargs.get("reason"),
            context=ctx, task=ctx.task,
        )
    if name == "missed":
        slots: list[int] = kwargs["slots"]
        return Event(name, kwargs["job"], slots[0], kwargs["namespace"], kwargs["instance"],
                     outcome="missed", count=kwargs["count"], task=kwargs.get("task"))
    request: ClaimRequest = kwargs["request"]
    result: ClaimResult = kwargs["result"]
    attempt = result.lease.attempt if result.lease is not None else result.attempt
    return Event(name, request.job, result.slot, request.namespace, request.owner, attempt,
                 outcome=result.outcome.value, latency_ms=kwargs.get("latency_ms"), holder=result.holder,
                 reason=kwargs.get("reason"), task=kwargs.get("task"))


class Listeners:
    """A scheduler's listeners, by event."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._by_event: dict[str, list[Listener]] = {}
        self._pending: set[asyncio.Task[Any]] = set()
        """Coroutine listeners still running: a stop waits for them a little."""
        self.generation = 0
        """Bumped by every `add` and `remove`."""

    def add(self, name: EventName, fn: Listener) -> None:
        """Call `fn` for every `name` event from now on."""
        if not callable(fn):
            raise ConfigError(f"listener {fn!r} for event {name!r} is not callable: pass a function "
                              "that takes one Event")
        self._by_event.setdefault(name, []).append(fn)
        self.generation += 1

    def remove(self, name: EventName, fn: Listener) -> bool:
        """Stop calling `fn` for `name` events; False if it was not listening."""
        listeners = self._by_event.get(name, [])
        if fn not in listeners:
            return False
        listeners.remove(fn)
        self.generation += 1
        return True

    def wants(self, hook: str) -> bool:
        """True when some listener takes the events of `hook`."""
        return bool(self._by_event) and bool(self._by_event.get(_HOOKS.get(hook, "")))

    def deliver(self, hook: str, kwargs: dict[str, Any]) -> None:
        """Call every listener of `hook`'s event; a coroutine listener runs as a task of its own."""
        name = _HOOKS[hook]
        event = _from_hook(name, kwargs)
        for fn in list(self._by_event.get(name, ())):
            try:
                result = fn(event)
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._pending.add(task)
                    task.add_done_callback(self._done(fn, name))
            except Exception:
                self._log.exception("listener %s for event %r failed", _describe(fn), name)

    def _done(self, fn: Listener, name: str) -> Callable[[asyncio.Task[Any]], None]:
        def done(task: asyncio.Task[Any]) -> None:
            self._pending.discard(task)
            if not task.cancelled() and task.exception() is not None:
                self._log.error("listener %s for event %r failed", _describe(fn), name,
                                exc_info=task.exception())
        return done

    async def drain(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the coroutine listeners still running, then cancel the rest."""
        pending = set(self._pending)
        if not pending:
            return
        _done, still = await asyncio.wait(pending, timeout=timeout_s)
        for task in still:
            task.cancel()


class Observers:
    """A scheduler's one event path: `observers.emit(hook_name, **kwargs)` calls each plugin that
    implements the hook, then this scheduler's listeners of its event.

    Which hooks have a receiver is worked out again only after a plugin is registered or unregistered
    or a listener added or removed, so an event nobody receives costs one set lookup, and a caller
    that asks `wants(name)` first does not even build its arguments.
    """

    __slots__ = ("_listened", "_listeners", "_listeners_gen", "_log", "_plugins", "_pm", "_pm_gen", "_wanted")

    def __init__(self, pm: pluggy.PluginManager, listeners: Listeners, log: logging.Logger) -> None:
        self._pm = pm
        self._listeners = listeners
        self._log = log
        self._pm_gen = -1
        """The plugin manager's `generation` when the hooks were last looked at (-1: never)."""
        self._listeners_gen = -1
        self._plugins: dict[str, list[tuple[str, pluggy.HookCaller]]] = {}
        """Each hook as one pluggy caller per plugin, with the plugin's name, in pluggy's call order
        (`each_plugin`)."""
        self._wanted: frozenset[str] = frozenset()
        self._listened: frozenset[str] = frozenset()
        """The hooks whose events some listener takes."""

    def _refresh(self) -> None:
        # `generation` is counted by anarchon's plugin manager; any other manager is looked at each
        # time. (Read first: a change made while this runs is seen at the next event.)
        pm_gen, listeners_gen = getattr(self._pm, "generation", -1), self._listeners.generation
        relay = self._pm.hook
        self._plugins = {name: each_plugin(self._pm, name) for name in _HOOKS if hasattr(relay, name)}
        self._listened = frozenset(name for name in _HOOKS if self._listeners.wants(name))
        self._wanted = frozenset(name for name in _HOOKS if self._plugins.get(name)) | self._listened
        self._pm_gen, self._listeners_gen = pm_gen, listeners_gen

    def wants(self, name: str) -> bool:
        """True when a plugin or a listener receives the hook `name`."""
        # (The freshness check is inline here and in `emit`: both run per claim attempt.)
        pm_gen = getattr(self._pm, "generation", -1)
        if pm_gen != self._pm_gen or pm_gen == -1 or self._listeners.generation != self._listeners_gen:
            self._refresh()
        return name in self._wanted

    def emit(self, name: str, /, **kwargs: Any) -> None:
        """Deliver the hook `name`; a failure is logged, never raised."""
        pm_gen = getattr(self._pm, "generation", -1)
        if pm_gen != self._pm_gen or pm_gen == -1 or self._listeners.generation != self._listeners_gen:
            self._refresh()
        if name not in self._wanted:
            return
        callers = self._plugins.get(name)
        if callers:
            # Each plugin through pluggy on its own: one that raises is logged and the others still run.
            for plugin, call in callers:
                try:
                    call(**kwargs)
                except Exception:
                    self._log.exception("plugin %r failed in hook %s", plugin, name)
        if name in self._listened:
            self._listeners.deliver(name, kwargs)


def _describe(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
