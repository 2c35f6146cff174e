"""The `anarchon` entry point: registers `RabbitMQBackend` for amqp:// and amqps:// URLs.

Every process that builds a Scheduler loads this module, so it imports no backend (nor aio-pika):
the hooks do, when asked.
"""

from __future__ import annotations

from typing import Any

from anarchon.hookspecs import hookimpl

__all__ = ["anarchon_backend_schemes", "anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this plugin provides."""
    from ._backend import RabbitMQBackend

    return [RabbitMQBackend]


@hookimpl
def anarchon_backend_schemes() -> dict[str, str]:
    """The URL schemes this plugin handles, each with the class that handles it."""
    return {"amqp": "anarchon_rabbitmq:RabbitMQBackend", "amqps": "anarchon_rabbitmq:RabbitMQBackend"}
