"""The kit's container tier without a docker engine: images chosen by configuration, and a clear skip
(or, under ANARCHON_REQUIRE_SERVICES=1, a failure) where no engine answers. With an engine, the same code
runs every driver's suite in `make test-containers` (tests/containers/)."""

from __future__ import annotations

import pytest

from anarchon_conformance._containers import SERVICES, image_for, parse_images

pytest_plugins = ["pytester"]


def test_each_image_comes_from_the_option_then_the_environment_then_the_public_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in SERVICES:
        monkeypatch.delenv(SERVICES[name].image_env, raising=False)
    assert image_for("redis") == "redis:7-alpine"
    assert image_for("valkey") == "valkey/valkey:9-alpine"
    monkeypatch.setenv("ANARCHON_REDIS_IMAGE", "anarchon-ci/redis:local")
    assert image_for("redis") == "anarchon-ci/redis:local"
    assert image_for("postgres") == "postgres:16-alpine"
    images = parse_images(["redis=mirror.local/redis:7.2", "nats=nats:2.10"])
    assert images == {"redis": "mirror.local/redis:7.2", "nats": "nats:2.10"}
    assert image_for("redis", images) == "mirror.local/redis:7.2"
    assert image_for("rabbitmq", images) == "rabbitmq:3-alpine"
    assert {s.image_env for s in SERVICES.values()} == {
        "ANARCHON_REDIS_IMAGE", "ANARCHON_VALKEY_IMAGE", "ANARCHON_POSTGRES_IMAGE", "ANARCHON_RABBITMQ_IMAGE",
        "ANARCHON_NATS_IMAGE",
    }


@pytest.mark.parametrize("spec", ["redis", "redis=", "mongo=mongo:7"])
def test_a_bad_image_option_names_itself_and_the_form(spec: str) -> None:
    names = "nats, postgres, rabbitmq, redis, valkey"
    expected = rf"--anarchon-image {spec!r}: give NAME=IMAGE with NAME one of {names}"
    with pytest.raises(pytest.UsageError, match=expected):
        parse_images([spec])


@pytest.mark.parametrize("required", ["", "1"])
def test_containers_without_a_docker_engine_skip_saying_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, required: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{pytester.path}/no-engine.sock")
    monkeypatch.setenv("ANARCHON_REQUIRE_SERVICES", required)
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_containers="""
        def test_redis(anarchon_service_url):
            anarchon_service_url("redis")

        def test_redis_again(anarchon_service_url):
            anarchon_service_url("redis")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "-rsE", "--anarchon-containers")
    if required:
        result.assert_outcomes(failed=2)
        result.stdout.fnmatch_lines(["*no docker engine is reachable*ANARCHON_REQUIRE_SERVICES=1 forbids*"])
    else:
        result.assert_outcomes(skipped=2)
        result.stdout.fnmatch_lines(["*--anarchon-containers: no docker engine is reachable*"])
