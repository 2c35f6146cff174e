"""The kit's container tier on a real docker engine (`make test-containers`): images chosen by
configuration, two server versions side by side, and one clear message for an image that is missing."""

from __future__ import annotations

import socket

import pytest

from anarchon_conformance._containers import image_for, parse_images, start_container

pytest_plugins = ["pytester"]


def _info_server(url: str) -> dict[str, str]:
    host, port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"INFO server\r\n")
        data = b""
        while not data.endswith(b"\r\n") or data.count(b"\r\n") < 3:
            data += sock.recv(65536)
    lines = data.decode().split("\r\n")[1:]
    return dict(line.split(":", 1) for line in lines if ":" in line)


def test_redis_and_valkey_side_by_side_each_from_its_configured_image(request: pytest.FixtureRequest) -> None:
    images = parse_images(request.config.getoption("--anarchon-image"))
    redis = start_container("redis", images)
    try:
        valkey = start_container("valkey", images)
        try:
            assert (redis.image, valkey.image) == (image_for("redis", images), image_for("valkey", images))
            on_redis, on_valkey = _info_server(redis.url), _info_server(valkey.url)
        finally:
            valkey.stop()
    finally:
        redis.stop()
    assert on_redis.get("server_name", "redis") == "redis"
    assert on_valkey["server_name"] == "valkey"
    print(f"\nredis image {redis.image}: Redis {on_redis['redis_version']}; "
          f"valkey image {valkey.image}: Valkey {on_valkey['valkey_version']}")


def test_a_missing_image_stops_the_run_with_one_message_naming_make_images(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_missing="""
        def test_one(anarchon_service_url):
            anarchon_service_url("redis")

        def test_two(anarchon_service_url):
            anarchon_service_url("redis")
        """
    )
    image = "anarchon-ci/no-such-image:never"
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "--anarchon-containers",
                                f"--anarchon-image=redis={image}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stdout.str()
    assert text.count(f"the image {image!r} for redis is not on the docker engine") == 1
    assert "ANARCHON_REDIS_IMAGE=IMAGE or --anarchon-image redis=IMAGE" in text
    assert "`make images`" in text
    assert "passed" not in text and "failed" not in text
