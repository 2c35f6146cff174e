"""NATS backends for anarchon (nats-py): a claim-only JetStream gate and a Key-Value lease.

    from anarchon import Scheduler
    from anarchon_nats import NatsBackend, NatsKVBackend

    claim_only = Scheduler(backend=NatsBackend("nats://127.0.0.1:4222", duplicate_window="2m"))
    with_leases = Scheduler(backend=NatsKVBackend("nats://127.0.0.1:4222", lease="30s"), lease="30s")
    # or: Scheduler.from_url("nats://127.0.0.1:4222?stream=ANARCHON&duplicate_window=2m")
    #     Scheduler.from_url("nats-kv://127.0.0.1:4222?bucket=anarchon&lease=30s", lease="30s")

`NatsBackend` (claim-only, `nats://`, `tls://`): `open()` creates the stream `stream` (subjects
`<prefix>.>`, `duplicate_window`, MaxAge equal to the window) or checks an existing one and names
each mismatched setting. A claim publishes to `<prefix>.<namespace>.<job>` with the header
`Nats-Msg-Id: <namespace>:<job>:<slot>`; a PubAck marked `duplicate` means TAKEN, even when the first
message is this owner's own (a claim whose ack was lost is not run: at most once). The horizon is the
duplicate window: the scheduler never claims a slot older than half of it.

`NatsKVBackend` (lease, `nats-kv://`, `nats-kv+tls://`): claim is a Key-Value `create`, renew an
`update` with the last revision, release a `delete` with the last revision, and takeover a `create`
once the entry aged out under the bucket TTL (or at once after a release). A second bucket,
`<bucket>_state`, with no TTL, keeps the attempt count, done/failed/released and the fencing token
(1 for a job's first claim, +1 on each claim after). The bucket TTL is the lease, so **the lease length
is fixed per bucket** (`fixed_lease_ms`): `NatsKVBackend(lease=...)` must equal the scheduler's and
every job's `lease`, and a claim with another length raises `ConfigError` naming both.
`overlap="allow"` is not supported (one lease entry per job), and there is no `inspect` and no
release push: backups poll every heartbeat.

Names: a namespace or job name of 1-64 of `[A-Za-z0-9_-]` is used as it is; any other is replaced
by `=` and 32 hex digits of its SHA-256, so subjects, message ids and keys stay valid.
See docs/backends/nats.md.
"""

from typing import TYPE_CHECKING

from anarchon.backends import lazy_exports

if TYPE_CHECKING:
    from ._common import encode_token
    from ._kv import NatsKVBackend
    from ._stream import NatsBackend

__all__ = ["NatsBackend", "NatsKVBackend", "encode_token"]

# Every process that builds a Scheduler imports this package (its plugin module lives here), so the
# public names, and nats-py with them, are imported on first use only (PEP 562).
_EXPORTS = {
    "encode_token": "_common",
    "NatsKVBackend": "_kv",
    "NatsBackend": "_stream",
}


if not TYPE_CHECKING:
    # Hidden from type checkers, which would otherwise accept any name imported from this package.
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
