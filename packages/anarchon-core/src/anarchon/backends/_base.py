"""Optional plumbing for backends: defaults, URL redaction and store-time helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

from ._protocols import Capability, ClaimRequest, ClaimResult, ReleaseCallback

__all__ = ["BackendBase", "redact_url"]


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
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


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
