"""The `anarchon` entry point: registers `NatsBackend` (nats://, tls://) and `NatsKVBackend` (nats-kv://)."""

from __future__ import annotations

from typing import Any

from anarchon.hookspecs import hookimpl

from ._kv import NatsKVBackend
from ._stream import NatsBackend

__all__ = ["anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this plugin provides."""
    return [NatsBackend, NatsKVBackend]
