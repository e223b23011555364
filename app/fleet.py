"""Building the collaborators a process needs from its settings (Redis, store, provider)."""

from __future__ import annotations

import math
from typing import Any, cast

import httpx
import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode
from redis.exceptions import ClusterDownError
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

from app.config import Settings
from app.dispatch import Dispatcher
from app.fair_queue import PoolQueue
from app.lease import LeaseKeeper
from app.providers.openai_chat import ChatCompletionsProvider, model_http_client
from app.redis_url import (
    ClusterTarget,
    RedisTarget,
    SentinelTarget,
    is_unix_socket,
    sentinel_ssl,
)
from app.run import RunDeps
from app.store import ResponseStore
from app.tool_calls import ToolDeps
from app.tools.base import ExecutorRegistry, ToolKind
from app.tools.internal import InternalExecutor
from app.tools.kinds import KindContext
from app.tools.registry import KINDS

QUEUES = ("inference", *KINDS.queues)
"""Every queue of the fleet, declared explicitly (``task_create_missing_queues=False``)."""


def require_redis_url(settings: Settings) -> str:
    """The Redis URL; processes other than ``antwort up`` need one configured."""
    if not settings.redis_url:
        raise SystemExit("ANTWORT_REDIS_URL is not set (antwort up starts an embedded Redis).")
    return settings.redis_url


def require_redis(settings: Settings, *, broker: bool = False) -> RedisTarget:
    """Where the store (or with ``broker``, the Celery broker) lives; one must be configured."""
    require_redis_url(settings)
    target = settings.broker_redis if broker else settings.store_redis
    assert target is not None  # a Redis URL is set
    return target


OUTAGE_BACKOFF_CAP = 1.0
"""Longest wait, in seconds, between two tries of a command while Redis is away."""


def outage_retry(outage_seconds: float) -> Retry:
    """How a command that finds Redis gone is tried again: for about ``outage_seconds``.

    Refused connections fail at once, so the waits add up to the outage ridden out: 0.1, 0.2,
    0.4, 0.8 s, then a second each. The sleep is ``time.sleep``, which gevent patches in the
    gateway (``gateway/gunicorn_conf.py`` patches before redis is imported): a waiting request
    yields to the others.
    """
    ramp = 4  # the tries before the waits reach the cap (about 1.5 s in all)
    retries = ramp + math.ceil(max(0.0, outage_seconds - 1.5) / OUTAGE_BACKOFF_CAP)
    return Retry(
        ExponentialBackoff(cap=OUTAGE_BACKOFF_CAP, base=0.05),
        retries,
        supported_errors=(redis.ConnectionError, redis.TimeoutError),
    )


def make_redis(
    settings: Settings, *, rides_out_outages: bool = True, broker: bool = False
) -> redis.Redis:
    """A pooled client of the store's Redis (``broker``: the broker's).

    Its commands ride out an outage (or a Sentinel failover) of ``redis_outage_seconds``.

    ``rides_out_outages=False``: a command fails as soon as Redis is gone (the gateway's pub/sub
    hub, which reconnects on its own and then tells its listeners to catch up).
    """
    retry = (
        outage_retry(settings.redis_outage_seconds)
        if rides_out_outages
        else Retry(ExponentialBackoff(), 0)
    )
    options: dict[str, Any] = {
        "max_connections": settings.redis_max_connections,
        "timeout": 30,
        # who waited 5 s for a connection is served in the order they came (app/fair_queue.py)
        "queue_class": PoolQueue,
        "health_check_interval": 30,
        "socket_keepalive": True,
        "retry": retry,
    }
    target = require_redis(settings, broker=broker)
    if isinstance(target, SentinelTarget):
        return _sentinel_master(target, options)
    if isinstance(target, ClusterTarget):
        return _cluster(target, options)
    if is_unix_socket(target):
        del options["socket_keepalive"]  # a TCP option: a Unix socket's connection refuses it
    # A blocking pool: a burst beyond the pool waits for a connection instead of failing
    # (redis-py's default pool raises MaxConnectionsError at 100).
    pool = redis.BlockingConnectionPool.from_url(target, **options)
    return redis.Redis.from_pool(pool)  # the client's own: closed with it


class SentinelBlockingConnectionPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """redis-py's Sentinel pool, blocking as the fleet's pools do when they are all in use.

    Each new connection asks the sentinels for the master's address, so a client finds the new
    master after a failover by itself; a connection to a demoted master is dropped on its first
    READONLY reply (``SentinelManagedConnection``), and the command tried again.
    """


class FailoverConnection(SentinelManagedConnection):
    """A connection to a Sentinel master that asks where the master is on every reconnect.

    redis-py 8.1 asks only when the pool hands out a connection: a command's retry reconnects
    to the address it had, so a command in flight when the master died kept knocking on the
    dead master until the outage retry gave up (redis/redis-py#3874, open; measured here: two
    turns of four failed after ``redis_outage_seconds``). Drop this once redis-py fixes it.
    """

    def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        """Connect (to the master the sentinels name now, when this is a reconnect)."""
        # connect_to (the pool's own path) passes retry_socket_connect=False after its lookup
        if retry_socket_connect and self._sock is None and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health, retry_socket_connect)


class SentinelMaster(redis.Redis):
    """A Sentinel master's client whose ``close()`` closes its connections to the sentinels too.

    redis-py 8.1's client closes the master's pool only; the sentinels it asked stayed
    connected until the garbage collector found them.
    """

    def close(self) -> None:
        """Close the master's connections, then the sentinels'."""
        super().close()
        pool = cast(SentinelConnectionPool, self.connection_pool)
        pool.sentinel_manager.close()


SENTINEL_TIMEOUT_SECONDS = 1.0
"""Connect and read timeout of a query to one sentinel (the next one is asked after it)."""


class FailoverSSLConnection(FailoverConnection, redis.SSLConnection):
    """A :class:`FailoverConnection` over TLS (``rediss+sentinel://``)."""


def _sentinel_master(target: SentinelTarget, options: dict[str, Any]) -> redis.Redis:
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.sentinels),
        sentinel_kwargs={
            "socket_connect_timeout": SENTINEL_TIMEOUT_SECONDS,
            "socket_timeout": SENTINEL_TIMEOUT_SECONDS,
            **sentinel_ssl(target),
        },
    )
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.master_name,
        redis_class=SentinelMaster,
        connection_pool_class=SentinelBlockingConnectionPool,
        connection_class=FailoverSSLConnection if target.ssl else FailoverConnection,
        db=target.db,
        username=target.username,
        password=target.password,
        **dict(target.ssl or ()),
        **options,
    )
    return client


class OutageRidingCluster(redis.RedisCluster):
    """redis-py's cluster client, whose commands ride out an outage as the plain client's do.

    redis-py 8.1 tries a cluster command again at once, without a wait, as often as its retry
    allows (``_internal_execute_command``), so a master that restarts or fails over took every
    command to its slots down within milliseconds. Here a command tried that way that still
    finds no node (a refused connection, a timeout, ``CLUSTERDOWN`` while a master is failed) is
    tried again after the outage retry's waits (:func:`outage_retry`).
    """

    def __init__(self, *args: Any, outage: Retry, **kwargs: Any):
        self._outage = outage  # before: the constructor runs commands already
        super().__init__(*args, **kwargs)

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """Run a command, waiting out an outage of the nodes that hold it."""
        return self._outage.call_with_retry(
            lambda: redis.RedisCluster.execute_command(self, *args, **kwargs),  # type: ignore[no-untyped-call]
            lambda _error: None,
        )

    def close(self) -> None:
        """Close the client and each node's connections.

        Given a URL, redis-py 8.1 builds each node's pool and hands it to the node's client,
        which then does not own it: its ``close()`` left the node's connections open until the
        garbage collector found them.
        """
        nodes = self.get_nodes()  # type: ignore[no-untyped-call]
        super().close()
        for node in nodes:
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        """A pipeline whose ``execute()`` waits out an outage (:class:`RidingPipeline`)."""
        return RidingPipeline(self, transaction=bool(transaction), outage=self._outage)


class RidingPipeline:
    """A cluster pipeline that sends its commands again, whole, after an outage's waits.

    redis-py's cluster pipeline forgets its commands once ``execute()`` fails; this one records
    them and replays them on a fresh pipeline for each try (as one Redis's pipeline retries
    itself). Scripts are queued on it as ``EVAL`` (``app.store.scripts``).
    """

    is_cluster_pipeline = True
    """What :class:`app.store.scripts.BoundScript` looks for."""

    def __init__(self, cluster: redis.RedisCluster, *, transaction: bool, outage: Retry):
        self._cluster = cluster
        self._transaction = transaction
        self._outage = outage
        self._calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def queue(*args: Any, **kwargs: Any) -> RidingPipeline:
            self._calls.append((name, args, kwargs))
            return self

        return queue

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send every queued command (again, after a wait, while the cluster is away)."""

        def once() -> list[Any]:
            pipe = redis.RedisCluster.pipeline(self._cluster, transaction=self._transaction)  # type: ignore[no-untyped-call]
            for name, args, kwargs in self._calls:
                getattr(pipe, name)(*args, **kwargs)
            results: list[Any] = pipe.execute(raise_on_error)
            return results

        try:
            return self._outage.call_with_retry(once, lambda _error: None)
        finally:
            self._calls = []

    def __enter__(self) -> RidingPipeline:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._calls = []

    def __len__(self) -> int:
        return len(self._calls)


CLUSTER_OUTAGE_ERRORS = (redis.ConnectionError, redis.TimeoutError, ClusterDownError)
"""What a cluster command meets while a master is away (``CLUSTERDOWN``: a slot unserved)."""


def _cluster(target: ClusterTarget, options: dict[str, Any]) -> redis.Redis:
    """A Redis Cluster client: a blocking pool per node, commands routed by their keys' slot.

    Typed as ``redis.Redis``, whose commands it takes (the store keeps to those a cluster
    routes: one slot per script, transaction and multi-key command; :mod:`app.keys`).
    """
    (host, port), *_ = target.nodes
    outage: Retry = options.pop("retry")
    outage.update_supported_errors(CLUSTER_OUTAGE_ERRORS)
    client = OutageRidingCluster(
        outage=outage,
        # redis-py's own tries: at once, to follow the topology as it changes
        retry=Retry(ExponentialBackoff(cap=0.05, base=0.01), 3),
        # a URL makes redis-py build each node's pool with connection_pool_class (and over
        # TLS, every node's connection with the options its query names)
        url=f"{'rediss' if target.tls else 'redis'}://{host}:{port}?{target.options}",
        startup_nodes=[
            ClusterNode(node_host, node_port)  # type: ignore[no-untyped-call]
            for node_host, node_port in target.nodes
        ],
        username=target.username,
        password=target.password,
        connection_pool_class=redis.BlockingConnectionPool,
        **options,
    )
    return cast(redis.Redis, client)


def make_store(settings: Settings, client: redis.Redis | None = None) -> ResponseStore:
    """The response store under the configured key prefix (and shards, on a cluster)."""
    return ResponseStore(
        client or make_redis(settings),
        keys=settings.keys,
        ttl_seconds=settings.response_ttl_seconds,
        unstored_ttl_seconds=settings.unstored_ttl_seconds,
        stream_maxlen=settings.event_stream_maxlen,
        # the queues' Redis, when the broker has one of its own (a pool connects when first used)
        queues=make_redis(settings, broker=True) if settings.broker_url else None,
    )


def llm_base_url(settings: Settings) -> str:
    """The model server's base URL; the simulator's when none is configured."""
    return settings.llm_base_url or f"http://127.0.0.1:{settings.sim_port}/v1"


def make_provider(settings: Settings) -> ChatCompletionsProvider:
    """The Chat Completions provider for the configured model server."""
    return ChatCompletionsProvider(
        base_url=llm_base_url(settings),
        client=model_http_client(
            api_key=settings.llm_api_key,
            timeout=httpx.Timeout(
                settings.llm_timeout_seconds, connect=settings.llm_connect_timeout_seconds
            ),
            lean_http=settings.lean_http,
        ),
        max_retries=settings.llm_max_retries,
        retry_max_wait=settings.llm_retry_max_wait_seconds,
    )


def make_run_deps(settings: Settings, *, dispatcher: Dispatcher | None = None) -> RunDeps:
    """Everything a turn needs."""
    store = make_store(settings)
    return RunDeps(
        store=store,
        provider=make_provider(settings),
        settings=settings,
        dispatcher=dispatcher,
        leases=LeaseKeeper(store, lease_seconds=settings.lease_seconds),
        kinds=KINDS,
        kind_deps=KINDS.make_turn_deps(_kind_context(settings, store)),
    )


def _kind_context(settings: Settings, store: ResponseStore) -> KindContext:
    return KindContext(settings=settings, redis=store.redis, keys=store.keys)


def make_tool_deps(settings: Settings, *, dispatcher: Dispatcher | None = None) -> ToolDeps:
    """Everything a tool worker needs: the executors of every kind this build ships.

    Every internal tool is initialized here; one whose ``initialize`` raises is logged and left
    out, so the worker still starts. ``dispatcher``: queues the turns of responses that get a
    place on a tool queue when a call ends (:mod:`app.tool_share`).
    """
    store = make_store(settings)
    executors = ExecutorRegistry(KINDS.make_executors(_kind_context(settings, store)))
    internal = executors.of_kind(ToolKind.INTERNAL)  # its plugins are shut down on worker stop
    return ToolDeps(
        store=store,
        executors=executors,
        settings=settings,
        internal_tools=internal.registry if isinstance(internal, InternalExecutor) else None,
        kinds=KINDS,
        dispatcher=dispatcher,
    )
