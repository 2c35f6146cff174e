"""RedisBackend and ValkeyBackend: the lease state machine as Lua scripts."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from json.encoder import encode_basestring as _json_text
from typing import Any, ClassVar, Literal

from anarchon import BackendError, BackendUnavailable, Duration, parse_duration
from anarchon.backends import (
    ERROR_LIMIT,
    SCHEDULE_PARTITIONS,
    BackendBase,
    Capability,
    CatalogueEntry,
    ClaimOutcome,
    ClaimRequest,
    ClaimResult,
    JobControl,
    JobState,
    JobStatus,
    Lease,
    LeaseBackendBase,
    LeaseRecord,
    Overlap,
    ReleaseCallback,
    ReleaseOutcome,
    RunRecord,
    ScheduleRecord,
    ScheduleWrite,
    ScheduleWriteResult,
    WinsCallback,
    check_expect,
    check_schedule_batch,
    deliver_wins,
    redact_url,
    schedule_partition,
)

from . import _scripts
from ._client import OP_TIMEOUT_S, REDIS, Driver, client_from_url, split_url, valkey_driver
from ._keys import Keys

__all__ = ["RedisBackend", "ValkeyBackend"]

log = logging.getLogger("anarchon.redis")

# json.dumps with arguments builds an encoder per call: a catalogue of thousands of jobs reuses one.
_JSON_KEY = json.JSONEncoder(ensure_ascii=False).encode
_JSON_BODY = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


BATCH = 500
"""Jobs per script call in a batch: one call holds the server for about a millisecond."""
_INDEX_REFRESH_S = 60.0
_OUTCOMES: dict[Any, ClaimOutcome] = {o.value.encode(): o for o in ClaimOutcome}
_STATUSES: dict[Any, JobStatus] = {s.value.encode(): s for s in JobStatus}
_REISSUED = b"reissued"
"""The claim script's code for a WON by the owner of the slot's live record: its own lease again."""
_OVERLAPS: dict[Any, str] = {o: o.value for o in Overlap}
"""An overlap (member or its string) to its value, without an Enum call per claim."""
_RELEASED_AS: dict[ReleaseOutcome, str] = {o: o.status.value for o in ReleaseOutcome}
"""The status each release outcome stores (`.value` of an Enum is a Python-level property on 3.11)."""


def _claim_args(r: ClaimRequest) -> list[Any]:
    """The claim script's 8 arguments of one request (`_scripts` `args`)."""
    return [r.slot, r.owner, r.lease_ms, r.max_attempts, _OVERLAPS.get(r.overlap) or Overlap(r.overlap).value,
            r.fingerprint, r.max_skew_ms, "" if r.stale_after is None else r.stale_after]


class Script:
    """A Lua script: its source and the SHA1 that EVALSHA names it by."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


def _glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _opt_s(value: Any) -> str | None:
    return None if value is None else _s(value)


def _opt_i(value: Any) -> int | None:
    return None if value is None else int(value)


def describe_client(driver: Driver, client: Any) -> str:
    """A URL-like description of an existing client, without its password."""
    try:
        kw = client.connection_pool.connection_kwargs
    except AttributeError:
        return f"<{driver.name} client>"
    if "path" in kw:
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    return f"{driver.name}://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


class RedisStore(BackendBase):
    """What the Redis backends share: a URL or a client, scripts and NOSCRIPT, deadlines, errors."""

    _schemes: ClassVar[dict[str, str]] = {}
    _url_options: ClassVar[tuple[str, ...]] = ("prefix",)
    _cluster: bool = False
    """The client is a Cluster client, which refuses EVALSHA in a pipeline: one script call per job
    (set by `RedisBackend` when it opens)."""
    wait_replicas: int = 0
    """Replicas that must acknowledge a won claim before it is reported as won (0: none; an option of
    `RedisBackend`)."""

    @classmethod
    def _driver(cls) -> Driver:
        return REDIS

    def _setup(self, redis: Any, prefix: str, settings: dict[str, Any]) -> dict[str, str]:
        """Take a URL (the client is built now and connects on use) or a client; return the URL's
        own options."""
        driver = self._driver()
        self._drv = driver
        options: dict[str, str] = {}
        if isinstance(redis, str):
            self._client_url, options = split_url(redis, self._url_options, self._schemes)
            self._where = redis
            prefix = options.get("prefix", prefix)
        elif isinstance(redis, driver.client_type) or (
                driver.cluster_type is not None and isinstance(redis, driver.cluster_type)):
            self._where = describe_client(driver, redis)
        else:
            raise TypeError(
                f"{type(self).__name__} needs a URL ({', '.join(self._schemes)}) or a "
                f"{driver.client_type.__module__}.{driver.client_type.__name__}, not {type(redis).__name__}"
            )
        types = tuple(t for t in (driver.client_type, driver.cluster_type) if t is not None)
        self._use(redis, types, {"prefix": prefix, **settings})
        if self._client is None:
            self._client = client_from_url(driver, self._client_url)
        self.keys = Keys(prefix)
        self.prefix = prefix
        return options

    async def _connect(self) -> Any:
        return client_from_url(self._drv, self._client_url)

    async def _disconnect(self, client: Any) -> None:
        await client.aclose()

    @property
    def url(self) -> str:
        """Where the store is, password redacted."""
        return redact_url(self._where)

    def _translate(self, exc: Exception, doing: str) -> BackendError | None:
        """The client library's errors, and socket errors, as anarchon's (see `Driver.error`)."""
        if isinstance(exc, (self._drv.base_error, OSError, *self._drv.unavailable)):
            return self._drv.error(exc, self._where, doing)
        return None

    @contextlib.asynccontextmanager
    async def _op(self, doing: str) -> AsyncIterator[None]:
        """One store operation: the client library's errors translated, and an answer within
        `OP_TIMEOUT_S` (one timer per operation; the client's own `socket_timeout` would arm
        one per reply, thousands for a pipelined batch)."""
        with self._errors(doing):
            try:
                async with asyncio.timeout(OP_TIMEOUT_S):
                    yield
            except TimeoutError as exc:
                await self._drop_idle_connections()
                raise BackendUnavailable(
                    f"{self._drv.name} at {self.url} did not answer within {OP_TIMEOUT_S:g} s while {doing}"
                ) from exc
            except self._drv.timeout:
                await self._drop_idle_connections()
                raise

    async def _drop_idle_connections(self) -> None:
        """After a call that got no answer, close the pool's idle connections: opened before the
        silence, they may be as dead (a black-holed network keeps them open), and each would cost
        the next calls a whole deadline. New ones are opened as needed."""
        pool = getattr(self.client, "connection_pool", None)
        if pool is not None:
            with contextlib.suppress(Exception):
                await pool.disconnect(inuse_connections=False)

    async def _eval_many(
        self, script: Script, calls: Sequence[tuple[list[str], list[Any]]], doing: str,
        extra: Callable[[Any], None] | None = None, wait: int = 0, waited: list[int] | None = None,
    ) -> list[Any]:
        """Run `script` once per call in one pipeline: one round trip.

        A pipeline cannot reload a script on NOSCRIPT (after a restart or failover), so the calls
        that got NOSCRIPT (the script did not run for them) are sent again after SCRIPT LOAD.
        With `wait` (milliseconds; not on a Cluster client) each pipeline ends with `WAIT
        self.wait_replicas wait`, and `waited` gets the number of replicas each WAIT counted.
        """
        results: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for round_ in range(2):
            now_extra = extra if round_ == 0 else None
            if self._cluster:
                replies = await self._eval_cluster(script, [calls[i] for i in todo], doing, now_extra)
            else:
                pipe = self.client.pipeline(transaction=False)
                for i in todo:
                    keys, args = calls[i]
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                if now_extra is not None:
                    now_extra(pipe)
                if wait:
                    # On the same connection as the scripts: WAIT counts the writes of its connection.
                    pipe.execute_command("WAIT", self.wait_replicas, wait)
                async with self._op(doing):
                    replies = await pipe.execute(raise_on_error=False)
                for reply in replies[len(todo):]:
                    if isinstance(reply, BaseException):
                        raise self._drv.error(reply, self._where, doing) from reply
                if wait and waited is not None:
                    waited.append(int(replies[-1]))
                replies = replies[:len(todo)]
            missing = []
            for i, reply in zip(todo, replies, strict=True):
                if isinstance(reply, self._drv.no_script):
                    missing.append(i)
                elif isinstance(reply, BaseException):
                    raise self._drv.error(reply, self._where, doing) from reply
                else:
                    results[i] = reply
            if not missing:
                return results
            async with self._op("loading scripts"):
                await self.client.script_load(script.source)
            todo = missing
        raise self._drv.error(RuntimeError("NOSCRIPT after SCRIPT LOAD"), self._where, doing)


    async def _eval_cluster(
        self, script: Script, calls: Sequence[tuple[list[str], list[Any]]], doing: str,
        extra: Callable[[Any], None] | None,
    ) -> list[Any]:
        """On a Cluster client: every call at once, each routed to its key's master (a Cluster pipeline
        refuses EVALSHA), and `extra`'s commands in a Cluster pipeline beside them."""
        async def side() -> None:
            if extra is not None:
                pipe = self.client.pipeline()
                extra(pipe)
                if len(pipe):
                    await pipe.execute()

        # The calls of one record (the same first key: a job's slot twice in a batch) go one after the
        # other, in the batch's order: sent side by side, a later one could be judged first.
        groups: dict[str, list[int]] = {}
        for i, (keys, _args) in enumerate(calls):
            groups.setdefault(keys[0] if keys else "", []).append(i)
        replies: list[Any] = [None] * len(calls)

        async def in_order(indexes: list[int]) -> None:
            for i in indexes:
                keys, args = calls[i]
                try:
                    replies[i] = await self.client.evalsha(script.sha, len(keys), *keys, *args)
                except Exception as exc:  # (reported per call, as a pipeline's raise_on_error=False does)
                    replies[i] = exc

        async with self._op(doing):
            done = await asyncio.gather(*(in_order(ix) for ix in groups.values()), side(),
                                        return_exceptions=True)
            if isinstance(done[-1], BaseException):
                raise done[-1]
        return replies


_CLAIM, _CLAIM_BATCH = Script(_scripts.CLAIM), Script(_scripts.CLAIM_BATCH)
_RENEW, _RENEW_BATCH = Script(_scripts.RENEW), Script(_scripts.RENEW_BATCH)
_RELEASE, _RELEASE_BATCH = Script(_scripts.RELEASE), Script(_scripts.RELEASE_BATCH)
_INSPECT = Script(_scripts.INSPECT)
_SET_CONTROL = Script(_scripts.SET_CONTROL)
_RECORD_RUNS, _RECORD_RUNS_BATCH = Script(_scripts.RECORD_RUNS), Script(_scripts.RECORD_RUNS_BATCH)
_PUBLISH_CATALOGUE = Script(_scripts.PUBLISH_CATALOGUE)
_CATALOGUE = Script(_scripts.CATALOGUE)
_PUT_SCHEDULE, _REMOVE_SCHEDULE = Script(_scripts.PUT_SCHEDULE), Script(_scripts.REMOVE_SCHEDULE)
_PUT_SCHEDULES = Script(_scripts.PUT_SCHEDULES)
_GET_SCHEDULES, _READ_SCHEDULES = Script(_scripts.GET_SCHEDULES), Script(_scripts.READ_SCHEDULES)
_DUE_SCHEDULES, _ADVANCE_SCHEDULES = Script(_scripts.DUE_SCHEDULES), Script(_scripts.ADVANCE_SCHEDULES)
_MOVE_DUE = Script(_scripts.MOVE_DUE)
_SCHEDULE_SCRIPTS = (_PUT_SCHEDULE, _PUT_SCHEDULES, _REMOVE_SCHEDULE, _GET_SCHEDULES, _READ_SCHEDULES,
                     _DUE_SCHEDULES, _ADVANCE_SCHEDULES, _MOVE_DUE)
_PUT_CHUNK = 1_000
"""Schedules per script of `put_schedules`: a few milliseconds of the server's one thread."""
_DUE_BIAS = 1 << 63
"""Added to a next due before it is written as 16 hex digits: every int64 is a key of the same width."""
_INDEX_IDS, _INDEX_TASKS, _INDEX_OLD_DUE, _INDEX_PDUE, _INDEX_PTASKDUE = 4, 5, 3, 8, 9
"""The places of the ids and tasks lists, the previous release's due index and the due indexes by
partition and by task in `Keys.schedules`."""
_MOVE_CHUNK = 1_000
"""Entries of the previous release's due index moved per script: a few milliseconds each."""


def due_key(next_due: int | None) -> str:
    """A next due as the due index orders it: 16 hex digits of `next_due + 2**63` ('-' for None)."""
    if next_due is None:
        return "-"
    if not -_DUE_BIAS <= next_due < _DUE_BIAS:
        raise ValueError(f"invalid next_due {next_due!r}: use epoch milliseconds that fit in 64 bits")
    return f"{next_due + _DUE_BIAS:016x}"


def _part(schedule_id: str) -> str:
    """A schedule's partition as the due index keeps it: 2 hex digits."""
    return f"{schedule_partition(schedule_id):02x}"


def _schedule_of(schedule_id: str, meta: Any, body: Any) -> ScheduleRecord:
    """A stored schedule from its meta text and JSON body (`_scripts`, schedules as data)."""
    version, created_at, updated_at, key, task = _s(meta).split(" ", 4)
    spec, args, options, paused = json.loads(_s(body))
    return ScheduleRecord(schedule_id, task, spec, args, options, bool(paused),
                          None if key == "-" else int(key, 16) - _DUE_BIAS, int(version), int(created_at),
                          int(updated_at))


def _records(reply: Sequence[Any]) -> list[ScheduleRecord | None]:
    """The records of a GET_SCHEDULES or READ_SCHEDULES reply, None where there is none."""
    ids, metas, bodies = reply
    return [None if meta is None or body is None else _schedule_of(_s(i), meta, body)
            for i, meta, body in zip(ids, metas, bodies, strict=True)]


def run_json(r: RunRecord) -> str:
    """A run as the history keeps it: `json.dumps(asdict(r), sort_keys=True, ensure_ascii=False)`,
    with `error` cut to `ERROR_LIMIT` characters.

    Written out field by field (once per run): the JSON encoder, which sorts a dict's keys and walks
    its values, costs several times more. Every number field is an int; every text goes through the
    encoder's own string escaping."""
    return (f'{{"attempt": {r.attempt:d}, "duration_ms": {r.duration_ms:d}, '
            f'"error": {_json_text(r.error[:ERROR_LIMIT])}, "instance": {_json_text(r.instance)}, '
            f'"job": {_json_text(r.job)}, "outcome": {_json_text(r.outcome)}, "slot": {r.slot:d}, '
            f'"started_at": {r.started_at:d}, "token": {r.token:d}}}')


def _wait_replicas(value: object) -> int:
    """`wait_replicas` as a non-negative int, or ValueError quoting it."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        raise ValueError(f"invalid wait_replicas {value!r}: use a whole number of replicas, 0 (the default, "
                         f"no wait) or more, e.g. wait_replicas=1")
    return int(text)


class RedisBackend(RedisStore, LeaseBackendBase):
    """A lease backend on Redis: every operation is one Lua script, releases are pushed by pub/sub."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.CLAIM, Capability.LEASE, Capability.NOTIFY, Capability.INSPECT, Capability.CONTROL,
         Capability.HISTORY, Capability.ANNOUNCE, Capability.FORGET, Capability.SCHEDULES}
    )
    url_schemes: ClassVar[tuple[str, ...]] = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster",
                                              "redis+sentinel", "rediss+sentinel")
    _schemes: ClassVar[dict[str, str]] = {s: s for s in url_schemes}

    _url_options: ClassVar[tuple[str, ...]] = ("prefix", "wait_replicas", "wait_timeout")

    def __init__(self, redis: Any, *, prefix: str = "anarchon", wait_replicas: int = 0,
                 wait_timeout: Duration = 1.0) -> None:
        options = self._setup(redis, prefix, {"wait_replicas": wait_replicas, "wait_timeout": wait_timeout})
        self.wait_replicas = _wait_replicas(options.get("wait_replicas", wait_replicas))
        """Replicas that must acknowledge a won claim before it is reported as won (0: none)."""
        self.wait_timeout_ms = parse_duration(options.get("wait_timeout", wait_timeout), name="wait_timeout")
        """How long a claim waits for those replicas, in milliseconds."""
        if self.wait_replicas and self.wait_timeout_ms >= OP_TIMEOUT_S * 1000:
            raise ValueError(f"wait_timeout must be shorter than {OP_TIMEOUT_S:g} s (one operation's "
                             f"deadline), not {self.wait_timeout_ms} ms: use a shorter one, e.g. 1s")
        self._indexed: set[tuple[str, str]] = set()
        self._indexed_at = time.monotonic()
        self._callbacks: dict[str, list[ReleaseCallback]] = {}
        self._win_callbacks: dict[str, list[WinsCallback]] = {}
        """Each namespace's wins channel, and who hears its pushes."""
        self._announce: dict[str, list[Any]] = {}
        """Each namespace's trailing claim-script arguments: its wins channel and job-key prefix length."""
        self._key_cache: dict[tuple[str, str], list[str]] = {}
        self._channels: dict[str, str] = {}
        """Each namespace's release channel (named once, not per release)."""
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._closed = False
        self._cluster = False

    @classmethod
    def from_url(cls, url: str) -> RedisBackend:
        """Build from a URL; `?prefix=` sets the key prefix, `?wait_replicas=1&wait_timeout=1s` make
        each win durable on a replica before it is reported."""
        return cls(url)

    async def _prepare(self) -> None:
        """Check the server answers and load the scripts."""
        self._closed = False
        # A Cluster client routes each script call by its keys: there, one call per job.
        self._cluster = hasattr(self.client, "get_nodes")
        if self._cluster:
            # One script call per job there: a PUBLISH per won job would cost more than it saves.
            self.capabilities = frozenset(type(self).capabilities - {Capability.ANNOUNCE})  # type: ignore[misc]
        scripts = (_CLAIM, _CLAIM_BATCH, _RENEW, _RENEW_BATCH, _RELEASE, _RELEASE_BATCH, _INSPECT,
                   _SET_CONTROL, _RECORD_RUNS, _RECORD_RUNS_BATCH, _PUBLISH_CATALOGUE, _CATALOGUE,
                   *_SCHEDULE_SCRIPTS)
        async with self._op("connecting"):
            if self._cluster:  # SCRIPT LOAD goes to every primary, one command at a time
                await self.client.ping()
                for script in scripts:
                    await self.client.script_load(script.source)
                return
            # One round trip, not one per script: every replica (and its keeper's connection) opens this way.
            pipe = self.client.pipeline(transaction=False)
            pipe.ping()
            for script in scripts:
                pipe.script_load(script.source)
            await pipe.execute()

    async def _shutdown(self) -> None:
        """Stop the release listener."""
        self._closed = True
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
        self._callbacks.clear()
        self._win_callbacks.clear()

    # -- claims --------------------------------------------------------------------------------

    def _job_keys(self, namespace: str, job: str) -> list[str]:
        keys = self._key_cache.get((namespace, job))
        if keys is None:
            if len(self._key_cache) > 100_000:
                self._key_cache.clear()
            keys = self._key_cache[(namespace, job)] = [self.keys.job(namespace, job),
                                                         self.keys.others(namespace, job)]
        return keys

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch in one round trip (see `LeaseBackend.claim`): one script call per request on a
        Cluster client, else one script call per chunk of `BATCH` requests."""
        if not requests:
            return []
        fresh = self._unindexed(requests)

        def index(pipe: Any) -> None:
            # The name index lives outside the job's hash slot, so it is written beside the script.
            for ns, names in fresh.items():
                pipe.sadd(self.keys.index(ns), *sorted(names))

        wait = self.wait_timeout_ms if self.wait_replicas and not self._cluster else 0
        waited: list[int] = []
        if self._cluster:
            calls = [(self._job_keys(r.namespace, r.job), _claim_args(r)) for r in requests]
            replies = await self._eval_many(_CLAIM, calls, "claiming", extra=index)
        else:
            chunks = self._claim_chunks(requests)
            replies = self._flat(await self._eval_many(_CLAIM_BATCH, chunks, "claiming", extra=index,
                                                       wait=wait, waited=waited), len(requests), "claiming")
        results = [self._result(r, reply) for r, reply in zip(requests, replies, strict=True)]
        if self.wait_replicas:
            won = [r for r, result in zip(requests, results, strict=True) if result.lease is not None]
            if won:
                if self._cluster:
                    waited = await self._wait_on_masters(won)
                self._check_durable(won, waited)
        return results

    def _claim_chunks(self, requests: Sequence[ClaimRequest]) -> list[tuple[list[str], list[Any]]]:
        """`CLAIM_BATCH`'s keys and arguments, `BATCH` requests per chunk: the announcement's two
        arguments, then each run of consecutive requests that share their arguments as its length
        and the 8 arguments of `_claim_args`."""
        cache = self._key_cache  # (its hit inline: this runs once per claim attempt)
        tail = self._announced(requests)
        chunks = []
        for start in range(0, len(requests), BATCH):
            keys: list[str] = []
            args: list[Any] = list(tail)
            run: ClaimRequest | None = None
            at = 0  # where the run's length is in `args`
            for r in requests[start:start + BATCH]:
                keys += cache.get((r.namespace, r.job)) or self._job_keys(r.namespace, r.job)
                if run is not None and (r.slot == run.slot and r.stale_after == run.stale_after
                                        and r.fingerprint == run.fingerprint and r.owner == run.owner
                                        and r.lease_ms == run.lease_ms and r.overlap == run.overlap
                                        and r.max_attempts == run.max_attempts
                                        and r.max_skew_ms == run.max_skew_ms):
                    args[at] += 1
                    continue
                run, at = r, len(args)
                args.append(1)
                args += _claim_args(r)
            chunks.append((keys, args))
        return chunks

    async def _wait_on_masters(self, won: Sequence[ClaimRequest]) -> list[int]:
        """On a Cluster: `WAIT` on each master that holds a won job, after a write of its own on the
        same connection (WAIT counts its connection's writes; this one follows the claims, so it
        covers them). The replicas each WAIT counted."""
        from redis.asyncio.cluster import PipelineCommand

        markers: dict[Any, str] = {}
        for r in won:
            key = self.keys.job(r.namespace, r.job) + ":durable"
            markers.setdefault(self.client.get_node_from_key(key), key)

        async def one(node: Any, key: str) -> int:
            commands = [PipelineCommand(0, "SET", key, "1", "PX", self.wait_timeout_ms + 1000),
                        PipelineCommand(1, "WAIT", self.wait_replicas, self.wait_timeout_ms)]
            await node.execute_pipeline(commands)
            for command in commands:
                if isinstance(command.result, BaseException):
                    raise command.result
            acked: Any = commands[1].result
            return int(acked)

        async with self._op("waiting for replicas"):
            return list(await asyncio.gather(*(one(node, key) for node, key in markers.items())))

    def _check_durable(self, won: Sequence[ClaimRequest], waited: Sequence[int]) -> None:
        """Raise BackendUnavailable when a WAIT counted fewer than `wait_replicas` replicas: the
        wins are not reported (a failover could lose them)."""
        acked = min(waited, default=0)
        if acked >= self.wait_replicas:
            return
        raise BackendUnavailable(
            f"{self._drv.name} at {self.url}: {len(won)} won claim(s) (first {won[0].job!r} "
            f"slot={won[0].slot}) "
            f"reached {acked} of the {self.wait_replicas} replica(s) that wait_replicas asks for within "
            f"{self.wait_timeout_ms} ms, so they are not reported as won (a failover could lose them); "
            f"each stays in the store until its lease ends and is then taken over. Check the replicas "
            f"(INFO replication), raise wait_timeout, or lower wait_replicas"
        )

    def _announced(self, requests: Sequence[ClaimRequest]) -> list[Any]:
        """The claim script's trailing arguments: where it announces the batch's wins (capability
        `announce`), or nowhere for a batch that spans namespaces."""
        namespace = requests[0].namespace
        tail = self._announce.get(namespace)
        if tail is None:
            if len(self._announce) > 1000:
                self._announce.clear()
            tail = self._announce[namespace] = [self.keys.wins(namespace),
                                                len(self.keys.job_prefix(namespace).encode())]
        if any(r.namespace != namespace for r in requests):
            return ["", 0]
        return tail

    def _unindexed(self, requests: Sequence[ClaimRequest]) -> dict[str, set[str]]:
        """The job names this backend has not added to their namespace's index lately.

        Every name is added again every `_INDEX_REFRESH_S`, so an index lost with the data (a
        restart without persistence) is rebuilt, without an SADD of every name on every claim.
        """
        now = time.monotonic()
        if now - self._indexed_at > _INDEX_REFRESH_S:
            self._indexed.clear()
            self._indexed_at = now
        fresh: dict[str, set[str]] = {}
        for r in requests:
            key = (r.namespace, r.job)
            if key not in self._indexed:
                self._indexed.add(key)
                fresh.setdefault(r.namespace, set()).add(r.job)
        return fresh

    async def _eval_calls(
        self, script: Script, batch_script: Script, calls: Sequence[tuple[list[str], list[Any]]], doing: str,
    ) -> list[Any]:
        """One reply per call, in one round trip: `script` once per call on a Cluster client (each
        call routed by its keys), else `batch_script` (`_scripts._batch`: the same body in a loop)
        per chunk of `BATCH` calls."""
        if self._cluster:
            return await self._eval_many(script, calls, doing)
        chunks = []
        for start in range(0, len(calls), BATCH):
            keys: list[str] = []
            args: list[Any] = []
            for k, a in calls[start:start + BATCH]:
                keys += k
                args += a
            chunks.append((keys, args))
        return self._flat(await self._eval_many(batch_script, chunks, doing), len(calls), doing)

    def _flat(self, replies: Sequence[list[Any]], calls: int, doing: str) -> list[Any]:
        """A batch script's replies, one list per chunk, as one reply per call; a count that differs
        from the calls' is a BackendError."""
        out = [reply for chunk in replies for reply in chunk]
        if len(out) != calls:
            problem = RuntimeError(f"{len(out)} replies for {calls} calls")
            raise self._drv.error(problem, self._where, doing)
        return out

    @staticmethod
    def _result(r: ClaimRequest, reply: list[Any]) -> ClaimResult:
        # (Inline rather than through _opt_s and _opt_i: this runs once per claim attempt.)
        code, holder, attempt, expires, now, prev, fingerprint, record_slot = reply[:8]
        reissued = code == _REISSUED
        outcome = ClaimOutcome.WON if reissued else _OUTCOMES.get(code) or ClaimOutcome(_s(code))
        if holder is not None:
            holder = holder.decode() if type(holder) is bytes else str(holder)
        if fingerprint is not None:
            fingerprint = fingerprint.decode() if type(fingerprint) is bytes else str(fingerprint)
        attempt = int(attempt)
        expires_at = None if expires is None else int(expires)
        lease = None
        if outcome is ClaimOutcome.WON:
            assert expires_at is not None
            lease = Lease(r.namespace, r.job, r.slot, attempt, int(reply[8]), r.owner, expires_at)
        status = None if prev is None else (_STATUSES.get(prev) or JobStatus(_s(prev)))
        # (Positional: keywords cost a name match per field.)
        return ClaimResult(outcome, r.job, r.slot, lease, holder, attempt, expires_at, int(now), status,
                           fingerprint, None if record_slot is None else int(record_slot), reissued)

    def _renew_call(self, lease: Lease, lease_ms: int) -> tuple[list[str], list[Any]]:
        return (self._job_keys(lease.namespace, lease.job), [lease.slot, lease.token, lease.owner, lease_ms])

    @staticmethod
    def _renewed(lease: Lease, expires: Any) -> Lease | None:
        if expires is None:
            return None
        return Lease(lease.namespace, lease.job, lease.slot, lease.attempt, lease.token, lease.owner,
                     int(expires))

    async def renew_many(self, renewals: Sequence[tuple[Lease, int]]) -> list[Lease | None]:
        """Renew a batch of leases in one round trip (see `LeaseBackend.renew`): one script call per
        lease on a Cluster client, else one script call per chunk of `BATCH` leases."""
        if not renewals:
            return []
        calls = [self._renew_call(lease, lease_ms) for lease, lease_ms in renewals]
        replies = await self._eval_calls(_RENEW, _RENEW_BATCH, calls, "renewing")
        return [self._renewed(lease, expires) for (lease, _), expires in zip(renewals, replies, strict=True)]

    def _release_call(self, lease: Lease, outcome: ReleaseOutcome) -> tuple[list[str], list[Any]]:
        channel = self._channels.get(lease.namespace)
        if channel is None:
            channel = self._channels[lease.namespace] = self.keys.channel(lease.namespace)
        return (self._job_keys(lease.namespace, lease.job),
                [lease.slot, lease.token, lease.owner, _RELEASED_AS[outcome], channel, lease.job])

    async def release_many(self, releases: Sequence[tuple[Lease, ReleaseOutcome]]) -> list[bool]:
        """End a batch of runs in one round trip (see `LeaseBackend.release`): one script call per
        release on a Cluster client, else one script call per chunk of `BATCH` releases."""
        if not releases:
            return []
        calls = [self._release_call(lease, outcome) for lease, outcome in releases]
        replies = await self._eval_calls(_RELEASE, _RELEASE_BATCH, calls, "releasing")
        return [bool(int(done)) for done in replies]

    # -- inspection ------------------------------------------------------------------------------

    @staticmethod
    def _state(namespace: str, job: str, reply: list[Any]) -> JobState | None:
        if len(reply) < 9:
            return None
        record = LeaseRecord(int(reply[1]), int(reply[2]), int(reply[3]), _s(reply[4]),
                             JobStatus(_s(reply[5])), int(reply[6]), _s(reply[7]), int(reply[8]))
        return JobState.of(record, namespace=namespace, job=job, now=int(reply[0]))

    async def inspect(self, namespace: str, job: str) -> JobState | None:
        """Read one job's newest record."""
        [reply] = await self._eval_many(_INSPECT, [(self._job_keys(namespace, job), [])], "inspecting")
        return self._state(namespace, job, reply)

    async def jobs(self, namespace: str) -> list[JobState]:
        """Read every job's newest record in a namespace, from the namespace's name index."""
        async with self._op("listing jobs"):
            names = sorted(_s(n) for n in await self.client.smembers(self.keys.index(namespace)))
        if not names:
            return []
        calls: list[tuple[list[str], list[Any]]] = [(self._job_keys(namespace, n), []) for n in names]
        replies = await self._eval_many(_INSPECT, calls, "inspecting")
        states = [self._state(namespace, n, reply) for n, reply in zip(names, replies, strict=True)]
        return [s for s in states if s is not None]

    # -- controls --------------------------------------------------------------------------------

    async def set_control(self, namespace: str, job: str, *, paused: bool | None = None,
                          trigger: bool = False) -> JobControl:
        """Set a job's paused flag and/or issue a trigger, and push the change, in one script (see
        `ControlBackend`)."""
        flag = "" if paused is None else str(int(paused))
        call = ([self.keys.controls(namespace)], [job, flag, str(int(trigger)), self.keys.channel(namespace)])
        [reply] = await self._eval_many(_SET_CONTROL, [call], "setting a control")
        return JobControl(bool(int(reply[0])), int(reply[1]))

    async def controls(self, namespace: str) -> dict[str, JobControl]:
        """Read every controlled job's controls in a namespace: one HGETALL."""
        async with self._op("reading controls"):
            raw = await self.client.hgetall(self.keys.controls(namespace))
        found: dict[str, JobControl] = {}
        for job, value in raw.items():
            paused, _, trigger = _s(value).partition(":")
            found[_s(job)] = JobControl(paused == "1", int(trigger))
        return found

    # -- history ---------------------------------------------------------------------------------

    async def publish_catalogue(self, namespace: str, entries: Sequence[CatalogueEntry], ttl_ms: int) -> None:
        """Upsert one entry per (job, instance) in one script; drop expired ones (see `HistoryBackend`)."""
        args: list[Any] = [ttl_ms]
        key, body = _JSON_KEY, _JSON_BODY
        for e in entries:
            args.append(key([e.job, e.instance]))
            args.append(body({
                "schedule": e.schedule, "kind": e.kind, "timezone": e.timezone, "options": e.options,
                "next_slot": e.next_slot, "fingerprint": e.fingerprint,
            }))
        await self._eval_many(_PUBLISH_CATALOGUE, [([self.keys.catalogue(namespace)], args)],
                              "publishing the catalogue")

    async def catalogue(self, namespace: str) -> list[CatalogueEntry]:
        """Every live catalogue entry in a namespace, by job then instance: one script."""
        [reply] = await self._eval_many(_CATALOGUE, [([self.keys.catalogue(namespace)], [])],
                                        "reading the catalogue")
        now, flat = int(reply[0]), reply[1]
        found: list[CatalogueEntry] = []
        for i in range(0, len(flat), 2):
            expires, seen, body = _s(flat[i + 1]).split("|", 2)
            if int(expires) <= now:
                continue
            job, instance = json.loads(_s(flat[i]))
            e = json.loads(body)
            found.append(CatalogueEntry(job=job, instance=instance, schedule=e["schedule"], kind=e["kind"],
                                        timezone=e["timezone"], options=e["options"],
                                        next_slot=e["next_slot"], seen_at=int(seen),
                                        fingerprint=e.get("fingerprint", "")))
        found.sort(key=lambda e: (e.job, e.instance))
        return found

    async def record_runs(self, namespace: str, runs: Sequence[RunRecord], keep: int) -> None:
        """Append ended runs in one round trip: one script per `BATCH` jobs (per job on a Cluster)."""
        by_job: dict[str, list[Any]] = {}
        for r in runs:
            pairs = by_job.get(r.job)
            if pairs is None:
                pairs = by_job[r.job] = []
            pairs.append(r.slot * 1000 + min(r.attempt, 999))
            pairs.append(run_json(r))
        if not by_job:
            return
        if self._cluster:
            calls = [([self.keys.history(namespace, job)], [keep, *pairs]) for job, pairs in by_job.items()]
            await self._eval_many(_RECORD_RUNS, calls, "recording runs")
            return
        jobs = list(by_job.items())
        chunks = []
        for start in range(0, len(jobs), BATCH):
            keys: list[str] = []
            args: list[Any] = [keep]
            for job, pairs in jobs[start:start + BATCH]:
                keys.append(self.keys.history(namespace, job))
                args.append(len(pairs) // 2)
                args += pairs
            chunks.append((keys, args))
        await self._eval_many(_RECORD_RUNS_BATCH, chunks, "recording runs")

    async def history(self, namespace: str, job: str, limit: int) -> list[RunRecord]:
        """A job's newest runs, newest first, at most `limit`: one ZREVRANGE."""
        if limit <= 0:
            return []
        async with self._op("reading history"):
            raw = await self.client.zrevrange(self.keys.history(namespace, job), 0, limit - 1)
        return [RunRecord(**json.loads(_s(member))) for member in raw]

    # -- forget ----------------------------------------------------------------------------------

    async def forget(self, namespace: str, job: str) -> bool:
        """Delete a job's hash, older slots and runs (one DEL: they share a hash slot), then its controls,
        catalogue entries and name in the index: one command each, not atomic (see `ForgetBackend`)."""
        keys = self.keys
        catalogue = keys.catalogue(namespace)
        async with self._op("forgetting a job"):
            deleted = int(await self.client.delete(keys.job(namespace, job), keys.others(namespace, job),
                                                   keys.history(namespace, job)))
            deleted += int(await self.client.hdel(keys.controls(namespace), job))
            fields = [f for f in await self.client.hkeys(catalogue) if json.loads(_s(f))[0] == job]
            if fields:
                deleted += int(await self.client.hdel(catalogue, *fields))
            deleted += int(await self.client.srem(keys.index(namespace), job))
        return deleted > 0

    async def namespaces(self) -> list[str]:
        """Every namespace that holds a key under this backend's prefix: one SCAN (on every primary of
        a Cluster)."""
        start = "{" + self.keys.prefix + ":"
        found: set[str] = set()
        async with self._op("listing namespaces"):
            async for raw in self.client.scan_iter(match=_glob_escape(start) + "*", count=1000):
                key = _s(raw)
                if key.endswith("}:sched:version"):
                    continue  # the change counter outlives the schedules: alone, it holds nothing
                rest = key[len(start):]
                cut = min((i for i in (rest.find(":"), rest.find("}")) if i >= 0), default=len(rest))
                found.add(rest[:cut].replace("%3A", ":").replace("%25", "%"))
        return sorted(found)

    # -- schedules as data -----------------------------------------------------------------------

    async def put_schedule(self, namespace: str, write: ScheduleWrite, *,
                           expect: int | Literal["absent", "any"]) -> ScheduleWriteResult:
        """Write a schedule by `expect`, bump the change counter and push the change, in one script
        (see `ScheduleBackend.put_schedule`)."""
        check_expect(expect)
        w = write
        body = json.dumps([w.spec, w.args, w.options, int(w.paused)], ensure_ascii=False,
                          separators=(",", ":"))
        call = (self.keys.schedules(namespace),
                [w.id, w.task, body, due_key(w.next_due), _part(w.id), str(expect),
                 self.keys.channel(namespace)])
        [reply] = await self._eval_many(_PUT_SCHEDULE, [call], "writing a schedule")
        return self._write_result(w.id, reply)

    async def put_schedules(self, namespace: str, writes: Sequence[ScheduleWrite], *,
                            expect: Literal["absent", "any"]) -> list[ScheduleWriteResult]:
        """Write many schedules, each judged alone, in order: one script per chunk of `_PUT_CHUNK` (each
        atomic, one push each), the chunks in one pipeline (see `ScheduleBackend.put_schedules`)."""
        check_schedule_batch(writes, expect)
        if not writes:
            return []
        keys, channel = self.keys.schedules(namespace), self.keys.channel(namespace)
        calls: list[tuple[list[str], list[Any]]] = []
        for start in range(0, len(writes), _PUT_CHUNK):
            args: list[Any] = [expect, channel]
            for w in writes[start:start + _PUT_CHUNK]:
                body = json.dumps([w.spec, w.args, w.options, int(w.paused)], ensure_ascii=False,
                                  separators=(",", ":"))
                args += [w.id, w.task, body, due_key(w.next_due), _part(w.id)]
            calls.append((keys, args))
        replies = await self._eval_many(_PUT_SCHEDULES, calls, "writing schedules")
        out: list[ScheduleWriteResult] = []
        for start, reply in zip(range(0, len(writes), _PUT_CHUNK), replies, strict=True):
            out += [self._write_result(w.id, r)
                    for w, r in zip(writes[start:start + _PUT_CHUNK], reply, strict=True)]
        return out

    async def remove_schedule(self, namespace: str, schedule_id: str, *, expect: int | None = None
                              ) -> ScheduleWriteResult:
        """Remove a schedule (if its version is `expect`, when given), bump the change counter and push
        the change, in one script (see `ScheduleBackend.remove_schedule`)."""
        call = (self.keys.schedules(namespace),
                [schedule_id, _part(schedule_id), "" if expect is None else str(expect),
                 self.keys.channel(namespace)])
        [reply] = await self._eval_many(_REMOVE_SCHEDULE, [call], "removing a schedule")
        return self._write_result(schedule_id, reply)

    @staticmethod
    def _write_result(schedule_id: str, reply: Sequence[Any]) -> ScheduleWriteResult:
        record = _schedule_of(schedule_id, reply[1], reply[2]) if len(reply) > 1 else None
        return ScheduleWriteResult(bool(int(reply[0])), record)

    async def get_schedules(self, namespace: str, ids: Sequence[str]) -> list[ScheduleRecord | None]:
        """The schedules with these ids, in order, read by one script."""
        if not ids:
            return []
        [reply] = await self._eval_many(_GET_SCHEDULES, [(self.keys.schedules(namespace), list(ids))],
                                        "reading schedules")
        return _records(reply)

    async def _read(self, namespace: str, index: int, low: bytes, high: bytes, limit: int, skip: int,
                    doing: str) -> list[ScheduleRecord]:
        """A page of one of the namespace's indexes, by lex range, with each member's schedule."""
        call = (self.keys.schedules(namespace), [index, low, high, limit, skip])
        [reply] = await self._eval_many(_READ_SCHEDULES, [call], doing)
        return [r for r in _records(reply) if r is not None]

    async def list_schedules(self, namespace: str, *, after: str = "", limit: int, task: str | None = None,
                             prefix: str = "") -> list[ScheduleRecord]:
        """A page of schedules by id: one ZRANGEBYLEX of the ids (or of the task's ids), in one script."""
        if limit <= 0:
            return []
        base = b"" if task is None else task.encode() + b"\0"
        start, first = after.encode(), prefix.encode()
        # From the cursor, or from the prefix when the cursor is below it; up to the prefix's end (no id
        # holds the byte 0xff: UTF-8 never does).
        low = b"(" + base + start if start >= first else b"[" + base + first
        high = b"(" + base + first + b"\xff"
        index = _INDEX_IDS if task is None else _INDEX_TASKS
        return await self._read(namespace, index, low, high, limit, len(base), "listing schedules")

    async def due_schedules(self, namespace: str, *, until: int, tasks: Sequence[str] | None = None,
                            partitions: Sequence[int] | None = None, after: tuple[int, str] | None = None,
                            limit: int) -> list[ScheduleRecord]:
        """A page of the due index: one ZRANGEBYLEX from the cursor up to `until` per partition asked
        (per task and partition, with `tasks`), merged, in one script (see
        `ScheduleBackend.due_schedules`)."""
        wanted = None if tasks is None else list(dict.fromkeys(tasks))
        parts = range(SCHEDULE_PARTITIONS) if partitions is None else sorted(
            {p for p in partitions if 0 <= p < SCHEDULE_PARTITIONS})
        if limit <= 0 or until < -_DUE_BIAS or wanted == [] or not parts:
            return []
        cursor = b"" if after is None else due_key(max(after[0], -_DUE_BIAS)).encode() + after[1].encode()
        above = b"" if until >= _DUE_BIAS - 1 else due_key(until + 1).encode()
        if wanted is None:
            index, ranges = _INDEX_PDUE, [f"{p:02x}".encode() for p in parts]
        else:
            index = _INDEX_PTASKDUE
            ranges = [t.encode() + f"\0{p:02x}".encode() for t in wanted for p in parts]
        call = (self.keys.schedules(namespace), [index, limit, cursor, above, *ranges])
        while True:
            [reply] = await self._eval_many(_DUE_SCHEDULES, [call], "reading the due schedules")
            if int(reply[0]):
                return [r for r in _records(reply[1:]) if r is not None]
            await self._move_due_index(namespace)

    async def _move_due_index(self, namespace: str) -> None:
        """Move the entries of the previous release's due index (unpartitioned: `due`, `taskdue`) into
        the partitioned ones, a chunk per script. Each chunk is atomic, and moving one twice puts the
        same entries; replicas moving at once mostly take different chunks (one at random)."""
        keys = self.keys.schedules(namespace)
        old = keys[_INDEX_OLD_DUE - 1]
        while True:
            async with self._op("reading the previous due index"):
                left = int(await self.client.zcard(old))
                start = random.randrange(max(left // _MOVE_CHUNK, 1)) * _MOVE_CHUNK
                members: list[Any] = await self.client.zrange(old, start, start + _MOVE_CHUNK - 1)
            args: list[Any] = []
            for member in members:
                raw = member if isinstance(member, bytes) else str(member).encode()
                args += [raw, _part(raw[16:].decode())]
            [left] = await self._eval_many(_MOVE_DUE, [(keys, args)], "moving the previous due index")
            if not int(left):
                return

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        """Move schedules forward in the due index, each only while it has the version given, in one
        script; the change counter is left alone (see `ScheduleBackend.advance_schedules`)."""
        if not moves:
            return
        args: list[Any] = []
        for schedule_id, version, next_due in moves:
            args += [schedule_id, version, due_key(next_due), _part(schedule_id)]
        await self._eval_many(_ADVANCE_SCHEDULES, [(self.keys.schedules(namespace), args)],
                              "advancing schedules")

    async def schedules_version(self, namespace: str) -> int:
        """The namespace's change counter: one GET (0 before any write)."""
        async with self._op("reading the schedules' change counter"):
            found = await self.client.get(self.keys.schedules(namespace)[5])
        return 0 if found is None else int(found)

    # -- pushed releases -------------------------------------------------------------------------

    async def subscribe(self, namespace: str, callback: ReleaseCallback) -> None:
        """Call `callback(job, slot)` on this event loop for every release in `namespace`."""
        channel = self.keys.channel(namespace)
        self._callbacks.setdefault(channel, []).append(callback)
        await self._restart_listener()

    async def subscribe_wins(self, namespace: str, callback: WinsCallback) -> None:
        """Call `callback(owner, [(job, slot), ...])` on this event loop for the claims won in `namespace`
        (one push per claim script call, sent by the script itself)."""
        self._win_callbacks.setdefault(self.keys.wins(namespace), []).append(callback)
        await self._restart_listener()

    async def _restart_listener(self) -> None:
        """(Re)start the listener so it subscribes to every channel; it reconnects by itself."""
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        self._listening.clear()
        self._listener = asyncio.create_task(self._listen(), name=f"anarchon-redis-listener {self.url}")
        # Wait briefly for the subscription, so a release right after start() is not missed.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=2)

    async def _listen(self) -> None:
        delay = 0.05
        while not self._closed:
            node_client = pubsub = None
            try:
                node_client = self._pubsub_client()
                pubsub = (node_client or self.client).pubsub()
                await pubsub.subscribe(*self._callbacks, *self._win_callbacks)
                while not self._closed:
                    # Blocks until a message comes (no timeout: no wake-up a second, and no timer per
                    # message); `close` and `_restart_listener` cancel this task.
                    msg = await pubsub.get_message(ignore_subscribe_messages=False, timeout=None)
                    if msg is None:
                        continue
                    kind = _s(msg.get("type"))
                    if kind == "subscribe":
                        self._listening.set()
                        delay = 0.05
                    elif kind == "message":
                        self._dispatch(_s(msg["channel"]), _s(msg["data"]))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                err = self._drv.error(exc, self._where, "listening for releases")
                log.warning("%s; reconnecting in %.2f s (backups poll until then)", err, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(pubsub.aclose())
                if node_client is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(node_client.aclose())

    def _pubsub_client(self) -> Any:
        """On a Cluster: a plain client on one node, picked at random at each reconnect (a Cluster
        delivers every PUBLISH on every node). Else None: the backend's own client subscribes."""
        if not self._cluster:
            return None
        node = random.choice(self.client.get_nodes())
        kw = node.connection_kwargs
        return self._drv.client_type(
            host=node.host, port=node.port, username=kw.get("username"), password=kw.get("password"),
            ssl=bool(kw.get("ssl", False)), socket_connect_timeout=kw.get("socket_connect_timeout", 5.0))

    def _dispatch(self, channel: str, payload: str) -> None:
        hearers = self._win_callbacks.get(channel)
        if hearers is not None:
            deliver_wins(payload, list(hearers), channel, log)
            return
        slot_text, _, job = payload.partition(":")
        try:
            slot = int(slot_text)
        except ValueError:
            log.warning("ignored a malformed release message %r on %s", payload, channel)
            return
        for callback in list(self._callbacks.get(channel, ())):
            try:
                callback(job, slot)
            except Exception:
                log.exception("release callback failed for %s slot=%d", job, slot)


class ValkeyBackend(RedisBackend):
    """The same lease backend over valkey-py (`valkey.asyncio.Valkey` or a `valkey://` URL)."""

    url_schemes: ClassVar[tuple[str, ...]] = ("valkey", "valkeys")
    _schemes: ClassVar[dict[str, str]] = {"valkey": "valkey", "valkeys": "valkeys", "unix": "unix"}

    @classmethod
    def _driver(cls) -> Driver:
        return valkey_driver()

    def __init__(self, valkey: Any, *, prefix: str = "anarchon", wait_replicas: int = 0,
                 wait_timeout: Duration = 1.0) -> None:
        super().__init__(valkey, prefix=prefix, wait_replicas=wait_replicas, wait_timeout=wait_timeout)

    @classmethod
    def from_url(cls, url: str) -> ValkeyBackend:
        """Build from a `valkey://` or `valkeys://` URL; `?prefix=` sets the key prefix,
        `?wait_replicas=` and `?wait_timeout=` as for RedisBackend."""
        return cls(url)
