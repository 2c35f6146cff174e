"""`RabbitMQBackend`: one durable classic gate queue per (namespace, job, slot)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractRobustConnection,
)
from aiormq.abc import ChannelFrame
from pamqp import commands as _spec
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from anarchon import BackendError, BackendUnavailable, Duration, SchemaMismatch, parse_duration
from anarchon.backends import (
    BackendBase,
    Capability,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    Lease,
    WinsCallback,
    deliver_wins,
    redact_url,
    wins_text,
)

from ._names import check_prefix, encode_token, queue_name

__all__ = ["RabbitMQBackend"]

_log = logging.getLogger("anarchon.rabbitmq")


class RabbitMQBackend(BackendBase):
    """A claim-only backend: the first confirmed publish into a slot's one-message gate queue wins;
    wins are announced on a direct exchange."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM, Capability.ANNOUNCE})
    url_schemes: ClassVar[tuple[str, ...]] = ("amqp", "amqps")

    def __init__(
        self,
        url_or_connection: str | AbstractRobustConnection,
        *,
        prefix: str = "anarchon",
        horizon: Duration = "5m",
        persistent: bool = True,
        channels: int = 4,
        timeout: Duration = "10s",
    ) -> None:
        if isinstance(url_or_connection, str) and urlsplit(url_or_connection).scheme.lower() not in (
            self.url_schemes
        ):
            raise ValueError(
                f"invalid RabbitMQ URL {redact_url(url_or_connection)!r}: use "
                "amqp://user:pass@host:5672/vhost or amqps://…"
            )
        self.prefix = check_prefix(prefix)
        self._horizon_ms = parse_duration(horizon, name="horizon")
        if not isinstance(persistent, bool):
            raise ValueError(f"invalid persistent={persistent!r}: use True or False")
        self.persistent = persistent
        self._delivery_mode = 2 if persistent else 1
        if channels < 1:
            raise ValueError(f"invalid channels={channels!r}: use 1 or more")
        self._pool_size = channels
        self._timeout = parse_duration(timeout, name="timeout") / 1000
        self._idle: asyncio.Queue[AbstractChannel] | None = None
        self._created = 0
        self._announcer: AbstractChannel | None = None
        """A channel without confirms, for announcing wins and hearing them."""
        self._exchange: AbstractExchange | None = None
        self._use(url_or_connection, AbstractConnection,
                  {"prefix": prefix, "horizon": horizon, "persistent": persistent, "channels": channels,
                   "timeout": timeout})

    @classmethod
    def from_url(cls, url: str) -> RabbitMQBackend:
        """Build from `amqp://user:pass@host/vhost?prefix=…&horizon=5m&persistent=true`; other query
        keys go to aio-pika."""
        parts = urlsplit(url)
        ours: dict[str, Any] = {}
        rest = []
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key in ("prefix", "horizon"):
                ours[key] = value
            elif key == "persistent":
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(f"invalid persistent={value!r} in the URL: use true or false")
                ours[key] = value.lower() in ("true", "1")
            else:
                rest.append((key, value))
        return cls(urlunsplit(parts._replace(query=urlencode(rest))), **ours)

    @property
    def url(self) -> str:
        """The broker's URL, password redacted."""
        if self._target is not None:
            return redact_url(self._target)
        return redact_url(str(getattr(self._client, "url", "amqp://<connection>")))

    @property
    def horizon_ms(self) -> int:
        """The gate queue's `x-expires`: a claim is remembered at least this long after the last one."""
        return self._horizon_ms

    def queue_name(self, namespace: str, job: str, slot: int) -> str:
        """The gate queue's name for one slot (odd namespace or job names are hashed)."""
        return queue_name(self.prefix, namespace, job, slot)

    # -- connection ------------------------------------------------------------------------------

    async def _connect(self) -> AbstractRobustConnection:
        """A robust connection, which reconnects by itself."""
        try:
            async with asyncio.timeout(self._timeout):
                return await aio_pika.connect_robust(self._target)
        except Exception as exc:
            raise BackendUnavailable(
                f"cannot connect to RabbitMQ at {self.url}: {_describe(exc)}; is the broker running "
                "and the URL right?"
            ) from exc

    async def _disconnect(self, client: AbstractRobustConnection) -> None:
        await client.close()

    async def _prepare(self) -> None:
        """Check that one channel works; declare the exchange that wins are announced on."""
        self._idle = asyncio.Queue()
        self._created = 0
        async with self._channel():
            pass
        await self._open_announcer()

    async def _open_announcer(self) -> None:
        """The channel and exchange for announced wins. The exchange is not durable: a robust channel
        declares it again after a reconnection (to a restarted broker too), and a prefix no longer
        used leaves nothing behind. One declared otherwise (durable, by an operator) is used as it is;
        without one, wins are not announced and every replica claims every slot, as it did before."""
        assert self._client is not None
        try:
            async with asyncio.timeout(self._timeout):
                self._announcer = await self._client.channel(publisher_confirms=False)
                try:
                    self._exchange = await self._announcer.declare_exchange(
                        self._wins_exchange, aio_pika.ExchangeType.DIRECT, durable=False)
                except aiormq.exceptions.ChannelPreconditionFailed:
                    self._announcer = await self._client.channel(publisher_confirms=False)
                    self._exchange = await self._announcer.get_exchange(self._wins_exchange, ensure=True)
        except Exception as exc:
            self._announcer = self._exchange = None
            _log.warning("wins are not announced on %s: cannot declare the exchange %r: %s", self.url,
                         self._wins_exchange, _describe(exc))

    async def _shutdown(self) -> None:
        """Close the pooled channels and the announcing one."""
        announcer, self._announcer, self._exchange = self._announcer, None, None
        if announcer is not None:
            with contextlib.suppress(Exception):
                await announcer.close()
        idle, self._idle = self._idle, None
        while idle is not None and not idle.empty():
            ch = idle.get_nowait()
            try:
                await ch.close()
            except Exception:
                pass

    def _translate(self, exc: Exception, doing: str) -> BackendError:
        """aio-pika's and aiormq's errors, and socket errors, as anarchon's."""
        if isinstance(exc, (ConnectionError, OSError, TimeoutError, aiormq.exceptions.AMQPError,
                            aiormq.exceptions.ChannelInvalidStateError)):
            return BackendUnavailable(f"cannot {doing} on RabbitMQ at {self.url}: {_describe(exc)}")
        return BackendError(f"cannot {doing} on RabbitMQ at {self.url}: {_describe(exc)}")

    @asynccontextmanager
    async def _channel(self) -> AsyncIterator[AbstractChannel]:
        """Borrow a confirming channel from the pool; a channel the broker closed is replaced."""
        if self._idle is None or self._client is None:
            raise BackendError(f"{self!r} is not open: call `await backend.open()` (Scheduler.start does)")
        idle = self._idle
        ch: AbstractChannel | None = None
        with self._errors("open a channel"):
            async with asyncio.timeout(self._timeout):
                while ch is None:
                    if not idle.empty():
                        ch = idle.get_nowait()
                        if ch.is_closed:
                            self._created -= 1
                            ch = None
                    elif self._created < self._pool_size:
                        self._created += 1
                        try:
                            ch = await self._client.channel(publisher_confirms=True,
                                                            on_return_raises=True)
                        except BaseException:
                            self._created -= 1
                            raise
                    else:
                        ch = await idle.get()
                        if ch.is_closed:
                            self._created -= 1
                            ch = None
        try:
            yield ch
        finally:
            if self._idle is idle:
                idle.put_nowait(ch)

    # -- the claim ---------------------------------------------------------------------------

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim each slot: declare its gate queue and publish one message into it, every slot's
        frames written to one confirming channel in one go; the broker's ack means won, its nack taken.

        Each declaration is sent with `nowait` and its publish right behind it, without waiting for
        either answer: a channel's frames are handled in order, so the queue exists when the publish
        reaches it, and a batch costs one round trip and one socket write however many slots it holds.
        """
        if not requests:
            return []
        async with self._channel() as ch:
            try:
                async with asyncio.timeout(self._timeout):
                    amqp = await ch.get_underlay_channel()
                    if not isinstance(amqp, aiormq.Channel):  # the bookkeeping below is aiormq's
                        raise BackendError(f"unexpected AMQP channel type {type(amqp).__name__}")
                    results = await self._claim_batch(amqp, requests)
            except BackendError:
                raise
            except Exception as exc:
                raise self._translate(exc, f"claim {len(requests)} slot(s)") from exc
        await self._announce(requests, results)
        return results

    # -- announced wins --------------------------------------------------------------------------

    @property
    def _wins_exchange(self) -> str:
        return f"{self.prefix}.won"

    async def _announce(self, requests: Sequence[ClaimRequest], results: Sequence[ClaimResult]) -> None:
        """Publish the batch's wins to the exchange, routed by namespace: at most once, unconfirmed,
        so a message lost (while reconnecting, say) only costs the other replicas a claim."""
        exchange = self._exchange
        if exchange is None:
            return
        wins: dict[tuple[str, str], list[tuple[str, int]]] = {}
        for r, result in zip(requests, results, strict=True):
            if result.outcome is ClaimOutcome.WON:
                wins.setdefault((r.namespace, r.owner), []).append((r.job, r.slot))
        try:
            for (namespace, owner), won in wins.items():
                await exchange.publish(aio_pika.Message(wins_text(owner, won).encode()),
                                       routing_key=encode_token(namespace))
        except Exception as exc:  # the claims are decided: a lost announcement costs a claim
            _log.debug("could not announce wins on %s: %s", self.url, _describe(exc))

    async def subscribe_wins(self, namespace: str, callback: WinsCallback) -> None:
        """Call `callback(owner, [(job, slot), ...])` on this event loop for the claims won in `namespace`
        (the winners publish them to the `<prefix>.won` exchange; each subscriber has a queue of its own,
        bound by namespace, that goes away with its connection)."""
        if self._idle is None:
            raise BackendError(f"{self!r} is not open: call `await backend.open()` (Scheduler.start does)")
        announcer = self._announcer
        if announcer is None:  # no exchange (logged at open): nothing will be heard
            return

        async def heard(message: AbstractIncomingMessage) -> None:
            deliver_wins(message.body.decode(errors="replace"), (callback,), self._wins_exchange, _log)

        with self._errors("subscribe to announced wins"):
            async with asyncio.timeout(self._timeout):
                queue = await announcer.declare_queue(exclusive=True, auto_delete=True)
                await queue.bind(self._wins_exchange, routing_key=encode_token(namespace))
                await queue.consume(heard, no_ack=True)

    def _arguments(self) -> dict[str, Any]:
        return {"x-queue-type": "classic", "x-max-length": 1, "x-overflow": "reject-publish",
                "x-expires": self._horizon_ms}

    async def _claim_batch(self, amqp: aiormq.Channel,
                           requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Write every slot's `queue.declare` (nowait) and publish as one frame sequence, then wait
        for the broker's confirms.

        This is what aiormq's `queue_declare(nowait=True)` and `basic_publish` do for one slot (the
        same delivery-tag and confirmation bookkeeping, under the channel's lock), done for the whole
        batch at once: one lock, one write, one drain instead of one each per frame, which cost the
        client about 0.2 ms of CPU a slot. aio-pika's robust channel is bypassed too: it would
        remember every queue it declares, to declare it again after a reconnection.
        """
        arguments = self._arguments()
        names = [self.queue_name(r.namespace, r.job, r.slot) for r in requests]
        confirms: list[asyncio.Future[Any]] = []
        message_ids: list[str] = []
        frames: list[Any] = []
        async with amqp.lock:
            for r, name in zip(requests, names, strict=True):
                body = json.dumps({"owner": r.owner, "job": r.job, "slot": r.slot}).encode()
                amqp.delivery_tag += 1
                tag = amqp.delivery_tag
                # The message id maps a returned message (its queue vanished) back to its tag.
                message_id = f"{r.owner}/{tag}"
                confirm = amqp.create_future()
                amqp.confirmations[tag] = confirm
                amqp.message_id_delivery_tag[message_id] = tag
                confirms.append(confirm)
                message_ids.append(message_id)
                frames += (
                    _spec.Queue.Declare(queue=name, durable=self.persistent, arguments=arguments,
                                        nowait=True),
                    _spec.Basic.Publish(exchange="", routing_key=name, mandatory=True),
                    # By default a persistent message in a durable queue: the gate survives a
                    # broker restart (`persistent=False`: a transient one in a transient queue).
                    ContentHeader(properties=_spec.Basic.Properties(
                        delivery_mode=self._delivery_mode, app_id="anarchon", message_id=message_id),
                        body_size=len(body)),
                    ContentBody(body),
                )
            drained = amqp.create_future()
            sent = False
            try:
                await amqp.write_queue.put(
                    ChannelFrame.marshall(channel_number=amqp.number, frames=frames,
                                          drain_future=drained))
                sent = True
                await drained
            except BaseException:
                if not sent:
                    # The broker never saw these publishes: give their delivery tags back (still
                    # under the lock), or every later confirm on this channel would be misread.
                    amqp.delivery_tag -= len(confirms)
                    for tag in range(amqp.delivery_tag + 1, amqp.delivery_tag + len(confirms) + 1):
                        amqp.confirmations.pop(tag, None)
                    for message_id in message_ids:
                        amqp.message_id_delivery_tag.pop(message_id, None)
                for confirm in confirms:
                    confirm.cancel()
                raise
        try:
            answers = await asyncio.gather(*confirms, return_exceptions=True)
        finally:
            for confirm in confirms:
                confirm.cancel()  # a no-op once answered; else the late confirm is ignored
            for message_id in message_ids:
                amqp.message_id_delivery_tag.pop(message_id, None)
        results = [self._outcome(r, name, answer)
                   for r, name, answer in zip(requests, names, answers, strict=True)]
        ahead = [self.queue_name(r.namespace, r.job, r.stale_after + 1)
                 for r, res in zip(requests, results, strict=True)
                 if res.outcome is ClaimOutcome.WON and r.stale_after is not None
                 and r.stale_after >= r.slot]
        if ahead:
            await self._declare_ahead(amqp, ahead, arguments)
        return results

    async def _declare_ahead(self, amqp: aiormq.Channel, names: list[str],
                             arguments: dict[str, Any]) -> None:
        """Declare the gate queues of the slots that follow the ones just won, without waiting.

        Creating a durable queue is most of the broker's work for a claim (several ms of its CPU
        each); made here, about an interval before the slot, the claims of that slot find the queue
        there and cost the broker a re-declaration and a publish. The scheduler sets a request's
        `stale_after` to the job's next slot less 1 ms; only the winner declares it, once. A queue
        declared ahead is an empty gate like any other: the first publish into it wins, and one that
        is never claimed expires after the horizon. Failing here fails none of the batch's claims:
        the claims of the next slot declare the queue anyway.
        """
        frames = [_spec.Queue.Declare(queue=name, durable=self.persistent, arguments=arguments,
                                        nowait=True)
                  for name in names]
        try:
            async with amqp.lock:
                await amqp.write_queue.put(ChannelFrame.marshall(channel_number=amqp.number,
                                                                 frames=frames))
        except Exception:
            _log.debug("cannot declare %d gate queue(s) ahead on %s", len(names), self.url,
                       exc_info=True)

    def _outcome(self, r: ClaimRequest, name: str, answer: Any) -> ClaimResult:
        """The broker's answer to one slot's publish, as a claim result (or the error it means)."""
        if isinstance(answer, aiormq.exceptions.PublishError):
            raise BackendError(
                f"the gate queue {name!r} vanished between its declaration and the publish on {self.url}; "
                "the claim will be retried"
            ) from answer
        if isinstance(answer, aiormq.exceptions.DeliveryError):
            if isinstance(getattr(answer, "frame", None), _spec.Basic.Nack):
                return ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, attempt=1)
            raise self._translate(answer, f"publish to {name!r}") from answer
        if isinstance(answer, aiormq.exceptions.ChannelPreconditionFailed):
            raise SchemaMismatch(
                f"the gate queue {name!r} on {self.url} exists with other arguments ({answer}): another "
                f"instance uses a different horizon than {self._horizon_ms} ms, another `persistent` "
                "setting or this prefix; give every instance the same `horizon` and `persistent`, or "
                "use another `prefix`"
            ) from answer
        if isinstance(answer, Exception):
            raise self._translate(answer, f"claim {name!r}") from answer
        if isinstance(answer, BaseException):
            raise answer
        lease = Lease(r.namespace, r.job, r.slot, 1, 0, r.owner, 0)
        return ClaimResult(ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=r.owner, attempt=1)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
