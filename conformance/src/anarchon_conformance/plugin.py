"""The pytest plugin (entry point `pytest11`): options, fixtures and the capability tiers.

It adds no tests by itself: only a module that does `from anarchon_conformance.suite import *`
collects the suite. Test modules that do not import the suite see two unused options and a few
fixtures whose names start with `anarchon_`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, NoReturn

import pytest
import pytest_asyncio

from anarchon.backends import Capability

from ._containers import parse_images, service_url
from ._kit import PATIENCE_S, THOROUGH_PATIENCE_S, Kit, past_slot
from ._support import BackendFactory, BackendPool, load_backend

# The suite's modules are imported later, by the test modules that pull the suite in: let pytest
# rewrite their asserts so that a failure shows the values.
pytest.register_assert_rewrite(
    "anarchon_conformance._contract", "anarchon_conformance._races", "anarchon_conformance._model",
    "anarchon_conformance._schedules",
)

__all__ = [
    "anarchon_backend",
    "anarchon_backend_factory",
    "anarchon_claims",
    "anarchon_kit",
    "anarchon_runner",
    "anarchon_namespace",
    "anarchon_pool",
    "anarchon_service_url",
    "pytest_addoption",
    "pytest_configure",
]

DEFAULT_CLAIMS = 2_000
_MAKER = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the kit's command-line options."""
    group = parser.getgroup("anarchon", "anarchon conformance kit")
    group.addoption(
        "--anarchon-backend",
        metavar="URL_OR_module:factory",
        default=None,
        help="backend for the conformance suite: a URL (installed driver) or module:factory",
    )
    group.addoption(
        "--anarchon-claims",
        metavar="N",
        type=int,
        default=DEFAULT_CLAIMS,
        help=f"claims in the exact-count fuzz (default {DEFAULT_CLAIMS}; long runs: 1000000)",
    )
    group.addoption(
        "--anarchon-thorough",
        action="store_true",
        default=False,
        help="wait longer where a rule says 'forever' (an ended record, a claim without a horizon): "
        f"{THOROUGH_PATIENCE_S:g} s instead of {PATIENCE_S:g} s; CI runs should use it",
    )
    group.addoption(
        "--anarchon-containers",
        action="store_true",
        default=False,
        help="start throwaway servers with testcontainers (needs a reachable Docker engine)",
    )
    group.addoption(
        "--anarchon-image",
        metavar="NAME=IMAGE",
        action="append",
        default=[],
        help="the image of service NAME for --anarchon-containers (default: $ANARCHON_<NAME>_IMAGE, "
        "else the public image, e.g. redis:7-alpine); repeatable",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the tier marker, and load `--anarchon-backend` once (a bad one is one usage error)."""
    config.addinivalue_line(
        "markers", "anarchon_tier(capability): conformance test for one declared backend capability"
    )
    spec = config.getoption("--anarchon-backend", None)
    if spec:
        try:
            config.stash[_MAKER] = load_backend(spec)
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None


def _skip_tier(reason: str) -> NoReturn:
    # A capability is known only once the (overridable) factory fixture has built a backend, so the
    # tier is decided at setup, not at collection. This is a skip by design: the backend does not
    # declare the capability. A declared capability is always tested and fails when broken.
    raise pytest.skip.Exception(reason, _use_item_location=True)


@pytest.fixture
def anarchon_backend_factory(request: pytest.FixtureRequest) -> BackendFactory:
    """An async callable giving a fresh, opened backend on its own connection. Override it.

    The default comes from `--anarchon-backend`; without it, a suite test fails and says so.
    """
    maker = request.config.stash.get(_MAKER, None)
    if maker is None:
        pytest.fail(
            "no backend for the anarchon conformance suite: override the `anarchon_backend_factory` "
            "fixture in the module that imports the suite, or pass --anarchon-backend=URL_OR_module:factory",
            pytrace=False,
        )
    try:
        factory: BackendFactory = maker()
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    return factory


@pytest_asyncio.fixture
async def anarchon_pool(anarchon_backend_factory: BackendFactory) -> AsyncIterator[BackendPool]:
    """Every backend a test opens; all are closed when it ends."""
    pool = BackendPool(anarchon_backend_factory)
    try:
        yield pool
    finally:
        await pool.aclose()


@pytest_asyncio.fixture
async def anarchon_backend(anarchon_pool: BackendPool) -> Any:
    """One fresh, opened backend (the first client of a test)."""
    return await anarchon_pool.new()


@pytest.fixture
def anarchon_namespace() -> str:
    """A namespace of its own for each test, so that tests never see each other's records."""
    return f"conf-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def anarchon_claims(request: pytest.FixtureRequest) -> int:
    """The exact-count fuzz's budget of claims (`--anarchon-claims`)."""
    claims = int(request.config.getoption("--anarchon-claims"))
    if claims < 1:
        raise pytest.UsageError(f"--anarchon-claims={claims!r}: give a positive number of claims")
    return claims


@pytest.fixture
def anarchon_capabilities(anarchon_backend: Any) -> frozenset[Capability]:
    """The capabilities the backend under test declares."""
    caps = getattr(anarchon_backend, "capabilities", None)
    if not isinstance(caps, frozenset) or Capability.CLAIM not in caps:
        pytest.fail(
            f"{anarchon_backend!r} declares capabilities={caps!r}; a backend declares a frozenset of "
            "anarchon.Capability that contains Capability.CLAIM",
            pytrace=False,
        )
    return caps


@pytest.fixture
def _anarchon_tier_gate(request: pytest.FixtureRequest) -> None:
    """Skip a suite test whose tier the backend does not declare (used by the suite's classes)."""
    needed = [Capability(cap) for m in request.node.iter_markers("anarchon_tier") for cap in m.args]
    if not needed:
        return
    caps: frozenset[Capability] = request.getfixturevalue("anarchon_capabilities")
    missing = [cap for cap in needed if cap not in caps]
    if missing:
        backend = request.getfixturevalue("anarchon_backend")
        names = ", ".join(repr(str(cap)) for cap in missing)
        _skip_tier(f"{type(backend).__name__} does not declare the {names} capability ({names} tier)")


@pytest.fixture(scope="session")
def anarchon_service_url(request: pytest.FixtureRequest) -> Iterator[Any]:
    """`anarchon_service_url("redis")`: the URL of a server for a driver's conformance run.

    Without `--anarchon-containers`: `$ANARCHON_<NAME>_URL` or the standard local port, skipped
    only when unreachable (failed under `ANARCHON_REQUIRE_SERVICES=1`). With it: a throwaway
    testcontainers server of each service, started at its first request and shared by the session;
    `--anarchon-image NAME=IMAGE` or `$ANARCHON_<NAME>_IMAGE` picks its image.
    """
    use_containers = bool(request.config.getoption("--anarchon-containers"))
    images = parse_images(request.config.getoption("--anarchon-image"))
    started: list[Any] = []

    def get(name: str) -> str:
        return service_url(name, use_containers=use_containers, started=started, images=images)

    try:
        yield get
    finally:
        for container in started:
            container.stop()


@pytest.fixture
def anarchon_kit(
    request: pytest.FixtureRequest, anarchon_backend: Any, anarchon_pool: BackendPool, anarchon_namespace: str
) -> Kit:
    """What a suite test works with: the backend, more clients, its namespace and a past slot."""
    thorough = bool(request.config.getoption("--anarchon-thorough"))
    return Kit(anarchon_backend, anarchon_pool, anarchon_namespace, past_slot(), thorough)


@pytest.fixture
def anarchon_runner(anarchon_backend_factory: BackendFactory) -> Iterator[tuple[asyncio.Runner, BackendPool]]:
    """A private event loop and a pool on it, for the synchronous hypothesis tests."""
    pool = BackendPool(anarchon_backend_factory)
    with asyncio.Runner() as runner:
        try:
            yield runner, pool
        finally:
            runner.run(pool.aclose())
