"""A registered job as data: its name, schedule, checked options and handler."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigError, JobNameError
from ._options import ResolvedOptions, handler_arity
from ._schedules import Schedule

__all__ = ["Job", "check_name"]

MAX_NAME = 200
_CONTROL = re.compile(r"[\x00-\x1f]")


def check_name(name: object) -> None:
    """Raise `ConfigError` for a name that is not a string, `JobNameError` for one that is unusable."""
    if not isinstance(name, str):
        raise ConfigError(f"invalid job name {name!r}: use a non-empty string")
    if not name.strip():
        raise JobNameError(f"invalid job name {name!r}: use a non-empty string")
    if len(name) > MAX_NAME or _CONTROL.search(name) is not None:
        raise JobNameError(
            f"invalid job name {name!r}: use at most {MAX_NAME} characters and no control characters"
        )


@dataclass(frozen=True, slots=True)
class Job:
    """A registered job: name, schedule, checked options and handler. Building one checks the name
    and the handler's signature."""

    name: str
    schedule: Schedule
    options: ResolvedOptions
    handler: Callable[..., Any]
    task: str | None = None
    """The task a stored schedule runs; None for a job registered in code."""
    takes_ctx: bool = field(init=False, repr=False, compare=False)
    """True when the handler takes the `JobContext`."""
    is_async: bool = field(init=False, repr=False, compare=False)
    """True when the handler is awaited on the event loop (else it runs in a worker thread)."""

    def __post_init__(self) -> None:
        check_name(self.name)
        if not hasattr(self, "is_async"):  # (set already by `bound`)
            takes_ctx, is_async = handler_arity(self.name, self.handler)
            object.__setattr__(self, "takes_ctx", takes_ctx)
            object.__setattr__(self, "is_async", is_async)

    @classmethod
    def bound(cls, name: str, schedule: Schedule, options: ResolvedOptions, handler: Callable[..., Any], *,
              is_async: bool, task: str | None = None) -> Job:
        """A job whose handler takes the context and is known to be async or not (a stored schedule's
        task, bound to its arguments): its signature is not inspected again for every schedule."""
        job = cls.__new__(cls)
        object.__setattr__(job, "takes_ctx", True)
        object.__setattr__(job, "is_async", is_async)
        object.__setattr__(job, "name", name)
        object.__setattr__(job, "schedule", schedule)
        object.__setattr__(job, "options", options)
        object.__setattr__(job, "handler", handler)
        object.__setattr__(job, "task", task)
        job.__post_init__()
        return job
