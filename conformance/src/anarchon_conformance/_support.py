"""Plumbing the suite shares: backend factories, the store clock of in-process backends, a pool."""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from anarchon import MemoryBackend, MemoryClaimBackend, MemoryStore, backend_for_url
from anarchon.backends import ClaimRequest, Overlap, redact_url

__all__ = [
    "BackendFactory",
    "BackendPool",
    "StoreClock",
    "memory_backend_factory",
    "load_backend",
    "memory_claim_backend_factory",
    "resolve_backend",
]

BackendFactory = Callable[[], Awaitable[Any]]
"""An async callable that returns a fresh, opened backend on its own connection."""

# Bound at import, so a test that moves the process's wall clock (`time.time_ns`) does not move it.
_store_time_ns = time.time_ns


class StoreClock:
    """The clock of an in-process store: real time, unaffected by patches to `time.time_ns`.

    The suite's store-clock test moves the test process's wall clock by an hour; a real server's
    clock stays where it is. Give in-process backends (MemoryBackend) this clock so that they stand
    for a store with a clock of its own.
    """

    def now_ms(self) -> int:
        """Real wall time, epoch ms."""
        return _store_time_ns() // 1_000_000


def memory_backend_factory(*, notify: bool = True) -> BackendFactory:
    """A factory of `MemoryBackend`s that share one store (one per call), on the store's own clock."""
    store = MemoryStore(StoreClock())

    async def make() -> MemoryBackend:
        backend = MemoryBackend(store, notify=notify)
        await backend.open()
        return backend

    return make


def memory_claim_backend_factory() -> BackendFactory:
    """A factory of `MemoryClaimBackend`s that share one store (one per call)."""
    store = MemoryStore(StoreClock())

    async def make() -> MemoryClaimBackend:
        backend = MemoryClaimBackend(store)
        await backend.open()
        return backend

    return make


def load_backend(spec: str) -> Callable[[], BackendFactory]:
    """Turn `--anarchon-backend` (a URL, or `module:name`) into a maker of backend factories, one per
    test; raise ValueError, once, naming the spec, when it cannot be loaded.

    - A URL: each factory builds backends with the installed driver for its scheme
      (`anarchon.backend_for_url`) and opens them. `memory://` and `memory-claim://` share one
      store per factory, as a real server would.
    - `module:name`: `name` is called with no arguments and returns the factory, exactly like
      the body of an `anarchon_backend_factory` fixture. The module is imported from the current
      directory too, as `python -m` would.
    """
    if "://" in spec:
        scheme = spec.split("://", 1)[0].lower()
        if scheme == "memory":
            return memory_backend_factory
        if scheme == "memory-claim":
            return memory_claim_backend_factory
        try:
            backend_for_url(spec)  # an unknown scheme or a bad URL fails here, once
        except Exception as exc:
            raise ValueError(f"--anarchon-backend {redact_url(spec)!r}: {exc}") from exc

        def by_url() -> BackendFactory:
            async def make() -> Any:
                backend = backend_for_url(spec)
                await backend.open()
                return backend

            return make

        return by_url
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"--anarchon-backend {redact_url(spec)!r}: give a URL such as 'redis://127.0.0.1:6379/0' "
            "or 'package.module:factory'"
        )
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(
            f"--anarchon-backend {spec!r}: cannot load {attr!r} from {module_name!r} ({exc}); the module "
            "must be importable from the current directory or installed"
        ) from exc
    if not callable(target):
        raise ValueError(f"--anarchon-backend {spec!r}: {attr!r} is not callable")

    def by_factory() -> BackendFactory:
        factory = target()
        if not callable(factory):
            raise ValueError(
                f"--anarchon-backend {spec!r}: {attr}() returned {factory!r}; it must return an async "
                "callable that gives a fresh, opened backend"
            )
        return factory  # type: ignore[no-any-return]

    return by_factory


def resolve_backend(spec: str) -> BackendFactory:
    """A backend factory for `--anarchon-backend` (see `load_backend`)."""
    return load_backend(spec)()


class BackendPool:
    """Backends made by one factory during one test; the kit closes them all at the end."""

    def __init__(self, factory: BackendFactory) -> None:
        self._factory = factory
        self._opened: list[Any] = []

    async def new(self) -> Any:
        """A fresh, opened backend on its own connection."""
        backend = await self._factory()
        self._opened.append(backend)
        return backend

    async def adopt(self, backend: Any) -> Any:
        """Open a backend made elsewhere (a `sibling()`) and close it with the others."""
        self._opened.append(backend)
        await backend.open()
        return backend

    async def many(self, k: int) -> list[Any]:
        """`k` fresh backends, each on its own connection."""
        return [await self.new() for _ in range(k)]

    async def clients(self, k: int) -> list[Any]:
        """The first `k` clients this pool opened, opening more as needed (reused across examples)."""
        while len(self._opened) < k:
            await self.new()
        return self._opened[:k]

    async def aclose(self) -> None:
        """Close every backend this pool opened (errors in one do not stop the others)."""
        opened, self._opened = self._opened, []
        errors: list[BaseException] = []
        for backend in reversed(opened):
            try:
                await backend.close()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


def request(
    namespace: str,
    job: str,
    slot: int,
    owner: str,
    *,
    lease_ms: int = 30_000,
    max_attempts: int = 3,
    overlap: Overlap = Overlap.SKIP,
    fingerprint: str = "",
    max_skew_ms: int = 2_000,
    stale_after: int | None = None,
) -> ClaimRequest:
    """A claim request with the suite's defaults."""
    return ClaimRequest(
        namespace=namespace,
        job=job,
        slot=slot,
        owner=owner,
        lease_ms=lease_ms,
        max_attempts=max_attempts,
        overlap=overlap,
        fingerprint=fingerprint,
        max_skew_ms=max_skew_ms,
        stale_after=stale_after,
    )


def run_coro(runner: asyncio.Runner, coro: Awaitable[Any]) -> Any:
    """Run one coroutine on a test's private loop (for hypothesis tests, which are synchronous)."""

    async def wrap() -> Any:
        return await coro

    return runner.run(wrap())
