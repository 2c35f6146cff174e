"""Job options: their types (for type checkers) and their checks (at registration)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Never, Protocol, TypedDict, TypeVar

from ._duration import Duration, parse_duration
from ._errors import ConfigError, OptionError
from ._process import PROCESS
from .backends import Overlap

__all__ = [
    "ClaimJobOptions", "ClaimOnlyJobOptions", "JobOptions", "LeaseJobOptions", "NeedsControlBackend",
    "NeedsScheduleBackend",
    "NeedsLeaseBackend",
    "OverlapName", "ResolvedOptions",
]

OverlapName = Literal["skip", "buffer_one", "replace", "allow"]


class ClaimJobOptions(TypedDict, total=False):
    """Options every backend supports."""

    timeout: Duration | None
    """Cancel the handler after this long; the run ends failed with reason timeout."""
    jitter: Duration | None
    """Random delay before each claim; default min(50 ms, interval / 10)."""


class LeaseJobOptions(ClaimJobOptions, total=False):
    """Options that need a lease backend."""

    overlap: OverlapName | Overlap
    """What a new slot does while an older one still runs: skip, buffer_one, replace or allow."""
    max_attempts: int
    """Attempts per slot, the first included (default 3)."""
    catch_up: Duration
    """At start, run the latest missed slot due within this window (default 5 minutes; 0: off)."""
    lease: Duration
    """This job's lease (default: the scheduler's)."""
    heartbeat: Duration
    """This job's renewal interval (default: the scheduler's); less than half the lease."""
    retry: bool | Duration
    """After a handler error, release the slot for another attempt after this backoff (doubling)."""


_Hash_co = TypeVar("_Hash_co", bound=int, covariant=True)


class NeedsLeaseBackend(Protocol[_Hash_co]):
    """The type of a lease-only option on a claim-only scheduler: no value has it.

    A type checker then names the option, e.g. `Argument "overlap" to "every" of "Scheduler" has
    incompatible type "str"; expected "NeedsLeaseBackend[Never]"`. (The type argument lets mypy
    match the call to this signature before it rejects the value, so that its error names the
    option rather than "no overload variant matches".) On a lease backend, mypy may name this type
    too when an option's value has the wrong type (`overlap="sometimes"`): there the value is wrong.
    """

    def __hash__(self) -> _Hash_co: ...


class NeedsControlBackend(Protocol[_Hash_co]):
    """The type of a job name given to `pause`, `resume` or `trigger` on a scheduler whose backend
    stores no controls: no value has it, so a type checker names the call (as `NeedsLeaseBackend`)."""

    def __hash__(self) -> _Hash_co: ...


class NeedsScheduleBackend(Protocol[_Hash_co]):
    """The type of a task name given to `Scheduler.task` on a scheduler whose backend keeps no
    schedules as data: no value has it, so a type checker names the call (as `NeedsLeaseBackend`)."""

    def __hash__(self) -> _Hash_co: ...


class ClaimOnlyJobOptions(ClaimJobOptions, total=False):
    """The options of a scheduler on a claim-only backend: a lease-only option is a type error."""

    overlap: NeedsLeaseBackend[Never]
    max_attempts: NeedsLeaseBackend[Never]
    catch_up: NeedsLeaseBackend[Never]
    lease: NeedsLeaseBackend[Never]
    heartbeat: NeedsLeaseBackend[Never]
    retry: NeedsLeaseBackend[Never]


JobOptions = LeaseJobOptions
"""All job options, as accepted at run time."""

COMMON = frozenset(ClaimJobOptions.__annotations__)
LEASE_ONLY = frozenset(LeaseJobOptions.__annotations__) - COMMON
DEFAULT_RETRY_MS = 5_000


@dataclass(frozen=True, slots=True)
class ResolvedOptions:
    """A job's options after checking, in milliseconds."""

    timeout_ms: int | None
    jitter_ms: int | None
    overlap: Overlap
    claim_overlap: Overlap
    """The overlap a claim sends to the store: `replace` is claimed as `buffer_one` (the newer slot
    waits while the scheduler asks the older run to end; that run keeps its lease until it has)."""
    max_attempts: int
    catch_up_ms: int
    lease_ms: int
    heartbeat_ms: int
    retry_ms: int | None


def check_names(
    method: str, options: Mapping[str, Any], extra: frozenset[str], *, lease_backend: bool,
    backend: object,
) -> None:
    """Reject unknown options, and lease-only options on a claim-only backend."""
    for key in options:
        if key not in COMMON and key not in LEASE_ONLY and key not in extra:
            valid = ", ".join(sorted(COMMON | LEASE_ONLY | extra))
            raise ConfigError(f"unknown option {key!r} for {method}(): valid options are {valid}")
        if key in LEASE_ONLY and not lease_backend:
            raise ConfigError(
                f"option {key!r} needs a lease backend, but {backend!r} is claim-only: remove "
                f"{key!r}, or use a lease backend (SqliteBackend, RedisBackend, PostgresBackend, "
                "NatsKVBackend, MemoryBackend)"
            )


def resolve(
    options: Mapping[str, Any], *, lease_ms: int, heartbeat_ms: int, leases: bool = True
) -> ResolvedOptions:
    """Check option values and fill in defaults from the scheduler's settings (on a claim-only
    backend, `leases=False`: no catch-up)."""
    timeout = options.get("timeout")
    jitter = options.get("jitter")
    overlap_value = options.get("overlap", Overlap.SKIP)
    try:
        overlap = Overlap(overlap_value)
    except ValueError:
        raise OptionError(
            f"invalid overlap {overlap_value!r}: use 'skip', 'buffer_one', 'replace' or 'allow'"
        ) from None
    max_attempts = options.get("max_attempts", 3)
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
        raise OptionError(f"invalid max_attempts {max_attempts!r}: use a whole number of 1 or more")
    job_lease = parse_duration(options["lease"], name="lease") if "lease" in options else lease_ms
    job_heartbeat = (
        parse_duration(options["heartbeat"], name="heartbeat") if "heartbeat" in options else heartbeat_ms
    )
    check_heartbeat(job_lease, job_heartbeat)
    retry = options.get("retry", False)
    if retry is True:
        retry_ms: int | None = DEFAULT_RETRY_MS
    elif retry is False or retry is None:
        retry_ms = None
    else:
        retry_ms = parse_duration(retry, name="retry")
    return ResolvedOptions(
        timeout_ms=None if timeout is None else parse_duration(timeout, name="timeout"),
        jitter_ms=None if jitter is None else parse_duration(jitter, name="jitter", allow_zero=True),
        overlap=overlap,
        claim_overlap=Overlap.BUFFER_ONE if overlap is Overlap.REPLACE else overlap,
        max_attempts=max_attempts,
        catch_up_ms=(parse_duration(options.get("catch_up", "5m"), name="catch_up", allow_zero=True)
                     if leases else 0),
        lease_ms=job_lease,
        heartbeat_ms=job_heartbeat,
        retry_ms=retry_ms,
    )


def check_heartbeat(lease_ms: int, heartbeat_ms: int) -> None:
    """A heartbeat must fit twice into a lease, so one late renewal does not lose it."""
    if heartbeat_ms * 2 >= lease_ms:
        raise OptionError(
            f"heartbeat of {heartbeat_ms} ms must be less than half the lease ({lease_ms} ms): "
            "e.g. lease='30s', heartbeat='5s'"
        )


def handler_arity(name: str, handler: object) -> tuple[bool, bool]:
    """Return (takes_ctx, is_async) for a handler, or raise ConfigError naming the job."""
    # The last handler's answer is kept (`PROCESS.last_arity`): jobs registered in a loop share one.
    last = PROCESS.last_arity
    if last is not None and last[0] is handler:
        return last[1]
    answer = _handler_arity(name, handler)
    PROCESS.last_arity = (handler, answer)
    return answer


def _handler_arity(name: str, handler: object) -> tuple[bool, bool]:
    if not callable(handler):
        raise ConfigError(f"handler {handler!r} of job {name!r} is not callable: pass a function")
    is_async = inspect.iscoroutinefunction(handler) or (
        # an object with an async __call__; not a class, whose __call__ describes its instances
        not inspect.isclass(handler)
        and inspect.iscoroutinefunction(getattr(handler, "__call__", None))  # noqa: B004
    )
    try:
        sig = inspect.signature(handler)
    except (TypeError, ValueError):
        return False, is_async
    required = 0
    var_positional = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            var_positional = True
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty:
            required += 1
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            raise ConfigError(
                f"handler {_qualname(handler)} of job {name!r} has a required keyword-only "
                f"parameter {p.name!r}: a handler takes no argument or one (ctx)"
            )
    if required > 1:
        raise ConfigError(
            f"handler {_qualname(handler)} of job {name!r} takes {required} arguments: "
            "a handler takes no argument or one (ctx: JobContext)"
        )
    return required == 1 or (required == 0 and var_positional), is_async


def _qualname(handler: object) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)


Handler = Callable[..., Any]
