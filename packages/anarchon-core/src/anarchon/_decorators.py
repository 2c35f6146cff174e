"""Module-level `every`, `cron` and `at`: declare jobs on functions and methods, register them later.

    class ReportsService:
        @cron("weekday-digest", "0 8 * * 1-5", timezone="Europe/Athens")
        async def digest(self, ctx: JobContext) -> None: ...

    scheduler.register(ReportsService())     # or a module

A decorator only attaches a declaration to the function and returns the function unchanged, so the
class and the module stay importable without a scheduler. `Scheduler.register` turns declarations
into jobs through the same path as `scheduler.every`: the same option checks and the same errors.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Literal, Protocol, TypeVar, Unpack

from . import _options
from ._duration import Duration
from ._errors import AnarchonError, ConfigError, DuplicateJobError
from ._job import Job, check_name
from ._options import LeaseJobOptions
from ._schedules import At, Cron, DstFold, DstGap, Every, Schedule

__all__ = ["Declaration", "Registry", "at", "cron", "declarations", "every", "register"]

H = TypeVar("H", bound=Callable[..., Any])

_ATTR = "__anarchon_jobs__"
_SOURCES = "_anarchon_sources"


@dataclass(frozen=True, slots=True)
class Declaration:
    """One job declared by a decorator: which method of the scheduler to call, and with what."""

    kind: Literal["every", "cron", "at"]
    name: str
    spec: Any
    """The interval, the cron expression or the moment."""
    schedule_options: Mapping[str, Any] = field(default_factory=dict)
    """`offset` for every; `timezone`, `dst_gap`, `dst_fold` for cron."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Job options (`timeout`, `overlap`, ...), checked against the backend at `register()`."""

    def schedule(self) -> Schedule:
        """Build (and so check) the schedule."""
        if self.kind == "every":
            return Every.parse(self.spec, **self.schedule_options)
        if self.kind == "cron":
            return Cron(self.spec, **self.schedule_options)
        return At.parse(self.spec)

    def describe(self) -> str:
        """`@every('sync', '10s')`, for messages."""
        return f"@{self.kind}({self.name!r}, {self.spec!r})"


def _declare(decl: Declaration) -> Callable[[H], H]:
    # Unknown option names fail at once, where the typo is; lease-only options are judged at
    # register(), when the backend is known.
    _options.check_names(decl.kind, decl.options, frozenset(), lease_backend=True, backend=None)
    check_name(decl.name)
    decl.schedule()

    def decorator(func: H) -> H:
        target = func.__func__ if isinstance(func, staticmethod | classmethod) else func
        if not callable(target):
            raise ConfigError(f"{decl.describe()} decorates {func!r}, which is not callable: use a function")
        existing: tuple[Declaration, ...] = getattr(target, _ATTR, ())
        if any(d.name == decl.name for d in existing):
            raise DuplicateJobError(f"job {decl.name!r} is declared twice on {_qualname(target)}")
        setattr(target, _ATTR, (*existing, decl))
        return func

    return decorator


def every(
    name: str, interval: Duration, *, offset: Duration = 0, **options: Unpack[LeaseJobOptions]
) -> Callable[[H], H]:
    """Declare a job on a fixed interval, aligned to the UTC grid (plus `offset`)."""
    return _declare(Declaration("every", name, interval, {"offset": offset}, dict(options)))


def cron(
    name: str, expression: str, *, timezone: str = "UTC", dst_gap: DstGap = "next",
    dst_fold: DstFold = "first", **options: Unpack[LeaseJobOptions],
) -> Callable[[H], H]:
    """Declare a job on a cron expression in an IANA timezone."""
    sched = {"timezone": timezone, "dst_gap": dst_gap, "dst_fold": dst_fold}
    return _declare(Declaration("cron", name, expression, sched, dict(options)))


def at(name: str, when: datetime | int | float, **options: Unpack[LeaseJobOptions]) -> Callable[[H], H]:
    """Declare a job that runs once, at `when` (an aware datetime or epoch seconds)."""
    return _declare(Declaration("at", name, when, {}, dict(options)))


def declarations(func: object) -> tuple[Declaration, ...]:
    """The jobs declared on a function or method (empty when none)."""
    if isinstance(func, staticmethod | classmethod):
        func = func.__func__
    found = getattr(func, _ATTR, ())
    return found if isinstance(found, tuple) else ()


@dataclass(frozen=True, slots=True)
class _Found:
    decl: Declaration
    handler: Callable[..., Any]
    source: str
    """`ReportsService.digest of <ReportsService object at 0x…>`: names the object in messages."""


def _collect(obj: object) -> list[_Found]:
    found: list[_Found] = []
    if isinstance(obj, types.ModuleType):
        for value in list(vars(obj).values()):
            # A module registers the functions it defines, not those it imports.
            if getattr(value, "__module__", None) != obj.__name__:
                continue
            for decl in declarations(value):
                found.append(_Found(decl, value, f"{obj.__name__}.{_qualname(value)}"))
        return found
    if isinstance(obj, type):
        if any(declarations(inspect.getattr_static(obj, n)) for n in dir(obj)):
            raise ConfigError(
                f"register({obj.__name__}) got a class: pass an instance, e.g. "
                f"scheduler.register({obj.__name__}())"
            )
    elif callable(obj) and declarations(obj):
        return [_Found(d, obj, _qualname(obj)) for d in declarations(obj)]
    for attr in dir(type(obj)):
        raw = inspect.getattr_static(obj, attr, None)
        decls = declarations(raw)
        if not decls:
            continue
        bound = getattr(obj, attr)  # only now: a property is never evaluated
        for decl in decls:
            found.append(_Found(decl, bound, f"{type(obj).__name__}.{attr} of {_describe(obj)}"))
    return found


class Registry(Protocol):
    """What `register` needs of a scheduler: its jobs, its defaults, and `every`, `cron` and `at`."""

    jobs: dict[str, Job]

    @property
    def lease_ms(self) -> int:
        """A job's default lease, ms."""
        ...

    @property
    def heartbeat_ms(self) -> int:
        """The heartbeat, ms."""
        ...

    def _check_options(self, method: str, options: dict[str, Any], extra: frozenset[str]) -> None:
        """Refuse options unknown to `method` or to the backend."""


def register(scheduler: Registry, obj: object) -> None:
    """Turn every job declared on `obj` (an instance, a module or a function) into a job of `scheduler`.

    All or nothing: every declaration is checked before the first job is added.
    """
    found = _collect(obj)
    if not found:
        raise ConfigError(
            f"{_describe(obj)} declares no job: decorate its methods or functions with "
            "@every, @cron or @at (from anarchon)"
        )
    sources: dict[str, str] = scheduler.__dict__.setdefault(_SOURCES, {})
    seen: dict[str, _Found] = {}
    for f in found:
        name = f.decl.name
        first = seen.get(name)
        if first is not None:
            raise DuplicateJobError(
                f"job {name!r} is declared twice: by {first.source} and by {f.source}: "
                "job names must be unique in a namespace"
            )
        seen[name] = f
        if name in scheduler.jobs:
            other = sources.get(name) or _qualname(scheduler.jobs[name].handler)
            raise DuplicateJobError(
                f"job {name!r} is already registered by {other}; {f.source} declares it too: "
                "job names must be unique in a namespace"
            )
        _wrap(f, partial(_check, scheduler, f))
    for f in found:
        d = f.decl
        method = getattr(scheduler, d.kind)
        _wrap(f, partial(method, d.name, d.spec, f.handler, **d.schedule_options, **d.options))
        sources[d.name] = f.source


def _check(scheduler: Registry, f: _Found) -> None:
    d = f.decl
    scheduler._check_options(d.kind, dict(d.options), frozenset())
    _options.resolve(d.options, lease_ms=scheduler.lease_ms, heartbeat_ms=scheduler.heartbeat_ms)
    _options.handler_arity(d.name, f.handler)
    d.schedule()


def _wrap(f: _Found, call: Callable[[], object]) -> None:
    """Run `call`; an anarchon error is re-raised, same type, prefixed with where the job was declared."""
    try:
        call()
    except AnarchonError as exc:
        raise type(exc)(f"{f.decl.describe()} on {f.source}: {exc}") from None


def _describe(obj: object) -> str:
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__!r}"
    if type(obj).__repr__ is object.__repr__:
        return f"<{type(obj).__name__} object at {id(obj):#x}>"
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."


def _qualname(obj: object) -> str:
    return getattr(obj, "__qualname__", None) or repr(obj)
