"""Building the collaborators a process needs from its settings (Redis, store, provider)."""

from __future__ import annotations

import httpx
import redis

from app.config import Settings
from app.dispatch import Dispatcher
from app.keys import Keys
from app.lease import LeaseKeeper
from app.providers.openai_chat import ChatCompletionsProvider, model_http_client
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


def make_redis(settings: Settings) -> redis.Redis:
    """A pooled Redis client."""
    # A blocking pool: a burst beyond the pool waits for a connection instead of failing
    # (redis-py's default pool raises MaxConnectionsError at 100).
    pool = redis.BlockingConnectionPool.from_url(
        require_redis_url(settings),
        max_connections=settings.redis_max_connections,
        timeout=30,
        health_check_interval=30,
        socket_keepalive=True,
    )
    return redis.Redis(connection_pool=pool)


def make_store(settings: Settings, client: redis.Redis | None = None) -> ResponseStore:
    """The response store under the configured key prefix."""
    return ResponseStore(
        client or make_redis(settings),
        keys=Keys(settings.key_prefix),
        ttl_seconds=settings.response_ttl_seconds,
        unstored_ttl_seconds=settings.unstored_ttl_seconds,
        stream_maxlen=settings.event_stream_maxlen,
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


def make_tool_deps(settings: Settings) -> ToolDeps:
    """Everything a tool worker needs: the executors of every kind this build ships.

    Every internal tool is initialized here; one whose ``initialize`` raises is logged and left
    out, so the worker still starts.
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
    )
