"""Optional plumbing for backends: defaults, URL redaction and store-time helpers."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from ._protocols import Capability, ClaimRequest, ClaimResult, ReleaseCallback

__all__ = ["BackendBase", "lazy_exports", "redact_url"]


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
    """Defaults shared by backends: no-op open/close, unbounded horizon, claim_many by gather."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM})
    url_schemes: ClassVar[tuple[str, ...]] = ()

    @property
    def horizon_ms(self) -> int | None:
        """How long a claim is remembered; None means forever."""
        return None

    @property
    def url(self) -> str:
        """Where the store is, password redacted."""
        return f"<{type(self).__name__}>"

    async def open(self) -> None:
        """Connect; nothing to do by default."""

    async def close(self) -> None:
        """Disconnect; nothing to do by default."""

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Claim one slot; subclasses implement this."""
        raise NotImplementedError

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch concurrently, one claim per request (override for one round trip)."""
        return list(await asyncio.gather(*(self.claim(r) for r in requests)))

    async def subscribe(self, namespace: str, callback: ReleaseCallback) -> None:
        """Accept a release subscription; backends without push never call back."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
