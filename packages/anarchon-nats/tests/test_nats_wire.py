"""The drivers' own decoding of JetStream's replies agrees with nats-py's (no server needed)."""

from __future__ import annotations

from datetime import datetime

import pytest
from nats.js.api import RawStreamMsg

from anarchon_nats._common import _epoch_ms, _headers


def nats_py_ms(text: str) -> int:
    """A stored message's time as nats-py reads it (its public `RawStreamMsg`), in epoch ms."""
    time: datetime | None = RawStreamMsg.from_response({"time": text}).time
    assert time is not None
    return round(time.timestamp() * 1000)


@pytest.mark.parametrize("text", [
    "2026-12-01T22:09:30.123456789Z", "2026-12-01T22:09:30.1234565Z", "2026-12-01T22:09:30.9999996Z",
    "2026-12-01T22:09:30.5Z", "2026-12-01T22:09:30Z", "1970-01-01T00:00:00.000001Z",
    "2026-12-01T22:09:30.123456+00:00", "2026-12-01T22:09:30.123456789+02:00", "2026-12-01T22:09:30-05:30",
    "1970-01-01T00:00:00.9999996+00:00",
])
def test_store_time_is_read_as_nats_py_reads_it(text: str) -> None:
    assert _epoch_ms(text) == nats_py_ms(text)


def test_a_time_without_a_zone_is_refused_with_what_was_expected() -> None:
    with pytest.raises(ValueError, match=r"invalid RFC 3339 time '2026-12-01T22:09:30.123456': expected"):
        _epoch_ms("2026-12-01T22:09:30.123456")


def test_no_store_time_is_zero() -> None:
    assert _epoch_ms(None) == 0
    assert _epoch_ms("") == 0


def test_headers_are_parsed() -> None:
    raw = b"NATS/1.0\r\nKV-Operation: DEL\r\nNats-Msg-Id: a:b:1\r\n\r\n"
    assert _headers(raw) == {"KV-Operation": "DEL", "Nats-Msg-Id": "a:b:1"}
    assert _headers(b"NATS/1.0\r\n\r\n") == {}
