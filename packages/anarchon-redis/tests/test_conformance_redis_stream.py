"""The anarchon conformance suite against RedisStreamBackend (claim-only), once per runnable strategy.

`idmp` needs Redis >= 8.6 (XADD … IDMP); it runs where the server has it and is skipped, saying so,
elsewhere.
"""

from collections.abc import Callable

import pytest
import redis

from anarchon_conformance import BackendFactory
from anarchon_conformance.suite import *  # noqa: F403
from anarchon_redis import RedisStreamBackend, Strategy


def _redis_version(url: str) -> tuple[int, ...]:
    with redis.Redis.from_url(url, socket_connect_timeout=5) as client:
        info = client.info("server")
    return tuple(int(p) for p in str(info["redis_version"]).split(".")[:2])


@pytest.fixture(params=["stream-id", "script", "idmp"])
def anarchon_backend_factory(
    request: pytest.FixtureRequest, anarchon_service_url: Callable[[str], str]
) -> BackendFactory:
    url = anarchon_service_url("redis")
    strategy: Strategy = request.param
    if strategy == "idmp" and (version := _redis_version(url)) < (8, 6):
        pytest.skip(f"strategy='idmp' needs Redis >= 8.6; the server at {url} runs {version}")

    async def make() -> RedisStreamBackend:
        backend = RedisStreamBackend(url, strategy=strategy, prefix="anarchon-conformance-stream")
        await backend.open()
        return backend

    return make
