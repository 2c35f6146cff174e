"""The `anarchon` entry point: registers `NatsBackend` (nats://, tls://) and `NatsKVBackend` (nats-kv://).

Every process that builds a Scheduler loads this module, so it imports no backend (nor nats-py):
the hooks do, when asked.
"""

from __future__ import annotations

from typing import Any

from anarchon.hookspecs import hookimpl

__all__ = ["anarchon_backend_schemes", "anarchon_backends"]


@hookimpl
def anarchon_backends() -> list[type[Any]]:
    """The backends this plugin provides."""
    from ._kv import NatsKVBackend
    from ._stream import NatsBackend

    return [NatsBackend, NatsKVBackend]


@hookimpl
def anarchon_backend_schemes() -> dict[str, str]:
    """The URL schemes this plugin handles, each with the class that handles it."""
    return {"nats": "anarchon_nats:NatsBackend", "tls": "anarchon_nats:NatsBackend",
            "nats-kv": "anarchon_nats:NatsKVBackend", "nats-kv+tls": "anarchon_nats:NatsKVBackend"}
