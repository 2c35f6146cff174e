"""A claim-only backend on a JSON file: `fcntl.flock` makes each claim atomic across processes."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from anarchon import BackendUnavailable
from anarchon.backends import BackendBase, Capability, ClaimOutcome, ClaimRequest, ClaimResult, Lease


class FileLockBackend(BackendBase):
    """One winner per (namespace, job, slot), recorded in a JSON file under an exclusive lock."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM})
    url_schemes: ClassVar[tuple[str, ...]] = ("filelock",)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._use(os.fspath(path), None, {})  # BackendBase's plumbing: sibling() opens the same file

    @classmethod
    def from_url(cls, url: str) -> FileLockBackend:
        """`filelock:///absolute/path.json`."""
        path = urlsplit(url).path
        if not path:
            raise ValueError(f"{url!r} has no path: use e.g. 'filelock:///tmp/anarchon.json'")
        return cls(path)

    @property
    def url(self) -> str:
        """The file's URL."""
        return f"filelock://{self.path}"

    async def open(self) -> None:
        """Create the file if needed; raise BackendUnavailable when it cannot be written."""
        try:
            self.path.touch(exist_ok=True)
        except OSError as exc:
            raise BackendUnavailable(f"cannot open {str(self.path)!r}: {exc}") from exc

    async def claim(self, request: ClaimRequest) -> ClaimResult:
        """Claim one slot."""
        return (await self.claim_many([request]))[0]

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch under one lock: one 'round trip'."""
        return await asyncio.to_thread(self._claim_many, list(requests))

    def _claim_many(self, requests: list[ClaimRequest]) -> list[ClaimResult]:
        with open(self.path, "r+", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
            text = f.read()
            gates: dict[str, str] = json.loads(text) if text else {}
            now = time.time_ns() // 1_000_000
            results = []
            for r in requests:
                key = json.dumps([r.namespace, r.job, r.slot])
                holder = gates.get(key)
                if holder is not None:
                    results.append(
                        ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, holder=holder, attempt=1, now=now)
                    )
                    continue
                gates[key] = r.owner
                lease = Lease(r.namespace, r.job, r.slot, 1, 0, r.owner, 0)
                results.append(
                    ClaimResult(
                        ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=r.owner, attempt=1, now=now
                    )
                )
            f.seek(0)
            f.truncate()
            json.dump(gates, f)
            return results
