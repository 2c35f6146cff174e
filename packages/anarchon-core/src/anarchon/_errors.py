"""The exception hierarchy: one root, with builtin bases where the meaning matches."""

from __future__ import annotations

from typing import Any

__all__ = [
    "AnarchonError",
    "BackendError",
    "BackendNotFound",
    "BackendUnavailable",
    "ConfigError",
    "DuplicateJobError",
    "JobNameError",
    "JobRegistered",
    "LeaseLost",
    "OptionError",
    "RunCancelled",
    "ScheduleConflict",
    "ScheduleError",
    "ScheduleNotFound",
    "SchemaMismatch",
    "UnknownJob",
]


class AnarchonError(Exception):
    """Root of every error that anarchon raises."""


class ScheduleError(AnarchonError, ValueError):
    """A schedule, duration or timezone that cannot be understood."""


class ConfigError(AnarchonError, TypeError):
    """An option that is unknown, mistyped or not supported by the backend."""


class OptionError(AnarchonError, ValueError):
    """An option whose value is out of range, such as a heartbeat of half the lease or more."""


class DuplicateJobError(AnarchonError, ValueError):
    """A job name registered twice in one scheduler."""


class JobNameError(AnarchonError, ValueError):
    """A job name that is empty, longer than 200 characters or holds a control character."""


class UnknownJob(AnarchonError, LookupError):
    """A control or a read names a job that the store does not know in that namespace."""


class JobRegistered(AnarchonError, RuntimeError):
    """A job cannot be forgotten: a live replica still registers it."""


class BackendNotFound(AnarchonError, LookupError):
    """No installed backend handles a URL scheme."""


class BackendError(AnarchonError):
    """A backend operation failed; the message names the store, never its password."""


class BackendUnavailable(BackendError, ConnectionError):
    """The store cannot be reached."""


class SchemaMismatch(BackendError):
    """The store holds a table, stream or bucket whose shape anarchon did not create."""


class LeaseLost(AnarchonError):
    """This run no longer owns its job: another instance took it over, or the lease expired."""


class RunCancelled(AnarchonError):
    """Raised inside a handler by `ctx.raise_if_cancelled()` or `ctx.sleep()` once the run is cancelled."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"run cancelled: {reason}")
        self.reason = reason



class ScheduleNotFound(AnarchonError, LookupError):
    """No stored schedule has this id."""


class ScheduleConflict(AnarchonError, ValueError):
    """A write of a stored schedule that the store refused: the id is taken, or the version moved on."""

    def __init__(self, message: str, current: Any) -> None:
        super().__init__(message)
        self.current = current
        """The `StoredSchedule` the store holds now (None when there is none)."""


# Named where users import them from: a traceback's last line reads `anarchon.BackendUnavailable: …`.
for _name in __all__:
    globals()[_name].__module__ = "anarchon"
del _name
