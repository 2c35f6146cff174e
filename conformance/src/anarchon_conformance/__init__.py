'''The anarchon conformance kit: the proof every backend runs, ours and yours.

It is a pytest plugin (loaded automatically once installed, entry point `pytest11`) plus a
suite of contract tests, hypothesis races and a model-based state machine. It adds no tests to
a run by itself: a test module pulls the suite in with one line.

A driver's (or a third party's) `tests/test_conformance.py` looks exactly like this:

    """anarchon conformance suite against MyBackend."""

    import pytest

    from anarchon_conformance import BackendFactory
    from anarchon_conformance.suite import *  # noqa: F403

    from my_backend import MyBackend


    @pytest.fixture
    def anarchon_backend_factory(anarchon_service_url) -> BackendFactory:
        url = anarchon_service_url("redis")  # or your own URL; skipped only when unreachable

        async def make() -> MyBackend:
            backend = MyBackend.from_url(url)  # a fresh backend on its own connection
            await backend.open()
            return backend  # the kit closes it

        return make

- `anarchon_backend_factory` is the one fixture to override. It returns an async callable; each
  call gives a fresh, opened backend on its own connection (races use up to 32 at once). Every
  call must reach the same store. The kit gives each test a namespace of its own, so the store
  needs no cleaning between tests.
- `anarchon_service_url(name)` (optional) gives the URL of `redis`, `postgres`, `rabbitmq` or
  `nats`: `$ANARCHON_<NAME>_URL` or the standard local port, skipped only when the server is
  unreachable (a failure under `ANARCHON_REQUIRE_SERVICES=1`); with `--anarchon-containers`, a
  throwaway testcontainers server (skipped, saying why, where no docker engine is reachable).
- In-process backends must stand for a store with its own clock: build them on `StoreClock()`
  (as `memory_backend_factory()` does), because the suite moves the test process's clock.
- A lease backend whose store fixes the lease length (NatsKVBackend: the bucket's TTL) declares it
  as `fixed_lease_ms`; the suite then asks for exactly that lease in every claim and renew, and
  waits it out where a lease must expire (so keep it short in tests: 400 ms-1 s). A backend that
  cannot run two slots of a job side by side may refuse `overlap="allow"` with `ConfigError`: that
  row is then skipped, saying so, once the suite has checked that the refusal changed nothing. A
  store that may end a lease somewhat after its length (a replicated NATS KV bucket) declares how
  much later as `expiry_slack_ms`, and the suite waits that much longer (and fails a lease that
  ends later still, or early).

Without a test file: `pytest --pyargs anarchon_conformance.suite --anarchon-backend=URL_OR_module:factory`,
or the command `anarchon-conformance URL_OR_module:factory`, which prints a summary per tier and
exits non-zero on any failure. A URL uses the installed driver for its scheme; `module:factory`
names a zero-argument callable returning the factory (like the fixture's body), imported from the
current directory or an installed package. A spec that cannot be loaded is one error, before any test.

Every rule of docs/lease-contract.md has a test, and each failure names the rule it found broken.
Tiers follow the capabilities the backend declares (`anarchon.Capability`):

- `claim` (every backend): one winner per (namespace, job, slot), names compared exactly and never
  joined or cut, the
  horizon, `claim_many`, `sibling()`, idempotent open and close; races; the exact-count fuzz;
- `lease`: every row of the claim table, store time and `max_skew`, the granted lease, renew and
  release (only by the owner, once, atomic against a takeover), `renew_many` and `release_many`,
  `max_attempts`, increasing tokens, stored fingerprints, ended records kept, the store's clock
  deciding for claimers whose clocks differ, and the model-based comparison with `MemoryBackend`;
- `inspect`, `notify`, `announce`, `control`, `history`: their own contracts;
- `schedules`: schedules kept as data: writes by version, lists by id, the due index, advances, the
  change counter, races, and a comparison with `MemoryBackend`.

A backend that does not declare a capability is skipped for that tier, with a reason saying it
"does not declare" the capability; a declared capability that fails is a failure.

The clock tests (`TestClockContract`) run claimers in processes of their own whose clocks run 30 s
ahead and behind (under libfaketime when it is installed, `apt install faketime`; else with Python's
clock functions moved), building backends with the factory pickled by cloudpickle: let it capture a
URL, a path or a bucket name, not a client object. A store whose clock is the host's, read by its own
library in each process (SQLite), declares `host_clock = True`.

Options: `--anarchon-backend`, `--anarchon-claims=N` (the exact-count fuzz's claims; default
2,000, long runs 1,000,000), `--anarchon-thorough` (wait 15 s instead of 3 s where a rule says
"forever": an ended record, a claim without a horizon; CI should) and `--anarchon-containers`.
'''

from ._support import (
    BackendFactory,
    BackendPool,
    StoreClock,
    load_backend,
    memory_backend_factory,
    memory_claim_backend_factory,
    resolve_backend,
)

__version__ = "0.1.0"

__all__ = [
    "BackendFactory",
    "BackendPool",
    "StoreClock",
    "load_backend",
    "memory_backend_factory",
    "memory_claim_backend_factory",
    "resolve_backend",
]
