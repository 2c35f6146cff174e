"""The one place that knows the client libraries: building clients, and mapping their errors to ours."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from anarchon import BackendError, BackendUnavailable
from anarchon.backends import redact_url

__all__ = ["OP_TIMEOUT_S", "Driver", "REDIS", "split_url", "valkey_driver"]


@dataclass(frozen=True, slots=True)
class Driver:
    """A client library (redis-py or valkey-py) and the exception types that matter to us."""

    name: str
    from_url: Any
    blocking_pool: type[Any]
    client_type: type[Any]
    base_error: type[BaseException]
    unavailable: tuple[type[BaseException], ...]
    no_script: type[BaseException]
    response_error: type[BaseException]
    timeout: type[BaseException]
    """The client library's own timeout (not the builtin `TimeoutError`), one of `unavailable`."""
    cluster_type: type[Any] | None = None
    """The client library's Cluster client, which a backend also accepts in place of `client_type`."""

    def error(self, exc: BaseException, url: str, doing: str) -> BackendError:
        """Our exception for `exc`, naming the store by its redacted `url`."""
        text = _scrub(str(exc), url)
        if isinstance(exc, self.unavailable) or _retryable_reply(text):
            return BackendUnavailable(f"{self.name} at {redact_url(url)} unreachable while {doing}: {text}")
        return BackendError(f"{self.name} at {redact_url(url)} failed while {doing}: {text}")


def _retryable_reply(text: str) -> bool:
    # Replies that mean "the server is there but cannot serve right now": a restart loading its data,
    # a replica after failover, a Cluster resharding or down.
    return text.startswith(("LOADING", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "BUSY "))


def _scrub(text: str, url: str) -> str:
    """Remove the URL's password from `text`, should a client library ever echo it."""
    password = urlsplit(url).password if "://" in url else None
    if password:
        text = text.replace(password, "***")
    return text


def _redis_driver() -> Driver:
    import redis.asyncio
    import redis.exceptions as e
    from redis.asyncio.sentinel import MasterNotFoundError

    return Driver(
        name="redis",
        from_url=redis.asyncio.Redis.from_url,
        blocking_pool=redis.asyncio.BlockingConnectionPool,
        client_type=redis.asyncio.Redis,
        base_error=e.RedisError,
        unavailable=(e.ConnectionError, e.TimeoutError, e.BusyLoadingError, e.ReadOnlyError,
                     e.ClusterError, e.RedisClusterException, MasterNotFoundError),
        no_script=e.NoScriptError,
        response_error=e.ResponseError,
        timeout=e.TimeoutError,
        cluster_type=redis.asyncio.RedisCluster,
    )


def valkey_driver() -> Driver:
    """The valkey-py driver; raises ImportError naming the extra when valkey-py is missing."""
    try:
        import valkey.asyncio
        import valkey.exceptions as e
    except ImportError as exc:
        raise ImportError(
            "ValkeyBackend needs valkey-py: install it with `pip install 'anarchon-redis[valkey]'`"
        ) from exc
    return Driver(
        name="valkey",
        from_url=valkey.asyncio.Valkey.from_url,
        blocking_pool=valkey.asyncio.BlockingConnectionPool,
        client_type=valkey.asyncio.Valkey,
        base_error=e.ValkeyError,
        unavailable=(e.ConnectionError, e.TimeoutError, e.BusyLoadingError, e.ReadOnlyError),
        no_script=e.NoScriptError,
        response_error=e.ResponseError,
        timeout=e.TimeoutError,
    )


REDIS = _redis_driver()

# No per-read `socket_timeout`: each backend operation has one deadline of its own (OP_TIMEOUT_S).
_CLIENT_DEFAULTS: dict[str, float] = {"socket_connect_timeout": 5.0, "max_connections": 64}
OP_TIMEOUT_S = 10.0
"""How long one store operation (a claim batch, a renewal, a release batch) may take."""
_POOL_WAIT_S = 30.0


def split_url(url: str, ours: tuple[str, ...], scheme_map: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Split our query options (`ours`) off `url` and map its scheme to the client library's.

    Returns the client URL and our options.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in scheme_map:
        raise ValueError(
            f"unsupported URL scheme {scheme!r} in {redact_url(url)!r}: use one of {', '.join(scheme_map)}"
        )
    options: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in ours:
            options[key] = value
        else:
            rest.append((key, value))
    # Written out, not `urlunsplit`: that drops the `//` of a URL without a host (`unix:///tmp/r.sock`
    # becomes `unix:/tmp/r.sock`), which redis-py 8.2 refuses.
    query = urlencode(rest)
    client_url = (f"{scheme_map[scheme]}://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
                  + (f"#{parts.fragment}" if parts.fragment else ""))
    return client_url, options


def client_from_url(driver: Driver, client_url: str) -> Any:
    """A client for `client_url`, with timeouts so that a dead server cannot hang a claim forever.

    Its pool blocks (up to 30 s) when every connection is busy, instead of failing with "Too many
    connections": thousands of runs may end, and release, in the same millisecond.
    """
    parts = urlsplit(client_url)
    query = dict(parse_qsl(parts.query))
    kwargs: dict[str, Any] = {k: v for k, v in _CLIENT_DEFAULTS.items() if k not in query}
    if parts.scheme.endswith(("+cluster", "+sentinel")):
        return _multi_node_client(driver, client_url, kwargs)
    try:
        pool = driver.blocking_pool.from_url(client_url, timeout=_POOL_WAIT_S, **kwargs)
        pool.connection_class = _c_packing(pool.connection_class)
        return driver.client_type.from_pool(pool)
    except (ValueError, TypeError) as exc:
        reason = _scrub(str(exc), client_url)
        raise ValueError(f"invalid {driver.name} URL {redact_url(client_url)!r}: {reason}") from None


def _hosts(netloc: str, url: str, default_port: int) -> tuple[str | None, str | None, list[tuple[str, int]]]:
    """The user, password and (host, port) list of a netloc with comma-separated hosts."""
    auth, _, hosts = netloc.rpartition("@")
    user, _, password = auth.partition(":")
    nodes: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":") if ":" in item else (item.strip(), "", "")
        if not host or (port and not port.isdigit()):
            raise ValueError(f"invalid host {item!r} in {redact_url(url)!r}: write host:port,host:port")
        nodes.append((host.strip("[]"), int(port) if port else default_port))
    return unquote(user) or None, unquote(password) or None, nodes


def _multi_node_client(driver: Driver, url: str, kwargs: dict[str, Any]) -> Any:
    """A `RedisCluster` for `redis+cluster://h:p,h:p/`, or a Sentinel-managed master client for
    `redis+sentinel://h:p,h:p/master-name` (redis-py only)."""
    import redis.asyncio
    from redis.asyncio.cluster import ClusterNode
    from redis.asyncio.sentinel import Sentinel

    if driver.cluster_type is None:
        raise ValueError(f"{driver.name} has no Cluster or Sentinel URLs ({redact_url(url)!r}): use redis+cluster://")
    parts = urlsplit(url)
    tls = parts.scheme.startswith("rediss")
    if tls:
        kwargs["ssl"] = True
    for key, value in parse_qsl(parts.query):
        kwargs[key] = float(value) if key.endswith("timeout") else value
    if parts.scheme.endswith("+cluster"):
        user, password, nodes = _hosts(parts.netloc, url, 6379)
        kwargs.pop("max_connections", None)
        return driver.cluster_type(startup_nodes=[ClusterNode(h, p) for h, p in nodes], username=user,
                                   password=password, **kwargs)
    user, password, nodes = _hosts(parts.netloc, url, 26379)
    name, _, db = parts.path.strip("/").partition("/")
    if not name:
        raise ValueError(f"no master name in {redact_url(url)!r}: write redis+sentinel://h:p,h:p/mymaster")
    kwargs.pop("max_connections", None)
    sentinel_kwargs = {"socket_connect_timeout": kwargs.get("socket_connect_timeout", 5.0)}
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        nodes, sentinel_kwargs=sentinel_kwargs, username=user, password=password, **kwargs)
    return sentinel.master_for(name, redis_class=redis.asyncio.Redis, db=int(db or 0))


def _c_packing(connection_class: type[Any]) -> type[Any]:
    """`connection_class` packing commands with hiredis's C packer alone: the bytes sent are the same.

    A claim batch is a pipeline of one EVALSHA with a dozen arguments per job, and the async clients
    pack in Python (redis/redis-py#4176; where they use hiredis, as redis-py 8.2 does, they still
    encode every argument in Python first): 4 us per job of a 200-job claim batch on redis-py 8.2,
    0.8 us here, more CPU than anything else a replica spends per claim at thousands of jobs
    (scenario D of bench/run.py). `pack_command` is the connection's public method, but that a
    pipeline packs through it (`pack_commands`) is the library's own business:
    tests/test_redis_client.py fails if a client library stops doing so.
    """
    import hiredis  # a dependency of anarchon-redis

    pack = hiredis.pack_command

    def pack_command(self: Any, *args: Any) -> list[bytes]:
        first = args[0]
        if isinstance(first, str):
            first = first.encode()
        if b" " in first:  # 'SCRIPT LOAD': the server expects the words as separate arguments
            args = (*first.split(), *args[1:])
        return [pack(args)]

    return type(connection_class.__name__, (connection_class,), {"pack_command": pack_command})
