"""The `anarchon` entry point: registers `RabbitMQBackend` for amqp:// and amqps:// URLs."""

from __future__ import annotations

from typing import Any

from anarchon.hookspecs import hookimpl

from ._backend import RabbitMQBackend

__all__ = ["anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this plugin provides."""
    return [RabbitMQBackend]
