"""Server URLs for drivers' conformance runs: the local services, or throwaway testcontainers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest

from anarchon.testing import require_service

__all__ = ["SERVICES", "Service", "service_url"]


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


SERVICES: dict[str, Service] = {
    "redis": Service(
        "ANARCHON_REDIS_URL", "redis://127.0.0.1:6379/0", 6379, "redis:7-alpine", "redis://{host}:{port}/0"
    ),
    "postgres": Service(
        "ANARCHON_POSTGRES_URL",
        "postgresql://postgres@127.0.0.1:5432/test",
        5432,
        "postgres:16-alpine",
        "postgresql://postgres@{host}:{port}/postgres",
        {"POSTGRES_HOST_AUTH_METHOD": "trust"},
    ),
    "rabbitmq": Service(
        "ANARCHON_RABBITMQ_URL",
        "amqp://guest:guest@127.0.0.1:5672/",
        5672,
        "rabbitmq:3-alpine",
        "amqp://guest:guest@{host}:{port}/",
    ),
    "nats": Service(
        "ANARCHON_NATS_URL",
        "nats://127.0.0.1:4222",
        4222,
        "nats:2-alpine",
        "nats://{host}:{port}",
        command="-js",
    ),
}
"""The services a driver may ask for, by name."""


def service_url(name: str, *, use_containers: bool, started: list[Any]) -> str:
    """The URL of service `name`: local (skipped only when unreachable) or a fresh container."""
    try:
        service = SERVICES[name]
    except KeyError:
        raise ValueError(f"unknown service {name!r}: use one of {', '.join(sorted(SERVICES))}") from None
    if not use_containers:
        url = os.environ.get(service.env, service.default_url)
        require_service(name, url, service.port)
        return url
    return _start_container(name, service, started)


def _start_container(name: str, service: Service, started: list[Any]) -> str:
    try:
        import docker  # type: ignore[import-not-found, import-untyped, unused-ignore]
        from testcontainers.core.container import (  # type: ignore[import-not-found, unused-ignore]
            DockerContainer,
        )
    except ImportError as exc:
        hint = f"testcontainers is not installed ({exc}): `pip install anarchon-conformance[containers]`"
        pytest.skip(f"--anarchon-containers needs a docker engine and testcontainers; {hint}")
    try:
        docker.from_env().ping()
    except Exception as exc:
        pytest.skip(f"--anarchon-containers: no docker engine is reachable ({exc})")
    container = DockerContainer(service.image).with_exposed_ports(service.port)
    for key, value in service.container_env.items():
        container = container.with_env(key, value)
    if service.command:
        container = container.with_command(service.command)
    container.start()
    started.append(container)
    host = container.get_container_host_ip()
    port = container.get_exposed_port(service.port)
    url = service.url_template.format(host=host, port=port)
    require_service(f"{name} (docker container)", url, int(port))
    return url
