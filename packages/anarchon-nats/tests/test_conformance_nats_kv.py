"""The anarchon conformance suite against NatsKVBackend (lease, Key-Value) on the local NATS.

The bucket's TTL is the lease, so the backend declares `fixed_lease_ms` and the suite asks for that
lease everywhere; NatsKVBackend refuses `overlap="allow"` (ConfigError) and declares neither
`inspect` nor `notify`, so those are skipped, saying so.
"""

import uuid
from collections.abc import AsyncIterator, Callable

import nats
import pytest

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_nats import NatsKVBackend

LEASE = "400ms"
"""The bucket's TTL: short, since the suite waits leases out in real time."""


@pytest.fixture
async def anarchon_backend_factory(
    anarchon_service_url: Callable[[str], str],
) -> AsyncIterator[BackendFactory]:
    url = anarchon_service_url("nats")
    bucket = f"conformance_{uuid.uuid4().hex[:10]}"  # one test's buckets, deleted afterwards

    async def make() -> NatsKVBackend:
        backend = NatsKVBackend(url, bucket=bucket, lease=LEASE)  # its own connection
        await backend.open()
        return backend

    yield make
    client = await nats.connect(url)
    try:
        js = client.jetstream()
        for stream in (f"KV_{bucket}", f"KV_{bucket}_state"):
            try:
                await js.delete_stream(stream)
            except nats.js.errors.NotFoundError:
                pass
    finally:
        await client.close()
