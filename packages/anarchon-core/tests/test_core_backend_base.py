"""BackendBase's plumbing: a client owned or borrowed, open/close idempotent, sibling, one error hook."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from anarchon import BackendError, BackendUnavailable
from anarchon.backends import BackendBase, ClaimOutcome, ClaimRequest, ClaimResult


class Client:
    """A client library's connection object."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.closed = 0


class Example(BackendBase):
    """A backend on `Client`: everything but the claim comes from BackendBase."""

    connects = 0

    def __init__(self, url_or_client: str | Client, *, prefix: str = "p") -> None:
        self.prefix = prefix
        self._use(url_or_client, Client, {"prefix": prefix})

    async def _connect(self) -> Client:
        Example.connects += 1
        if "down" in self._target:
            raise ConnectionRefusedError("refused")
        return Client(self._target)

    async def _disconnect(self, client: Client) -> None:
        client.closed += 1

    def _translate(self, exc: Exception, doing: str) -> BackendError | None:
        if isinstance(exc, ConnectionError):
            return BackendUnavailable(f"{doing} on {self.url}: {exc}")
        return None

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        with self._errors("claim"):
            assert isinstance(self.client, Client)
            return [ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot) for r in requests]


async def test_an_owned_client_is_made_once_and_closed_once() -> None:
    Example.connects = 0
    backend = Example("ex://:secret@host/0")
    with pytest.raises(BackendUnavailable, match="not open"):
        backend.client  # noqa: B018
    await backend.open()
    await backend.open()
    client: Any = backend.client
    assert Example.connects == 1
    assert (await backend.claim(ClaimRequest("ns", "j", 0, "a"))).outcome is ClaimOutcome.TAKEN
    await backend.close()
    await backend.close()
    assert client.closed == 1
    assert "secret" not in backend.url and "secret" not in repr(backend)


async def test_a_borrowed_client_is_used_and_left_open() -> None:
    given = Client("ex://host/0")
    backend = Example(given)
    await backend.open()
    assert backend.client is given
    await backend.close()
    assert given.closed == 0
    assert backend.client is given, "a client passed in stays the backend's"


def test_sibling_has_the_same_target_and_settings_unless_the_client_was_given() -> None:
    backend = Example("ex://host/0", prefix="q")
    sibling = backend.sibling()
    assert isinstance(sibling, Example) and sibling is not backend
    assert (sibling._target, sibling.prefix) == ("ex://host/0", "q")
    assert Example(Client("ex://host/0")).sibling() is None


async def test_the_translate_hook_maps_the_client_library_errors() -> None:
    backend = Example("ex://down/0")
    with pytest.raises(BackendUnavailable, match="open on ex://down/0: refused"):
        await backend.open()
    with pytest.raises(BackendUnavailable, match="not open"):
        await backend.claim(ClaimRequest("ns", "j", 0, "a"))
