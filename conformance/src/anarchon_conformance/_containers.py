"""Server URLs for drivers' conformance runs: the local services, or throwaway testcontainers.

With `--anarchon-containers`, each service a test asks for is started once per session in a container
of its image: the public image by default (`redis:7-alpine`, ...), or the one named by
`--anarchon-image NAME=IMAGE` or `$ANARCHON_<NAME>_IMAGE`. Containers carry the label
`anarchon-conformance` and are removed when the session ends.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pytest

from anarchon.testing import require_service

__all__ = [
    "LABEL",
    "SERVICES",
    "RunningService",
    "Service",
    "image_for",
    "parse_images",
    "service_url",
    "start_container",
]

LABEL = "anarchon-conformance"
"""The label on every container the kit starts (`docker rm -f $(docker ps -aq -f label=…)` cleans up)."""

_READY_S = 90.0  # RabbitMQ takes several seconds to boot; a slow CI machine more


@dataclass(frozen=True, slots=True)
class Service:
    """A store the drivers use: where it runs locally, and how to start one in a container."""

    env: str
    default_url: str
    port: int
    image: str
    url_template: str
    container_env: dict[str, str] = field(default_factory=dict)
    command: str | None = None
    probe: bytes = b""
    """Sent once connected (nothing: the server speaks first)."""
    ready: tuple[bytes, ...] = ()
    """The server answers: its first reply starts with one of these."""

    @property
    def image_env(self) -> str:
        """The environment variable that names another image, e.g. `ANARCHON_REDIS_IMAGE`."""
        return self.env.removesuffix("_URL") + "_IMAGE"


_REDIS_PING = (b"PING\r\n", (b"+PONG",))
_PG_PARAMS = b"user\x00postgres\x00database\x00postgres\x00\x00"
_PG_STARTUP = (8 + len(_PG_PARAMS)).to_bytes(4, "big") + (196608).to_bytes(4, "big") + _PG_PARAMS

SERVICES: dict[str, Service] = {
    "redis": Service(
        "ANARCHON_REDIS_URL", "redis://127.0.0.1:6379/0", 6379, "redis:7-alpine", "redis://{host}:{port}/0",
        probe=_REDIS_PING[0], ready=_REDIS_PING[1],
    ),
    "valkey": Service(
        "ANARCHON_VALKEY_URL", "redis://127.0.0.1:6379/0", 6379, "valkey/valkey:9-alpine",
        "redis://{host}:{port}/0", probe=_REDIS_PING[0], ready=_REDIS_PING[1],
    ),
    "postgres": Service(
        "ANARCHON_POSTGRES_URL",
        "postgresql://postgres@127.0.0.1:5432/test",
        5432,
        "postgres:16-alpine",
        "postgresql://postgres@{host}:{port}/postgres",
        {"POSTGRES_HOST_AUTH_METHOD": "trust"},
        # A startup message (protocol 3.0, user and database postgres): a server still starting up
        # answers it with an error (E), one that takes connections with an authentication request (R).
        # (An SSLRequest is answered S or N while it still starts up.)
        probe=_PG_STARTUP,
        ready=(b"R",),
    ),
    "rabbitmq": Service(
        "ANARCHON_RABBITMQ_URL",
        "amqp://guest:guest@127.0.0.1:5672/",
        5672,
        "rabbitmq:3-alpine",
        "amqp://guest:guest@{host}:{port}/",
        probe=b"AMQP\x00\x00\x09\x01",
        ready=(b"\x01",),  # a method frame: Connection.Start
    ),
    "nats": Service(
        "ANARCHON_NATS_URL",
        "nats://127.0.0.1:4222",
        4222,
        "nats:2-alpine",
        "nats://{host}:{port}",
        command="-js",
        ready=(b"INFO ",),
    ),
}
"""The services a driver may ask for, by name."""


def _service(name: str) -> Service:
    try:
        return SERVICES[name]
    except KeyError:
        raise ValueError(f"unknown service {name!r}: use one of {', '.join(sorted(SERVICES))}") from None


def parse_images(specs: Sequence[str]) -> dict[str, str]:
    """`--anarchon-image NAME=IMAGE` options as {name: image}."""
    images: dict[str, str] = {}
    for spec in specs:
        name, sep, image = spec.partition("=")
        if not sep or not image or name not in SERVICES:
            raise pytest.UsageError(
                f"--anarchon-image {spec!r}: give NAME=IMAGE with NAME one of {', '.join(sorted(SERVICES))}, "
                "e.g. --anarchon-image redis=redis:7.2"
            )
        images[name] = image
    return images


def image_for(name: str, images: Mapping[str, str] | None = None) -> str:
    """The image for service `name`: from `images` (`--anarchon-image`), `$ANARCHON_<NAME>_IMAGE`,
    or the public one."""
    service = _service(name)
    return (images or {}).get(name) or os.environ.get(service.image_env) or service.image


def _unavailable(reason: str) -> NoReturn:
    """Skip, saying why; fail instead under ANARCHON_REQUIRE_SERVICES=1 (as in CI)."""
    if os.environ.get("ANARCHON_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; ANARCHON_REQUIRE_SERVICES=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


class RunningService:
    """One service in a container of the kit's: its URL, and stop/start for fault tests."""

    def __init__(self, name: str, image: str, container: Any, url: str, host: str, port: int) -> None:
        self.name = name
        self.image = image
        self.container = container
        self.url = url
        self.host = host
        self.port = port

    def wait_ready(self, timeout: float = _READY_S) -> None:
        """Wait until the server answers its protocol's greeting (a published port accepts
        connections before the server inside listens)."""
        service = SERVICES[self.name]
        deadline = time.monotonic() + timeout
        while True:
            if _answers(self.host, self.port, service):
                return
            wrapped = self.container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                raise RuntimeError(f"the {self.image} container exited: {_log_tail(wrapped)}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {self.image} container did not answer on {self.host}:{self.port} within "
                    f"{timeout:g} s: {_log_tail(wrapped)}"
                )
            time.sleep(0.1)

    def stop_server(self) -> None:
        """Stop the container (SIGTERM, then SIGKILL after 10 s); its data stays in the container."""
        self.container.get_wrapped_container().stop(timeout=10)

    def start_server(self) -> None:
        """Start the stopped container again, on the same host port, and wait until it answers."""
        self.container.get_wrapped_container().start()
        self.wait_ready()

    def stop(self) -> None:
        """Remove the container."""
        self.container.stop()


def _answers(host: str, port: int, service: Service) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.settimeout(2)
            if service.probe:
                sock.sendall(service.probe)
            reply = sock.recv(64)
    except OSError:
        return False
    return reply.startswith(service.ready)


def _log_tail(wrapped: Any) -> str:
    try:
        text = wrapped.logs(tail=15).decode(errors="replace").strip()
    except Exception as exc:
        return f"(no logs: {exc})"
    return " | ".join(text.splitlines()) or "(no output)"


def start_container(
    name: str, images: Mapping[str, str] | None = None, *, host_port: int | None = None,
    command: Sequence[str] | None = None,
) -> RunningService:
    """Start service `name` in a container of its image and wait until it answers.

    `host_port` publishes it on that port (a fixed port survives a stop and start; without it,
    docker picks a free one); `command` replaces the service's usual arguments. Skips (fails under
    ANARCHON_REQUIRE_SERVICES=1) when no docker engine is reachable; an image that is neither
    present nor pullable ends the session with one message.
    """
    service = _service(name)
    image = image_for(name, images)
    try:
        import docker  # type: ignore[import-not-found, import-untyped, unused-ignore]
        from testcontainers.core.container import (  # type: ignore[import-not-found, unused-ignore]
            DockerContainer,
        )
    except ImportError as exc:
        hint = f"testcontainers is not installed ({exc}): `pip install anarchon-conformance[containers]`"
        _unavailable(f"--anarchon-containers needs a docker engine and testcontainers; {hint}")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        _unavailable(f"--anarchon-containers: no docker engine is reachable ({exc})")
    try:
        _ensure_image(client, docker, name, image)
    finally:
        client.close()
    container = DockerContainer(image).with_kwargs(labels={LABEL: name})
    container = container.with_bind_ports(service.port, host_port) if host_port else (
        container.with_exposed_ports(service.port))
    for key, value in service.container_env.items():
        container = container.with_env(key, value)
    arguments = list(command) if command else service.command
    if arguments:
        container = container.with_command(arguments)
    try:
        container.start()
    except Exception as exc:
        container.stop()
        ryuk = " (set TESTCONTAINERS_RYUK_DISABLED=true where the ryuk image is out of reach)"
        _unavailable(f"could not start a container of {image!r} for {name}: {exc}"
                     f"{ryuk if 'ryuk' in str(exc).lower() else ''}")
    host = container.get_container_host_ip()
    host = "127.0.0.1" if host == "localhost" else host
    port = int(container.get_exposed_port(service.port))
    running = RunningService(name, image, container, service.url_template.format(host=host, port=port),
                             host, port)
    try:
        running.wait_ready()
    except RuntimeError as exc:
        running.stop()
        pytest.fail(str(exc), pytrace=False)
    return running


def _ensure_image(client: Any, docker: Any, name: str, image: str) -> None:
    """Pull `image` when the engine lacks it; when that fails too, end the session saying what to do."""
    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(image)
        return
    except Exception as exc:
        reason = str(exc)
    env = SERVICES[name].image_env
    pytest.exit(
        f"--anarchon-containers: the image {image!r} for {name} is not on the docker engine and could not "
        f"be pulled ({reason}). Pull or build it, or name another with {env}=IMAGE or "
        f"--anarchon-image {name}=IMAGE (in the anarchon repository, `make images` builds local images "
        "of every service and `make test-containers` uses them)",
        returncode=pytest.ExitCode.USAGE_ERROR,
    )


class _Failed:
    """A service whose container could not be had: later requests get the same answer at once."""

    def __init__(self, name: str, outcome: BaseException) -> None:
        self.name = name
        self.failed = isinstance(outcome, pytest.fail.Exception)
        self.reason = str(getattr(outcome, "msg", outcome))

    def again(self) -> NoReturn:
        if self.failed:
            pytest.fail(self.reason, pytrace=False)
        pytest.skip(self.reason)

    def stop(self) -> None:
        """Nothing to remove."""


def service_url(
    name: str, *, use_containers: bool, started: list[Any], images: Mapping[str, str] | None = None
) -> str:
    """The URL of service `name`: local (skipped only when unreachable) or a container.

    A container is started at the first request for `name` and shared by the session's later ones
    (as is a failure to start it); `started` holds them, for removal at the end of the session.
    """
    service = _service(name)
    if not use_containers:
        url = os.environ.get(service.env, service.default_url)
        require_service(name, url, service.port)
        return url
    for known in started:
        if isinstance(known, _Failed) and known.name == name:
            known.again()
        if isinstance(known, RunningService) and known.name == name:
            return known.url
    try:
        running = start_container(name, images)
    except (pytest.skip.Exception, pytest.fail.Exception) as exc:
        started.append(_Failed(name, exc))
        raise
    started.append(running)
    return running.url
