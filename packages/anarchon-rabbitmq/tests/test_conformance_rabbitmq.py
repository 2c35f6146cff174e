"""The anarchon conformance suite against RabbitMQBackend (claim-only) on the local RabbitMQ."""

from collections.abc import Callable

import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_rabbitmq import RabbitMQBackend


@pytest.fixture
def anarchon_backend_factory(anarchon_service_url: Callable[[str], str]) -> BackendFactory:
    url = anarchon_service_url("rabbitmq")

    async def make() -> RabbitMQBackend:
        # Its own connection. Gate queues expire a minute after their last claim.
        backend = RabbitMQBackend(url, prefix="anarchon-conformance", horizon="1m")
        await backend.open()
        return backend

    return make
