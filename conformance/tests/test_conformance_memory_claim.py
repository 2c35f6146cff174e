"""The conformance suite against MemoryClaimBackend: the claim and claim_many tiers; the rest skip."""

import pytest

from anarchon_conformance import BackendFactory, memory_claim_backend_factory
from anarchon_conformance.suite import *  # noqa: F403


@pytest.fixture
def anarchon_backend_factory() -> BackendFactory:
    return memory_claim_backend_factory()
