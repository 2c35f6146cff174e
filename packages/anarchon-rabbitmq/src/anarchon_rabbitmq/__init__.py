"""RabbitMQ backend for anarchon: a claim-only gate queue per slot (aio-pika).

    from anarchon import Scheduler
    from anarchon_rabbitmq import RabbitMQBackend

    scheduler = Scheduler(backend=RabbitMQBackend("amqp://guest:guest@127.0.0.1:5672/"))
    # or: Scheduler.from_url("amqp://guest:guest@127.0.0.1:5672/?prefix=anarchon&horizon=5m")

How a claim works: each (namespace, job, slot) has a durable **classic** queue named
`<prefix>.<namespace>.<job>.<slot>`, declared with `x-max-length=1`, `x-overflow=reject-publish`
and `x-expires=<horizon>`. Every instance publishes one persistent message to it with publisher
confirms: the broker acks the first (WON) and nacks the rest (TAKEN). The queue is never consumed
and never given a message TTL, either of which would reopen the gate. A batch of claims is written
to one channel in one go, and the winner of a slot declares the gate queue of the job's next slot
ahead (creating a queue is most of the broker's work), so that slot's claims find it there.
`persistent=False` makes queues and messages transient: cheaper, but a broker restart forgets
every gate.

Names: a namespace or job name of 1-64 of `[A-Za-z0-9_-]` is used as it is; any other is replaced
by `:` and 32 hex digits of its SHA-256, so every queue name is valid and under 255 bytes.

Horizon: `x-expires` (default 5 minutes) deletes a gate queue that nobody declared for that long.
Past it, a late publisher would win the slot again, so the scheduler never claims a slot older
than half the horizon (`horizon_ms`); such a slot is logged as missed.

Claim-only: no lease, no takeover, no overlap policy, no catch-up. Lease-only options
(`overlap`, `max_attempts`, `catch_up`, `lease`, `heartbeat`) are type errors and raise
`TypeError`. One robust connection (aio-pika reconnects it) carries a small pool of confirming
channels. A claim whose confirm is lost with the connection is retried by the scheduler; if the
first publish had reached the queue, the retry is nacked and the slot is not run (at most once).
See docs/backends/rabbitmq.md.
"""

from typing import TYPE_CHECKING

from anarchon.backends import lazy_exports

if TYPE_CHECKING:
    from ._backend import RabbitMQBackend
    from ._names import encode_token

__all__ = ["RabbitMQBackend", "encode_token"]

# Every process that builds a Scheduler imports this package (its plugin module lives here), so the
# public names, and aio-pika with them, are imported on first use only (PEP 562).
_EXPORTS = {
    "RabbitMQBackend": "_backend",
    "encode_token": "_names",
}


if not TYPE_CHECKING:
    # Hidden from type checkers, which would otherwise accept any name imported from this package.
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
