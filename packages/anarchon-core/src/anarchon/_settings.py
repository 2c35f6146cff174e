"""A scheduler's settings: which are there, what each defaults to, and is each value valid?

`Settings.parse` checks what `Scheduler(...)` was given, in one place, and fills in the defaults; the
scheduler keeps the result and hands it to the engine as it is. A new setting is a field here (with
its check in `parse`), a line in `docs/guide/options.md`, and the code that uses it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ._clock import Clock, SystemClock
from ._duration import parse_duration
from ._errors import ConfigError, OptionError
from ._logs import enable_console_logging, logger
from ._options import check_heartbeat
from .backends import DEFAULT_HISTORY, Capability

__all__ = ["LEASE_SETTINGS", "SETTING_NAMES", "Settings", "default_instance_id"]


def default_instance_id() -> str:
    """`host:pid:random`, unique per process start."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(2).hex()}"


@dataclass(frozen=True, slots=True)
class Settings:
    """A scheduler's settings, checked, with every default filled in (`Scheduler.settings`)."""

    namespace: str
    """Isolates one application's jobs in a shared store."""
    instance_id: str
    """This replica's name in the store (`host:pid:random` by default)."""
    lease_ms: int
    """A job's default lease (lease backends)."""
    heartbeat_ms: int
    """How often leases are renewed, and how often a replica polls where the store does not push."""
    jitter_ms: int | None
    """The claim jitter; None: `min(50 ms, interval / 10)` per job."""
    stop_timeout_ms: int
    """On a stop, how long handlers get before `async def` ones are cancelled."""
    max_skew_ms: int
    """How far in the store's future a slot may be claimed (else: early)."""
    block_limit_ms: int
    """How long the lease keeper renews for a blocked event loop before it lets the leases go."""
    clock: Clock
    """The wall clock (virtual in tests)."""
    log: logging.Logger
    """Where the scheduler logs."""
    history: int
    """Ended runs kept per job in the store; 0: none, and no job catalogue either."""
    leases: bool
    """True when the backend keeps leases (not a setting: what the backend declares)."""

    @classmethod
    def parse(cls, backend: object, given: Mapping[str, Any]) -> Settings:
        """Check the settings `given` to `Scheduler(...)` for `backend`, and fill in the defaults."""
        caps = getattr(backend, "capabilities", None)
        if not isinstance(caps, frozenset) or Capability.CLAIM not in caps or not hasattr(backend, "claim"):
            raise ConfigError(
                f"{backend!r} is not a backend: it must declare `capabilities` with 'claim' and "
                "implement the ClaimBackend protocol (anarchon.backends)"
            )
        for key in given:
            if key not in SETTING_NAMES:
                raise ConfigError(
                    f"unknown option {key!r} for Scheduler(): valid options are "
                    f"{', '.join(sorted(SETTING_NAMES))}"
                )
        leases = Capability.LEASE in caps
        if not leases:
            for key in LEASE_SETTINGS:
                if key in given:
                    raise ConfigError(
                        f"option {key!r} needs a lease backend, but {backend!r} is claim-only: "
                        f"remove {key!r}, or use a lease backend"
                    )
        namespace = given.get("namespace", "anarchon")
        if not isinstance(namespace, str):
            raise ConfigError(f"invalid namespace {namespace!r}: use a non-empty string")
        if not namespace:
            raise OptionError(f"invalid namespace {namespace!r}: use a non-empty string")
        lease_ms = parse_duration(given.get("lease", "30s"), name="lease")
        heartbeat_ms = parse_duration(given.get("heartbeat", "5s"), name="heartbeat")
        check_heartbeat(lease_ms, heartbeat_ms)
        jitter = given.get("jitter")
        log = given.get("log", False)
        if not isinstance(log, bool | logging.Logger):
            raise ConfigError(f"invalid log {log!r}: use True (INFO lines on stderr), False, or a "
                              "logging.Logger of yours")
        instance_id = given.get("instance_id")
        if instance_id is not None and (not isinstance(instance_id, str) or not instance_id.strip()):
            raise ConfigError(f"invalid instance_id {instance_id!r}: use a non-empty string, or leave it out "
                              "for host:pid:random")
        clock = given.get("clock")
        if clock is not None and not callable(getattr(clock, "now_ms", None)):
            raise ConfigError(f"invalid clock {clock!r}: pass an object with now_ms() (e.g. "
                              "anarchon.testing.VirtualClock), or leave it out for the system clock")
        settings = cls(
            namespace=namespace,
            instance_id=given.get("instance_id") or default_instance_id(),
            lease_ms=lease_ms,
            heartbeat_ms=heartbeat_ms,
            jitter_ms=None if jitter is None else parse_duration(jitter, name="jitter", allow_zero=True),
            stop_timeout_ms=parse_duration(given.get("stop_timeout", "10s"), name="stop_timeout",
                                           allow_zero=True),
            max_skew_ms=parse_duration(given.get("max_skew", "2s"), name="max_skew", allow_zero=True),
            block_limit_ms=parse_duration(given.get("block_limit", "1m"), name="block_limit"),
            clock=given.get("clock") or SystemClock(),
            log=log if isinstance(log, logging.Logger) else logger,
            history=_history(backend, caps, given.get("history")),
            leases=leases,
        )
        if log is True:
            enable_console_logging(settings.log)
        return settings

    def with_instance_id(self, instance_id: str) -> Settings:
        """These settings under another instance id (a process forked from the one that made them)."""
        return replace(self, instance_id=instance_id)


SETTING_NAMES: frozenset[str] = frozenset(
    f.name.removesuffix("_ms") for f in fields(Settings) if f.name != "leases")
"""The keyword arguments `Scheduler(...)` takes: the fields, a duration `x_ms` given as `x`."""

LEASE_SETTINGS = ("lease", "heartbeat", "block_limit")
"""The settings that only a lease backend takes."""


def _history(backend: object, caps: frozenset[Capability], value: object) -> int:
    """The `history` setting: the default where the store keeps history, refused where it cannot."""
    if value is None:
        return DEFAULT_HISTORY if Capability.HISTORY in caps else 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise OptionError(f"invalid history {value!r}: use a whole number of runs kept per job, e.g. "
                          f"history={DEFAULT_HISTORY}, or history=0 to keep none")
    if value > 0 and Capability.HISTORY not in caps:
        raise ConfigError(
            f"option 'history' needs a backend that keeps a run history, but {backend!r} does not declare "
            "the 'history' capability: remove 'history' (or pass history=0), or use a backend that "
            "declares Capability.HISTORY: SQLite, PostgreSQL, Redis or MemoryBackend"
        )
    return value
