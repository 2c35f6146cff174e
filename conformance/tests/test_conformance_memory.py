"""The conformance suite against the reference model, MemoryBackend (every tier)."""

import pytest

from anarchon_conformance import BackendFactory, memory_backend_factory
from anarchon_conformance.suite import *  # noqa: F403


@pytest.fixture
def anarchon_backend_factory() -> BackendFactory:
    return memory_backend_factory()
