"""What both NATS backends share: connecting, names, and the one map from nats-py errors to ours."""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any, NoReturn

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from anarchon import BackendError, BackendUnavailable
from anarchon.backends import redact_url

__all__ = ["Connection", "encode_token", "raise_backend_error", "WRONG_LAST_SEQUENCE"]

WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a failed `Nats-Expected-Last-Subject-Sequence` check."""

_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def encode_token(value: str) -> str:
    """`value` when it is 1-64 of [A-Za-z0-9_-]; else '=' and 32 hex digits of its SHA-256.

    The result is a valid NATS subject token and Key-Value key part, and '=' never occurs in a
    plain token, so a hashed name never equals a plain one.
    """
    if _PLAIN.fullmatch(value):
        return value
    return "=" + hashlib.sha256(value.encode()).hexdigest()[:32]


def check_name(kind: str, value: str) -> str:
    """Return `value` if it is a valid stream, bucket or subject-prefix name; raise ValueError otherwise."""
    if not _NAME.fullmatch(value):
        raise ValueError(f"invalid {kind} {value!r}: use 1-64 of letters, digits, '_' and '-'")
    return value


def describe(exc: BaseException) -> str:
    """A short text for an exception, for messages."""
    if isinstance(exc, nats.js.errors.APIError):
        return f"{type(exc).__name__}: {exc.description} (err_code={exc.err_code})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def raise_backend_error(url: str, exc: BaseException, doing: str) -> NoReturn:
    """The one place that maps nats-py errors to anarchon's."""
    if isinstance(exc, BackendError):
        raise exc
    if isinstance(exc, (nats.errors.NoServersError, nats.errors.ConnectionClosedError,
                        nats.errors.TimeoutError, nats.errors.StaleConnectionError,
                        nats.errors.ConnectionReconnectingError, nats.errors.NoRespondersError,
                        nats.js.errors.ServiceUnavailableError, ConnectionError, OSError, TimeoutError)):
        raise BackendUnavailable(f"cannot {doing} on NATS at {url}: {describe(exc)}") from exc
    raise BackendError(f"cannot {doing} on NATS at {url}: {describe(exc)}") from exc


class Connection:
    """A nats-py client this backend either opened (and closes) or was given (and leaves open)."""

    def __init__(self, servers_or_client: str | list[str] | Client, schemes: tuple[str, ...]) -> None:
        if isinstance(servers_or_client, Client):
            self.client: Client | None = servers_or_client
            self.servers: list[str] = []
            self.owned = False
        else:
            servers = [servers_or_client] if isinstance(servers_or_client, str) else list(servers_or_client)
            if not servers:
                raise ValueError("no NATS servers given: pass e.g. 'nats://127.0.0.1:4222'")
            for server in servers:
                scheme = server.split("://", 1)[0].lower() if "://" in server else ""
                if scheme not in schemes:
                    raise ValueError(
                        f"invalid NATS URL {redact_url(server)!r}: use "
                        + " or ".join(f"{s}://host:4222" for s in schemes)
                    )
            self.client = None
            self.servers = servers
            self.owned = True

    @property
    def url(self) -> str:
        """The server(s), passwords redacted."""
        if self.servers:
            return ",".join(redact_url(s) for s in self.servers)
        client = self.client
        server = getattr(client, "connected_url", None)
        return redact_url(server.geturl()) if server is not None else "nats://<client>"

    async def open(self, connect_timeout: float) -> Client:
        """Connect (the client reconnects by itself afterwards), or use the given client."""
        if self.client is not None and not self.owned:
            return self.client
        errors: list[Exception] = []

        async def remember(exc: Exception) -> None:
            # nats-py reports connection errors here and keeps retrying (it reconnects forever).
            errors[:] = [exc]

        try:
            async with asyncio.timeout(connect_timeout):
                self.client = await nats.connect(
                    self.servers, connect_timeout=min(2.0, connect_timeout), allow_reconnect=True,
                    max_reconnect_attempts=-1, reconnect_time_wait=0.25,
                    error_cb=remember, disconnected_cb=_noop, reconnected_cb=_noop, closed_cb=_noop,
                )
        except Exception as exc:
            why = describe(errors[0]) if errors and isinstance(exc, TimeoutError) else describe(exc)
            raise BackendUnavailable(
                f"cannot connect to NATS at {self.url} within {connect_timeout:g} s: {why}; is nats-server "
                "running (with JetStream: `nats-server -js`) and the URL right?"
            ) from exc
        return self.client

    async def close(self) -> None:
        """Close the client if this backend opened it."""
        client = self.client
        if client is not None and self.owned:
            self.client = None
            try:
                await client.close()
            except Exception:
                pass


async def _noop(*_: Any) -> None:
    """A callback that does nothing."""
