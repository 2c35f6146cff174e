"""Gate queue names: readable for ordinary job names, hashed for odd ones, always valid."""

from __future__ import annotations

import hashlib
import re

__all__ = ["check_prefix", "encode_token", "queue_name"]

_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def encode_token(value: str) -> str:
    """`value` when it is 1-64 of [A-Za-z0-9_-]; else ':' and 32 hex digits of its SHA-256.

    ':' cannot occur in a plain token (and is valid in queue names and NATS subjects), so a hashed
    name never equals a plain one.
    """
    if _PLAIN.fullmatch(value):
        return value
    return ":" + hashlib.sha256(value.encode()).hexdigest()[:32]


def check_prefix(prefix: str) -> str:
    """Return `prefix` when it can start a queue name; raise ValueError otherwise."""
    if not _PLAIN.fullmatch(prefix) or prefix.lower().startswith("amq"):
        raise ValueError(
            f"invalid prefix {prefix!r}: use 1-64 of letters, digits, '_' and '-', not starting with "
            "'amq' (RabbitMQ reserves 'amq.' names), e.g. prefix='anarchon'"
        )
    return prefix


def queue_name(prefix: str, namespace: str, job: str, slot: int) -> str:
    """`<prefix>.<namespace>.<job>.<slot>`, each part encoded: at most 64+1+65+1+65+1+20 bytes < 255."""
    return f"{prefix}.{encode_token(namespace)}.{encode_token(job)}.{slot}"
