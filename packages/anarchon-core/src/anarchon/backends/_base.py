"""Optional plumbing for backends: one client owned or borrowed, one error hook, single-item adapters."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, Self
from urllib.parse import urlsplit, urlunsplit

from .._errors import AnarchonError, BackendError, BackendUnavailable
from ._protocols import (
    Capability,
    ClaimRequest,
    ClaimResult,
    Lease,
    ReleaseCallback,
    ReleaseOutcome,
    ScheduleWrite,
    WinsCallback,
)

__all__ = ["BackendBase", "LeaseBackendBase", "check_expect", "check_schedule_batch", "deliver_wins",
           "lazy_exports", "read_wins", "redact_url", "wins_text"]


def check_expect(expect: object) -> None:
    """The check of `ScheduleBackend.put_schedule`'s `expect` before anything is written: "absent",
    "any" or a version, an int (`TypeError` otherwise)."""
    if expect not in ("absent", "any") and (not isinstance(expect, int) or isinstance(expect, bool)):
        raise TypeError(f"expect must be 'absent', 'any' or a version (an int), not {expect!r}")


def check_schedule_batch(writes: Sequence[ScheduleWrite], expect: object) -> None:
    """The checks of `ScheduleBackend.put_schedules` before anything is written: `expect` is "absent"
    or "any" (`TypeError` otherwise), and no id comes twice (`ValueError`)."""
    if expect not in ("absent", "any"):
        raise TypeError(f"expect of a batch must be 'absent' or 'any', not {expect!r}: write a "
                        "compare-and-set with put_schedule, one schedule at a time")
    seen: set[str] = set()
    for write in writes:
        if write.id in seen:
            raise ValueError(f"schedule id {write.id!r} comes twice in one batch: write each id once "
                             "(the last write of it, if that is what is meant)")
        seen.add(write.id)


def wins_text(owner: str, wins: Iterable[tuple[str, int]]) -> str:
    """An announced batch of wins as text: the owner's line, then one `slot<TAB>job` line per win."""
    return owner + "".join(f"\n{slot}\t{job}" for job, slot in wins)


def read_wins(text: str) -> tuple[str, list[tuple[str, int]]]:
    """The owner and the (job, slot) wins of `wins_text`; ValueError when it is not such a text."""
    owner, _, body = text.partition("\n")
    if not body:
        return owner, []
    return owner, [(job, int(slot)) for slot, _, job in (line.partition("\t") for line in body.split("\n"))]


def deliver_wins(text: str, callbacks: Iterable[WinsCallback], where: str, log: logging.Logger) -> None:
    """Call each of `callbacks` with the owner and wins of `text`, heard on `where`. A malformed text
    is logged and dropped, and a callback's failure is logged, never raised: a lost announcement
    costs a claim, nothing more."""
    try:
        owner, wins = read_wins(text)
    except ValueError:
        log.warning("ignored a malformed wins message on %s", where)
        return
    for callback in callbacks:
        try:
            callback(owner, wins)
        except Exception:
            log.exception("wins callback failed for %d job(s) won by %s", len(wins), owner)


def redact_url(url: str) -> str:
    """Return `url` with its password replaced by '***' (and any 'password=' query value too)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{hostinfo}"
    query = parts.query
    if query:
        pieces = []
        for piece in query.split("&"):
            key, sep, _value = piece.partition("=")
            pieces.append(f"{key}=***" if sep and key.lower() in {"password", "pass", "pwd"} else piece)
        query = "&".join(pieces)
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing to hide: as given (urlunsplit would drop the empty host of sqlite:///x)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def lazy_exports(
    module: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """PEP 562 `__getattr__` and `__dir__` for a package whose public names (and client library) are
    imported on first use: `exports` maps each name to the private submodule that defines it."""

    def __getattr__(name: str) -> Any:
        submodule = exports.get(name)
        if submodule is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{module}.{submodule}"), name)
        setattr(sys.modules[module], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module]), *exports})

    return __getattr__, __dir__


class BackendBase:
    """Plumbing a backend may build on; every part is optional.

    - **One operation, implemented once.** A backend implements `claim_many`; `claim` is
      `claim_many([request])[0]`. (`LeaseBackendBase` does the same for renewals and releases.)
    - **A client owned or borrowed.** The constructor calls `_use(target, client_type, settings)`
      with what it was given: a URL (or file path, or list of servers), which the backend connects
      to in `open` (`_connect`) and disconnects from in `close` (`_disconnect`); or a client object
      of `client_type`, which it uses and leaves open. `open` and `close` are idempotent, and
      `sibling()` builds a new backend on a connection of its own from the same target and settings.
    - **One place for the client library's errors.** `_translate(exc, doing)` turns an exception
      into `BackendUnavailable` or `BackendError` (or None: not a store error); `with
      self._errors(doing):` applies it, and `open` applies it to `_connect` and `_prepare`.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM})
    url_schemes: ClassVar[tuple[str, ...]] = ()

    _target: Any = None
    """What the backend connects to (a URL, a path), or None when it was given a client."""
    _settings: dict[str, Any] = {}  # noqa: RUF012 (read only; `_use` sets an instance's own)
    """The constructor's keyword arguments, for `sibling`."""
    _client: Any = None
    """The client library's connection: given, or made by `_connect` in `open`."""
    _opened: bool = False
    _open_lock: asyncio.Lock | None = None

    def _use(self, target: Any, client_type: type[Any] | tuple[type[Any], ...] | None,
             settings: dict[str, Any]) -> None:
        """Remember how to reach the store: `target` is an instance of `client_type` (borrowed, left
        open) or what `_connect` connects to (owned); `settings` are the other constructor arguments."""
        if client_type is not None and isinstance(target, client_type):
            self._target, self._client = None, target
        else:
            self._target, self._client = target, None
        self._settings = dict(settings)

    def sibling(self) -> Self | None:
        """A new, unopened backend on the same store with the same settings and a connection of its own;
        None when this one was given a client object it does not own."""
        if self._target is None:
            return None
        make: Callable[..., Self] = type(self)
        return make(self._target, **self._settings)

    @property
    def horizon_ms(self) -> int | None:
        """How long a claim is remembered; None means forever."""
        return None

    @property
    def url(self) -> str:
        """Where the store is, password redacted."""
        if isinstance(self._target, str):
            return redact_url(self._target)
        return f"<{type(self).__name__}>"

    @property
    def client(self) -> Any:
        """The client library's connection (given, or made by `open`)."""
        if self._client is None:
            raise BackendUnavailable(
                f"{self!r} is not open: call `await backend.open()` (Scheduler.start does)"
            )
        return self._client

    # -- open and close --------------------------------------------------------------------------

    def _lock(self) -> asyncio.Lock:
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        return self._open_lock

    async def open(self) -> None:
        """Connect (when this backend owns its connection) and prepare the store; idempotent."""
        async with self._lock():
            if self._opened:
                return
            made = False
            try:
                if self._client is None and self._target is not None:
                    with self._errors("open"):
                        self._client = await self._connect()
                    made = True
                with self._errors("open"):
                    await self._prepare()
            except BaseException:
                if made:
                    client, self._client = self._client, None
                    with contextlib.suppress(Exception):
                        await self._disconnect(client)
                raise
            self._opened = True

    async def close(self) -> None:
        """Stop background work and close the connection this backend made; idempotent."""
        async with self._lock():
            self._opened = False
            await self._shutdown()
            if self._target is not None and self._client is not None:
                client, self._client = self._client, None
                with contextlib.suppress(Exception):
                    await self._disconnect(client)

    async def _connect(self) -> Any:
        """Make the connection to `self._target` (owned backends)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _connect")

    async def _disconnect(self, client: Any) -> None:
        """Close a connection `_connect` made."""

    async def _prepare(self) -> None:
        """Check or create what the store needs (schema, scripts, buckets), once connected."""

    async def _shutdown(self) -> None:
        """Stop background work (listeners) before the connection closes."""

    # -- errors ----------------------------------------------------------------------------------

    def _translate(self, exc: Exception, doing: str) -> BackendError | None:
        """anarchon's error for the client library's `exc`, raised while `doing`; None: not a store
        error, raise it as it is. The one place a driver maps its client library's exceptions."""
        return None

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Raise the client library's errors inside the block as `_translate` says."""
        try:
            yield
        except AnarchonError:
            raise
        except Exception as exc:
            err = self._translate(exc, doing)
            if err is None:
                raise
            raise err from exc

    # -- the operations ----------------------------------------------------------------------------

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Claim one slot: `claim_many` with one request."""
        return (await self.claim_many([request]))[0]

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch, results in order; subclasses implement this."""
        raise NotImplementedError(f"{type(self).__name__} does not implement claim_many")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class LeaseBackendBase(BackendBase):
    """`BackendBase` for lease backends: `renew` and `release` are the batch methods with one item,
    and `subscribe` is accepted and never calls back (override it with capability `notify`)."""

    async def renew(self, lease: Lease, lease_ms: int) -> Lease | None:
        """Renew one lease: `renew_many` with one item."""
        return (await self.renew_many([(lease, lease_ms)]))[0]

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew a batch, results in order; subclasses implement this."""
        raise NotImplementedError(f"{type(self).__name__} does not implement renew_many")

    async def release(self, lease: Lease, outcome: ReleaseOutcome) -> bool:
        """End one run: `release_many` with one item."""
        return (await self.release_many([(lease, outcome)]))[0]

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End a batch of runs, results in order; subclasses implement this."""
        raise NotImplementedError(f"{type(self).__name__} does not implement release_many")

    async def subscribe(self, namespace: str, callback: ReleaseCallback) -> None:
        """Accept a release subscription; backends without `notify` never call back."""
