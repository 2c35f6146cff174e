"""RedisStreamBackend: claim-only, one winner per (job, slot) through a per-job stream."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from anarchon import BackendError
from anarchon.backends import Capability, ClaimOutcome, ClaimRequest, ClaimResult, Lease

from . import _scripts
from ._lease import RedisStore, Script, _opt_s, _s

__all__ = ["RedisStreamBackend", "Strategy"]

Strategy = Literal["stream-id", "idmp", "script"]
"""How a stream picks the one winner of a slot."""

_STRATEGIES = ("stream-id", "idmp", "script")
_IDMP_MIN = (8, 6)
_PRODUCER = "anarchon"

# Creates the stream and sets its IDMP retention once: XCFGSET clears the IDMP map, so it must
# never run on a stream that already takes claims.
_IDMP_INIT = Script(r"""
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XADD', KEYS[1], '*', 'init', '1')
  redis.call('XCFGSET', KEYS[1], 'IDMP-DURATION', ARGV[1], 'IDMP-MAXSIZE', ARGV[2])
end
return 1
""")
_CLAIM = Script(_scripts.STREAM_CLAIM)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def _server(info: dict[Any, Any]) -> tuple[str, str]:
    """The server's name and version from `INFO server`: Valkey reports a frozen `redis_version`
    (7.2.4) beside its own `valkey_version`."""
    if _s(info.get("server_name", "")) == "valkey":
        return "Valkey", _s(info.get("valkey_version", "?"))
    return "Redis", _s(info.get("redis_version", "0"))


class RedisStreamBackend(RedisStore):
    """Claim-only on Redis streams: one winner per (job, slot); no lease, no takeover.

    - `stream-id`: `XADD <slot>-1` on the job's stream; the stream refuses an ID at or below its top.
    - `idmp`: `XADD … IDMP` (Redis >= 8.6), then the entry is read back to learn the winner.
    - `script`: a Lua check-then-XADD, one command per claim, which also names the holder.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.CLAIM})
    url_schemes: ClassVar[tuple[str, ...]] = ("redis+stream", "rediss+stream", "unix+stream")
    # The constructor also takes plain redis:// URLs; only the +stream schemes are registered.
    _schemes: ClassVar[dict[str, str]] = {"redis+stream": "redis", "rediss+stream": "rediss",
                                          "unix+stream": "unix", "redis": "redis", "rediss": "rediss",
                                          "unix": "unix"}
    _url_options: ClassVar[tuple[str, ...]] = ("prefix", "strategy", "maxlen", "idmp_duration")

    def __init__(
        self, redis: Any, *, strategy: Strategy = "stream-id", prefix: str = "anarchon",
        maxlen: int = 100, idmp_duration: int = 3600,
    ) -> None:
        options = self._setup(redis, prefix, {"strategy": strategy, "maxlen": maxlen,
                                              "idmp_duration": idmp_duration})
        strategy = options.get("strategy", strategy)  # type: ignore[assignment]
        if strategy not in _STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(_STRATEGIES)}")
        self.strategy: Strategy = strategy
        self.maxlen = int(options.get("maxlen", maxlen))
        self.idmp_duration = int(options.get("idmp_duration", idmp_duration))
        if self.maxlen < 1:
            raise ValueError(f"maxlen must be at least 1, not {self.maxlen!r}")
        if not 1 <= self.idmp_duration <= 86_400:
            raise ValueError(f"idmp_duration must be 1..86400 seconds (XCFGSET), not {self.idmp_duration!r}")

    @classmethod
    def from_url(cls, url: str) -> RedisStreamBackend:
        """`redis+stream://host/0?strategy=script&maxlen=100&prefix=anarchon`."""
        return cls(url)

    @property
    def horizon_ms(self) -> int | None:
        """`stream-id`/`script`: None (a slot at or below the stream's top never wins again);
        `idmp`: the IDMP retention, `idmp_duration` seconds."""
        return self.idmp_duration * 1000 if self.strategy == "idmp" else None

    async def _prepare(self) -> None:
        """Check the server; `idmp` is refused on Valkey and on servers older than Redis 8.6."""
        async with self._op("connecting"):
            info = await self.client.info("server")
        server, version = _server(info if isinstance(info, dict) else {})
        if self.strategy == "idmp" and (server != "Redis" or _version(version) < _IDMP_MIN):
            raise BackendError(
                f"strategy='idmp' needs Redis >= 8.6 (XADD … IDMP), but the server at {self.url} runs "
                f"{server} {version}: use Redis >= 8.6, or strategy='stream-id' or 'script'"
            )
        if self.strategy == "script":
            async with self._op("loading scripts"):
                await self.client.script_load(_CLAIM.source)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        """Claim a batch; `stream-id` and `script` take one round trip, `idmp` two."""
        if not requests:
            return []
        if self.strategy == "script":
            calls = [([self.keys.stream(r.namespace, r.job)], [r.slot, r.owner, self.maxlen])
                     for r in requests]
            replies = await self._eval_many(_CLAIM, calls, "claiming")
            return [self._result(r, bool(int(rep[0])), _opt_s(rep[1])) for r, rep in zip(requests, replies,
                                                                                         strict=True)]
        if self.strategy == "stream-id":
            return await self._claim_stream_id(requests)
        return await self._claim_idmp(requests)

    @staticmethod
    def _result(r: ClaimRequest, won: bool, holder: str | None) -> ClaimResult:
        if won:
            lease = Lease(r.namespace, r.job, r.slot, 1, 0, r.owner, 0)
            return ClaimResult(ClaimOutcome.WON, r.job, r.slot, lease=lease, holder=r.owner, attempt=1)
        return ClaimResult(ClaimOutcome.TAKEN, r.job, r.slot, holder=holder, attempt=1)

    @staticmethod
    def _owner(entries: Any) -> str | None:
        if not entries:
            return None
        fields = entries[0][1]
        value = fields.get(b"owner", fields.get("owner"))
        return _opt_s(value)

    async def _claim_stream_id(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        # XADD then XRANGE of the same ID, pipelined: the read names the winner, whoever it was.
        pipe = self.client.pipeline(transaction=False)
        for r in requests:
            key, entry_id = self.keys.stream(r.namespace, r.job), f"{r.slot}-1"
            pipe.xadd(key, {"owner": r.owner}, id=entry_id, maxlen=self.maxlen, approximate=True)
            pipe.xrange(key, entry_id, entry_id)
        async with self._op("claiming"):
            replies = await pipe.execute(raise_on_error=False)
        results = []
        for i, r in enumerate(requests):
            added, read = replies[2 * i], replies[2 * i + 1]
            if isinstance(added, BaseException) and not (
                isinstance(added, self._drv.response_error) and "equal or smaller" in str(added)
            ):
                raise self._drv.error(added, self._where, "claiming") from added
            if isinstance(read, BaseException):
                raise self._drv.error(read, self._where, "claiming") from read
            holder = self._owner(read)
            results.append(self._result(r, not isinstance(added, BaseException), holder))
        return results

    async def _claim_idmp(self, requests: Sequence[ClaimRequest]) -> list[ClaimResult]:
        streams = [self.keys.stream(r.namespace, r.job) for r in requests]
        pipe = self.client.pipeline(transaction=False)
        for key in dict.fromkeys(streams):
            pipe.evalsha(_IDMP_INIT.sha, 1, key, self.idmp_duration, 10_000)
        for r, key in zip(requests, streams, strict=True):
            pipe.execute_command("XADD", key, "IDMP", _PRODUCER, str(r.slot), "MAXLEN", "~", self.maxlen,
                                 "*", "owner", r.owner)
        async with self._op("claiming"):
            replies = await pipe.execute(raise_on_error=False)
        if any(isinstance(rep, self._drv.no_script) for rep in replies):
            async with self._op("loading scripts"):
                await self.client.script_load(_IDMP_INIT.source)
            return await self._claim_idmp(requests)
        ids = replies[-len(requests):]
        for rep in replies:
            if isinstance(rep, BaseException):
                raise self._drv.error(rep, self._where, "claiming") from rep
        # A duplicate gets the original entry's ID: read each entry back to learn who won.
        pipe = self.client.pipeline(transaction=False)
        for key, entry_id in zip(streams, ids, strict=True):
            pipe.xrange(key, entry_id, entry_id)
        async with self._op("claiming"):
            reads = await pipe.execute(raise_on_error=False)
        results = []
        for r, read in zip(requests, reads, strict=True):
            if isinstance(read, BaseException):
                raise self._drv.error(read, self._where, "claiming") from read
            holder = self._owner(read)
            results.append(self._result(r, holder == r.owner, holder))
        return results
