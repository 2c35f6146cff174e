"""The anarchon conformance suite against NatsBackend (claim-only, JetStream dedupe) on the local NATS."""

from collections.abc import Callable

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_nats import NatsBackend


@pytest.fixture
def anarchon_backend_factory(anarchon_service_url: Callable[[str], str]) -> BackendFactory:
    url = anarchon_service_url("nats")

    async def make() -> NatsBackend:
        # Its own connection; a stream of its own, whose messages age out with the window.
        backend = NatsBackend(
            url, stream="ANARCHON_CONFORMANCE", prefix="anarchon_conformance", duplicate_window="2m"
        )
        await backend.open()
        return backend

    return make
