"""What both NATS backends share: connecting, names, and the one map from nats-py errors to ours."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import logging
import re
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, TypeVar

import nats
import nats.errors
import nats.js.api
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from anarchon import BackendError, BackendUnavailable, parse_duration
from anarchon.backends import (
    BackendBase,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    WinsCallback,
    deliver_wins,
    redact_url,
    wins_text,
)

__all__ = ["NatsConnection", "Stored", "WRONG_LAST_SEQUENCE", "as_ack", "as_stored", "check_name",
           "check_replicas", "describe", "encode_token", "get_request", "per_key", "publish_request",
           "request_all", "request_joined", "split_servers", "stream_get", "stream_get_many",
           "stream_publish", "stream_publish_many"]

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("anarchon.nats")

_WINS_CHUNK = 60_000
"""The most characters of wins in one announcement (NATS's default largest message is 1 MB)."""

WRONG_LAST_SEQUENCE = (10071, 10164)
"""JetStream's error codes for a failed `Nats-Expected-Last-Subject-Sequence` check (a replicated
stream answers with the second)."""

_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
OPEN_TRIES = 3
"""How many times opening a stream or bucket calls JetStream before a timeout fails `open()`."""
_UNAVAILABLE = (nats.errors.NoServersError, nats.errors.ConnectionClosedError, nats.errors.TimeoutError,
                nats.errors.StaleConnectionError, nats.errors.ConnectionReconnectingError,
                nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError, ConnectionError,
                OSError, TimeoutError)


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


def split_servers(url: str) -> list[str]:
    """`nats://a:4222,b:4222` as one URL per server, each with the first one's scheme and user."""
    scheme, _, rest = url.partition("://")
    auth, at, hosts = rest.rpartition("@")
    return [f"{scheme}://{auth}{at}{host.strip()}" for host in hosts.split(",") if host.strip()]


def check_replicas(value: Any) -> int:
    """A stream's or bucket's replica count: 1 to 5."""
    try:
        replicas = int(value)
    except (TypeError, ValueError):
        replicas = 0
    if not 1 <= replicas <= 5:
        raise ValueError(f"invalid replicas {value!r}: use 1 to 5 (3 on a three-node cluster)")
    return replicas


async def per_key(items: Sequence[T], key: Callable[[T], Hashable],
                  call: Callable[[T], Awaitable[R]]) -> list[R]:
    """`call` on each item, results in order: items with the same key one after another (in the
    order given), items with different keys concurrently.

    Every call has ended when this returns; if any failed, the first failure is raised (the batch
    is retried as a whole, as a batch sent in one request would be).
    """
    groups: dict[Hashable, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(key(item), []).append(i)
    results: dict[int, R] = {}

    async def run(indexes: list[int]) -> None:
        for i in indexes:
            results[i] = await call(items[i])

    outcomes = await asyncio.gather(*(run(indexes) for indexes in groups.values()), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return [results[i] for i in range(len(items))]


@dataclass(frozen=True, slots=True)
class Stored:
    """A message read back from a stream: its payload, sequence, store time (epoch ms) and headers."""

    data: bytes
    seq: int
    time_ms: int
    headers: dict[str, str]


class _Batch:
    """The replies of one batch of requests, and the future set once all have come."""

    __slots__ = ("done", "left", "replies")

    def __init__(self, size: int, done: asyncio.Future[None]) -> None:
        self.replies: list[Msg | None] = [None] * size
        self.left = size
        self.done = done


def _expire(done: asyncio.Future[None]) -> None:
    """End a batch's wait (its timeout)."""
    if not done.done():
        done.set_result(None)


class _Replies:
    """One client's reply subscription (`<inbox>.*`): each request's reply lands in its batch.

    It keeps no reference to its client (the client's subscription keeps one to it), so a client
    that is dropped leaves nothing behind in `_REPLIES`.
    """

    def __init__(self, client: Client) -> None:
        self._prefix = client.new_inbox() + "."
        self._cut = len(self._prefix)
        self._next = 0
        self._waiting: dict[str, tuple[_Batch, int]] = {}
        self._subscribed: asyncio.Future[None] | None = None

    async def ready(self, client: Client) -> None:
        """Subscribe once (the client subscribes again by itself after a reconnect)."""
        if self._subscribed is None:
            self._subscribed = asyncio.get_running_loop().create_future()
            try:
                await client.subscribe(self._prefix + "*", cb=self._answer)
            except BaseException as exc:
                self._subscribed.set_exception(exc)
                self._subscribed.exception()  # retrieved: a later request sees it
                self._subscribed = None
                raise
            self._subscribed.set_result(None)
        elif not self._subscribed.done():
            await asyncio.shield(self._subscribed)

    async def _answer(self, msg: Msg) -> None:
        waiting = self._waiting.pop(msg.subject[self._cut:], None)
        if waiting is None:
            return
        batch, i = waiting
        batch.replies[i] = msg
        batch.left -= 1
        if not batch.left and not batch.done.done():
            batch.done.set_result(None)

    async def send(self, client: Client, requests: Sequence[tuple[str, bytes, dict[str, str] | None]],
                   within: float) -> list[Msg | Exception]:
        """Publish every request, then wait once, up to `within` s, for all their replies."""
        loop = asyncio.get_running_loop()
        batch = _Batch(len(requests), loop.create_future())
        failed: dict[int, Exception] = {}
        tokens: list[str] = []
        waiting = self._waiting
        prefix = self._prefix
        try:
            for i, (subject, payload, headers) in enumerate(requests):
                self._next += 1
                token = str(self._next)
                waiting[token] = (batch, i)
                tokens.append(token)
                try:
                    await client.publish(subject, payload, reply=prefix + token, headers=headers)
                except Exception as exc:
                    waiting.pop(token, None)
                    failed[i] = exc
                    batch.left -= 1
            if batch.left:
                timer = loop.call_later(within, _expire, batch.done)
                try:
                    await batch.done
                finally:
                    timer.cancel()
        finally:
            for token in tokens:
                waiting.pop(token, None)
        out: list[Msg | Exception] = []
        for i, msg in enumerate(batch.replies):
            if msg is None:
                out.append(failed.get(i) or nats.errors.TimeoutError())
            elif msg.headers and msg.headers.get(nats.js.api.Header.STATUS) == "503":
                out.append(nats.errors.NoRespondersError())
            else:
                out.append(msg)
        return out


_REPLIES: weakref.WeakKeyDictionary[Client, _Replies] = weakref.WeakKeyDictionary()


async def request_all(client: Client, requests: Sequence[tuple[str, bytes, dict[str, str] | None]],
                      within: float) -> list[Msg | Exception]:
    """Send every request (subject, payload, headers) at once, then wait up to `within` s for all the
    replies: per request its reply, or the error `client.request` would raise for it.

    One flush carries the whole batch and one timer covers it, instead of a task, a timer and a
    wake-up per request.
    """
    replies = _REPLIES.get(client)
    if replies is None:
        replies = _REPLIES[client] = _Replies(client)
    await replies.ready(client)
    return await replies.send(client, requests, within)


class _Joined:
    """Requests asked for in one turn of the event loop, sent as one batch: each caller's slice of it."""

    __slots__ = ("callers", "requests", "within")

    def __init__(self, within: float) -> None:
        self.requests: list[tuple[str, bytes, dict[str, str] | None]] = []
        self.callers: list[tuple[int, int, asyncio.Future[list[Msg | Exception]]]] = []
        self.within = within


_JOINING: weakref.WeakKeyDictionary[Client, _Joined] = weakref.WeakKeyDictionary()


async def request_joined(client: Client, requests: Sequence[tuple[str, bytes, dict[str, str] | None]],
                         within: float) -> list[Msg | Exception]:
    """`request_all`, sent in one batch with every request that other tasks ask for in the same
    turn of the event loop (to the same client).

    Tasks woken together (the claims of many jobs, each at the same step) then cost one flush, one
    timer and one wake-up of the reply batch, not one each. The batch is sent by a task of its own,
    so a caller that is cancelled only stops waiting for its replies.
    """
    joined = _JOINING.get(client)
    if joined is None:
        joined = _JOINING[client] = _Joined(within)
        asyncio.get_running_loop().call_soon(_send_joined, client, joined)
    mine: asyncio.Future[list[Msg | Exception]] = asyncio.get_running_loop().create_future()
    start = len(joined.requests)
    joined.requests.extend(requests)
    joined.callers.append((start, len(joined.requests), mine))
    return await mine


def _send_joined(client: Client, joined: _Joined) -> None:
    """Send a joined batch (no more requests join it) and hand each caller its replies."""
    if _JOINING.get(client) is joined:
        del _JOINING[client]

    def answer(task: asyncio.Task[list[Msg | Exception]]) -> None:
        failed = None if task.cancelled() else task.exception()
        for start, end, mine in joined.callers:
            if mine.done():
                continue
            if task.cancelled():
                mine.cancel()
            elif failed is not None:
                mine.set_exception(failed)
            else:
                mine.set_result(task.result()[start:end])

    task = asyncio.get_running_loop().create_task(request_all(client, joined.requests, joined.within))
    task.add_done_callback(answer)


_API_ERRORS: dict[int, type[nats.js.errors.APIError]] = {
    503: nats.js.errors.ServiceUnavailableError, 500: nats.js.errors.ServerError,
    404: nats.js.errors.NotFoundError, 400: nats.js.errors.BadRequestError}


def _api_error(err: dict[str, Any]) -> nats.js.errors.APIError:
    """The error nats-py's `APIError.from_error` raises for a JetStream API error, returned."""
    return _API_ERRORS.get(err.get("code") or 0, nats.js.errors.APIError)(**err)


_dumps = json.JSONEncoder(separators=(",", ":")).encode


def publish_request(subject: str, payload: bytes, headers: dict[str, str],
                    stream: str) -> tuple[str, bytes, dict[str, str]]:
    """The request (for `request_all`) that publishes into `stream` as nats-py's `js.publish` does."""
    return subject, payload, {**headers, "Nats-Expected-Stream": stream}


def get_request(stream: str, which: int | str) -> tuple[str, bytes, None]:
    """The request (for `request_all`) that reads a stored message of `stream` by sequence (an int) or
    as the last one on a subject (a str), as nats-py's `get_msg` does."""
    body = {"seq": which} if isinstance(which, int) else {"last_by_subj": which}
    return f"$JS.API.STREAM.MSG.GET.{stream}", _dumps(body).encode(), None


def _answer(reply: Msg | Exception, no_responders: type[Exception]) -> dict[str, Any] | Exception:
    """A JetStream API reply's JSON, or the error nats-py raises for it (`no_responders` when no
    server answered the request)."""
    if isinstance(reply, nats.errors.NoRespondersError):
        err = no_responders()
        err.__cause__ = err.__context__ = reply
        return err
    if isinstance(reply, Exception):
        return reply
    resp: dict[str, Any] = json.loads(reply.data)
    if "error" in resp:
        return _api_error(resp["error"])
    return resp


def as_ack(reply: Msg | Exception) -> tuple[int, bool] | Exception:
    """A publish's reply as (sequence, duplicate), or the error nats-py's `js.publish` raises."""
    resp = _answer(reply, nats.js.errors.NoStreamResponseError)
    if isinstance(resp, Exception):
        return resp
    return int(resp.get("seq") or 0), bool(resp.get("duplicate"))


async def stream_publish_many(client: Client, messages: Sequence[tuple[str, bytes, dict[str, str]]], *,
                              stream: str, within: float) -> list[tuple[int, bool] | Exception]:
    """Publish every (subject, payload, headers) into `stream` at once and wait up to `within` s for
    the acknowledgements: per message (sequence, duplicate), or the error nats-py's
    `JetStreamContext.publish(subject, payload, stream=stream, headers=headers)` raises for it."""
    replies = await request_all(client, [publish_request(subject, payload, headers, stream)
                                         for subject, payload, headers in messages], within)
    return [as_ack(reply) for reply in replies]


async def stream_publish(client: Client, subject: str, payload: bytes, *, stream: str,
                         headers: dict[str, str], within: float) -> tuple[int, bool]:
    """Publish into `stream` and wait up to `within` s for its acknowledgement: (sequence, duplicate).

    What nats-py's `JetStreamContext.publish(subject, payload, stream=stream, headers=headers)`
    sends, raises and answers, without building its `PubAck` on the hot path.
    """
    (ack,) = await stream_publish_many(client, [(subject, payload, headers)], stream=stream, within=within)
    if isinstance(ack, Exception):
        raise ack
    return ack


def as_stored(reply: Msg | Exception) -> Stored | Exception:
    """A get's reply as the stored message, or the error nats-py's `get_msg` raises."""
    resp = _answer(reply, nats.js.errors.ServiceUnavailableError)
    if isinstance(resp, Exception):
        return resp
    stored = resp["message"]
    data = stored.get("data")
    hdrs = stored.get("hdrs")
    return Stored(base64.b64decode(data) if data else b"", int(stored.get("seq") or 0),
                  _epoch_ms(stored.get("time")), _headers(base64.b64decode(hdrs)) if hdrs else {})


async def stream_get_many(client: Client, stream: str, which: Sequence[int | str], *,
                          within: float) -> list[Stored | Exception]:
    """Stored messages, each by sequence (an int) or as the last one on a subject (a str), all asked at
    once as nats-py's `JetStreamManager.get_msg` asks (the same requests and errors), decoding only
    what is used."""
    replies = await request_all(client, [get_request(stream, w) for w in which], within)
    return [as_stored(reply) for reply in replies]


async def stream_get(client: Client, stream: str, *, seq: int | None = None, subject: str | None = None,
                     within: float) -> Stored:
    """A stored message by sequence, or the last one on `subject`, as nats-py's
    `JetStreamManager.get_msg` reads it (the same request and errors), decoding only what is used."""
    (got,) = await stream_get_many(client, stream, [subject if subject is not None else (seq or 0)],
                                   within=within)
    if isinstance(got, Exception):
        raise got
    return got


def _headers(raw: bytes) -> dict[str, str]:
    """A stored message's header block (`NATS/1.0` line, then `Name: value` lines) as a dict."""
    out: dict[str, str] = {}
    for line in raw.decode(errors="replace").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip()] = value.strip()
    return out


@functools.lru_cache(maxsize=64)
def _epoch_s(whole: str) -> int:
    """`YYYY-MM-DDTHH:MM:SS` (UTC) in epoch seconds; messages stored within a second share it."""
    return int(datetime.fromisoformat(whole + "+00:00").timestamp())


def _epoch_ms(text: str | None) -> int:
    """JetStream's RFC 3339 time (up to nanoseconds) in epoch ms, as nats-py reads a stored message's
    time (`RawStreamMsg.time`): the fraction cut to microseconds, then `round(timestamp() * 1000)`."""
    if not text:
        return 0
    if text.endswith("Z"):  # what the server sends: UTC
        whole, offset = text[:-1], 0
    else:  # an explicit offset, e.g. +00:00 or -05:30
        whole, sign, zone = text[:-6], text[-6], text[-5:]
        if sign not in "+-" or zone[2] != ":":
            raise ValueError(f"invalid RFC 3339 time {text!r}: expected it to end in Z or ±HH:MM")
        offset = (int(zone[:2]) * 3600 + int(zone[3:]) * 60) * (1 if sign == "+" else -1)
    whole, _, fraction = whole.partition(".")
    seconds = _epoch_s(whole) - offset
    micros = int((fraction + "000000")[:6])
    return round((seconds * 1_000_000 + micros) / 1000)


class NatsConnection(BackendBase):
    """A nats-py client: from server URLs (connected in `open`, closed in `close`) or given (left open)."""

    _client_schemes: ClassVar[tuple[str, ...]] = ("nats", "tls")

    def _use_servers(self, servers_or_client: str | list[str] | Client, timeout: Any,
                     settings: dict[str, Any]) -> None:
        """Check the server URLs (or take the client), and the timeout of each store call."""
        if isinstance(servers_or_client, str) and "," in servers_or_client:
            servers_or_client = split_servers(servers_or_client)
        if not isinstance(servers_or_client, Client):
            servers = [servers_or_client] if isinstance(servers_or_client, str) else list(servers_or_client)
            if not servers:
                raise ValueError("no NATS servers given: pass e.g. 'nats://127.0.0.1:4222'")
            for server in servers:
                scheme = server.split("://", 1)[0].lower() if "://" in server else ""
                if scheme not in self._client_schemes:
                    raise ValueError(
                        f"invalid NATS URL {redact_url(server)!r}: use "
                        + " or ".join(f"{s}://host:4222" for s in self._client_schemes)
                    )
        self._timeout = parse_duration(timeout, name="timeout") / 1000
        self._js: JetStreamContext | None = None
        self._wins_subs: list[Subscription] = []
        self._use(servers_or_client, Client, {**settings, "timeout": timeout})

    @property
    def url(self) -> str:
        """The server(s), passwords redacted."""
        target = self._target
        if isinstance(target, str):
            return redact_url(target)
        if isinstance(target, list):
            return ",".join(redact_url(s) for s in target)
        server = getattr(self._client, "connected_url", None)
        return redact_url(server.geturl()) if server is not None else "nats://<client>"

    async def _connect(self) -> Client:
        """Connect; the client reconnects by itself afterwards."""
        errors: list[Exception] = []

        async def remember(exc: Exception) -> None:
            # nats-py reports connection errors here and keeps retrying (it reconnects forever).
            errors[:] = [exc]

        servers = [self._target] if isinstance(self._target, str) else list(self._target)
        try:
            async with asyncio.timeout(self._timeout):
                return await nats.connect(
                    servers, connect_timeout=min(2.0, self._timeout), allow_reconnect=True,
                    max_reconnect_attempts=-1, reconnect_time_wait=0.25,
                    error_cb=remember, disconnected_cb=_noop, reconnected_cb=_noop, closed_cb=_noop,
                )
        except Exception as exc:
            why = describe(errors[0]) if errors and isinstance(exc, TimeoutError) else describe(exc)
            raise BackendUnavailable(
                f"cannot connect to NATS at {self.url} within {self._timeout:g} s: {why}; is nats-server "
                "running (with JetStream: `nats-server -js`) and the URL right?"
            ) from exc

    async def _disconnect(self, client: Client) -> None:
        await client.close()

    async def _shutdown(self) -> None:
        subs, self._wins_subs = self._wins_subs, []
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._js = None

    # -- announced wins (capability `announce`) ----------------------------------------------------

    def _wins_subject(self, namespace: str) -> str:
        """The core NATS subject of `namespace`'s wins: `_anarchon.<stream>.won.<namespace>`, outside
        any subject a stream of anarchon's binds (NatsBackend's `<prefix>.>`)."""
        raise NotImplementedError

    async def _announce(self, requests: Sequence[ClaimRequest],
                        results: Sequence[ClaimResult | None]) -> None:
        """Publish the batch's wins (not a reissued lease) on the namespace's subject: at most once, so
        a message lost (while reconnecting, say) only costs the other replicas a claim."""
        wins: dict[tuple[str, str], list[tuple[str, int]]] = {}
        for r, result in zip(requests, results, strict=True):
            if result is not None and result.outcome is ClaimOutcome.WON and not result.reissued:
                wins.setdefault((r.namespace, r.owner), []).append((r.job, r.slot))
        for (namespace, owner), won in wins.items():
            subject, start = self._wins_subject(namespace), 0
            while start < len(won):
                end, size = start, len(owner)
                while end < len(won) and (end == start or size + len(won[end][0]) + 22 <= _WINS_CHUNK):
                    size += len(won[end][0]) + 22
                    end += 1
                try:
                    await self.client.publish(subject, wins_text(owner, won[start:end]).encode())
                except Exception as exc:  # the claims are decided: a lost announcement costs a claim
                    log.debug("could not announce %d win(s) on %s: %s", end - start, self.url, exc)
                start = end

    async def subscribe_wins(self, namespace: str, callback: WinsCallback) -> None:
        """Call `callback(owner, [(job, slot), ...])` on this event loop for the claims won in `namespace`
        (the winners publish them on a core NATS subject, `_anarchon.<stream>.won.<namespace>`)."""
        subject = self._wins_subject(namespace)

        async def heard(msg: Msg) -> None:
            deliver_wins(msg.data.decode(errors="replace"), (callback,), subject, log)

        with self._errors("subscribe to announced wins"):
            self._wins_subs.append(await self.client.subscribe(subject, cb=heard))
            await self.client.flush(self._timeout)  # the server has it before the first claim

    def _jetstream(self) -> JetStreamContext:
        """The JetStream context of the open connection."""
        if self._js is None:
            self._js = self.client.jetstream(timeout=self._timeout)
        return self._js

    async def _stream_or_create(self, config: nats.js.api.StreamConfig) -> nats.js.api.StreamInfo:
        """The stream's info, the stream created with `config` if there is none.

        A JetStream API call that times out is tried again, `OPEN_TRIES` tries in all: a cluster
        placing the replicated streams of several replicas started at once can take longer than one
        call's timeout. Creating a stream that exists with the same settings is no error. When several
        replicas create it at the same moment, the server may refuse all but one create (with "subjects
        overlap" or "name already in use"); a refused create is followed by one more lookup, and the
        stream another replica made is taken as found.
        """
        js = self._jetstream()
        assert config.name is not None
        tries_left = OPEN_TRIES
        while True:
            tries_left -= 1
            try:
                try:
                    return await js.stream_info(config.name)
                except nats.js.errors.NotFoundError:
                    pass
                try:
                    return await js.add_stream(config)
                except nats.js.errors.BadRequestError as refused:
                    try:
                        return await js.stream_info(config.name)
                    except nats.js.errors.NotFoundError:
                        raise refused from None
            except nats.errors.TimeoutError:
                if not tries_left:
                    raise
                log.warning("stream %r on %s: no answer within %g s; trying again (%d more)",
                            config.name, self.url, self._timeout, tries_left)

    def _translate(self, exc: Exception, doing: str) -> BackendError | None:
        """nats-py's errors, and socket errors, as anarchon's."""
        if isinstance(exc, _UNAVAILABLE):
            return BackendUnavailable(f"cannot {doing} on NATS at {self.url}: {describe(exc)}")
        if isinstance(exc, nats.errors.Error):
            return BackendError(f"cannot {doing} on NATS at {self.url}: {describe(exc)}")
        return None


async def _noop(*_: Any) -> None:
    """A callback that does nothing."""
