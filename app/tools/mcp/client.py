"""A synchronous MCP client: one event loop in a background thread, sessions pooled per server.

The ``mcp`` SDK is async-only; the rest of ``app/`` is synchronous (STYLE.md rule 40). An
:class:`McpClient` owns an asyncio loop running in a daemon thread and exposes blocking
:meth:`~McpClient.list_tools` and :meth:`~McpClient.call_tool`, safe to call from many threads.

Sessions are pooled per process by :attr:`ServerTarget.key` (server + headers digest). Each
session lives in its own task that entered the SDK's ``Client`` context (anyio requires the same
task to leave it); when the server drops the connection the task ends, the session leaves the
pool, and the next call connects again. The pool is bounded: a session unused for
``idle_seconds`` is closed, and past ``max_sessions`` the least recently used idle one is (each
user's own token makes a session of its own: unbounded, they held a connection each for good).
Listings are cached per key for a TTL and dropped when the server announces
``tools/list_changed`` (a ``subscriptions/listen`` stream on 2026-07-28 connections, the
``notifications/tools/list_changed`` message on older ones).

A server that forgot a session (it restarted, or expired it) answers its requests 404: the
session is started again and the request sent once more, there. A request whose own HTTP
connection failed before the server answered fails alone; the session and the other calls in
flight on it carry on (:func:`_failing_alone`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

from app.errors import UpstreamError
from app.keepalive import KEEPALIVE_EXPIRY_SECONDS
from app.tools.mcp.target import ServerTarget

if TYPE_CHECKING:
    import httpx2
    from mcp_types import RequestParamsMeta

logger = logging.getLogger(__name__)

T = TypeVar("T")

TIMEOUT_CODE = -32001
"""The JSON-RPC code the SDK gives a request that timed out."""
CLOSED_CODE = -32000
"""The JSON-RPC code the SDK gives a request whose connection closed."""
UNANSWERED_CODE = -32098
"""The JSON-RPC code of a request whose own connection failed before the server answered."""
IDEMPOTENCY_META_KEY = "antwort/idempotency_key"
"""The ``_meta`` entry of a ``tools/call`` request that carries the call's idempotency key."""


class McpUnavailableError(UpstreamError):
    """The server could not be reached, or the connection failed."""

    default_code = "mcp_unavailable"


class McpTimeoutError(UpstreamError):
    """The server did not answer in time."""

    default_code = "mcp_timeout"


class McpProtocolError(UpstreamError):
    """The server answered a request with a JSON-RPC error."""

    default_code = "mcp_protocol_error"


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedTool:
    """A tool as the server lists it."""

    name: str
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CallOutcome:
    """What a ``tools/call`` returned."""

    content: list[dict[str, Any]]
    """The content blocks (``text``, ``image``, ``audio``, ``resource`` …) as JSON objects."""
    structured: dict[str, Any] | None = None
    is_error: bool = False


@dataclass(slots=True)
class _Forgotten:
    """Set when the server answered this session's request with 404: it no longer knows it."""

    is_set: bool = False


@dataclass(slots=True)
class _Session:
    client: Any
    stop: asyncio.Event
    forgotten: _Forgotten
    task: asyncio.Task[None] | None = None
    alive: bool = True
    busy: int = 0
    """Calls and listings using it now: it is not closed for being idle meanwhile."""
    last_used: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _Listing:
    tools: list[ListedTool]
    expires: float


@dataclass(slots=True)
class _Pool:
    sessions: dict[str, _Session] = field(default_factory=dict)
    opening: dict[str, asyncio.Future[_Session]] = field(default_factory=dict)
    listings: dict[str, _Listing] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


AddressPolicy = Callable[[str], list[str]]
"""A host name → the addresses the client may connect to (raises to refuse the host)."""


class McpClient:
    """Blocking MCP calls over pooled sessions; see the module docstring."""

    def __init__(
        self,
        *,
        list_ttl_seconds: float = 300.0,
        connect_timeout_seconds: float = 10.0,
        address_policy: AddressPolicy | None = None,
        max_sessions: int = 100,
        idle_seconds: float = 300.0,
    ):
        self.list_ttl_seconds = list_ttl_seconds
        self.connect_timeout_seconds = connect_timeout_seconds
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._policy = address_policy
        self._pool = _Pool()
        _import_sdk()  # here, not first in the loop thread: concurrent first imports race
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-loop", daemon=True)
        self._thread.start()
        self._sweep: asyncio.TimerHandle | None = None
        self._loop.call_soon_threadsafe(self._close_idle)

    # -- the blocking API ----------------------------------------------------------------------

    def list_tools(self, target: ServerTarget) -> list[ListedTool]:
        """The server's tools (from the cache while fresh).

        Raises:
            UpstreamError: the server is unreachable, timed out or answered an error.
        """
        return self._run(self._list_tools(target), target.timeout_seconds)

    def call_tool(
        self,
        target: ServerTarget,
        name: str,
        arguments: dict[str, Any],
        *,
        idempotency_key: str = "",
    ) -> CallOutcome:
        """Call one tool.

        ``idempotency_key``: sent in the request's ``_meta`` as :data:`IDEMPOTENCY_META_KEY`
        (the same for every run of one call), unless empty.

        Raises:
            UpstreamError: the server is unreachable, timed out, dropped or answered an error.
        """
        return self.submit_call(target, name, arguments, idempotency_key=idempotency_key).result()

    def submit_call(
        self,
        target: ServerTarget,
        name: str,
        arguments: dict[str, Any],
        *,
        idempotency_key: str = "",
    ) -> Future[CallOutcome]:
        """Start one call on the loop and return at once.

        The future raises what :meth:`call_tool` raises; cancelling it cancels the call.
        """
        meta = {IDEMPOTENCY_META_KEY: idempotency_key} if idempotency_key else None
        return self._submit(self._call_tool(target, name, arguments, meta), target.timeout_seconds)

    def session_count(self) -> int:
        """Live pooled sessions (for tests and metrics)."""
        return sum(1 for session in self._pool.sessions.values() if session.alive)

    def close(self) -> None:
        """Close every session and stop the loop."""
        if not self._loop.is_running():
            return
        with contextlib.suppress(Exception):
            self._run(self._close_all(), 10.0)
        self._loop.call_soon_threadsafe(self._stop_sweeping)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def _run(self, coro: Awaitable[T], timeout: float) -> T:
        return self._submit(coro, timeout).result()

    def _submit(self, coro: Awaitable[T], timeout: float) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(
            _with_timeout(coro, timeout + self.connect_timeout_seconds), self._loop
        )

    # -- inside the loop -----------------------------------------------------------------------

    async def _list_tools(self, target: ServerTarget) -> list[ListedTool]:
        cached = self._pool.listings.get(target.key)
        if cached is not None and cached.expires > time.monotonic():
            return cached.tools

        async def list_all(session: _Session) -> list[ListedTool]:
            tools: list[ListedTool] = []
            cursor: str | None = None
            for _ in range(100):  # a server that pages forever cannot hang us
                page = await session.client.session.list_tools(params=_page(cursor))
                tools.extend(_listed(tool) for tool in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools

        tools = await self._on_session(target, list_all)
        self._pool.listings[target.key] = _Listing(
            tools=tools, expires=time.monotonic() + self.list_ttl_seconds
        )
        return tools

    async def _call_tool(
        self,
        target: ServerTarget,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None,
    ) -> CallOutcome:

        async def call(session: _Session) -> Any:
            return await session.client.call_tool(
                name,
                arguments,
                read_timeout_seconds=target.timeout_seconds,
                meta=cast("RequestParamsMeta", meta),
            )

        result = await self._on_session(target, call)
        return CallOutcome(
            content=[block.model_dump(mode="json", exclude_none=True) for block in result.content],
            structured=result.structured_content,
            is_error=bool(result.is_error),
        )

    async def _on_session(self, target: ServerTarget, use: Callable[[_Session], Awaitable[T]]) -> T:
        """``use`` on the target's session; on a new session if the server had forgotten it.

        A server forgets a session when it restarts, or expires or evicts it, and answers its
        requests with 404; the client must then start a new one (MCP, Streamable HTTP, "Session
        Management"). A 2026-07-28 session learns it as its listen stream ends; a 2025-era one
        has no such stream, and would answer every call "Session not found" for good. The
        request the server refused was not run, so it is sent once more, on a new session.
        """
        for is_last in (False, True):
            async with self._using(target) as session:
                try:
                    return await use(session)
                except Exception as exc:  # the SDK raises transport errors of many kinds
                    if not session.forgotten.is_set or is_last:
                        raise self._failure(target, exc) from None
            logger.info("MCP server %s forgot its session; starting a new one", target.label)
            self._retire(target.key, session)
        raise AssertionError("unreachable")

    def _failure(self, target: ServerTarget, exc: BaseException) -> UpstreamError:
        """An SDK error as ours; a connection that failed leaves the pool."""
        from mcp import MCPError

        if isinstance(exc, MCPError):
            if exc.code == TIMEOUT_CODE:
                seconds = target.timeout_seconds
                return McpTimeoutError(
                    f"MCP server '{target.label}' did not answer within {seconds:g} s."
                )
            if exc.code == UNANSWERED_CODE and self._is_alive(target):  # the session carries on
                return McpUnavailableError(f"MCP server '{target.label}': {exc.message}")
            if exc.code == CLOSED_CODE or not self._is_alive(target):
                self._drop(target.key)
                return McpUnavailableError(f"MCP server '{target.label}' closed the connection.")
            return McpProtocolError(f"MCP server '{target.label}' answered: {exc}")
        self._drop(target.key)
        return McpUnavailableError(f"MCP server '{target.label}' failed: {_describe(exc)}")

    def _is_alive(self, target: ServerTarget) -> bool:
        """Whether the target's pooled session still runs."""
        session = self._pool.sessions.get(target.key)
        return session is not None and session.alive

    @contextlib.asynccontextmanager
    async def _using(self, target: ServerTarget) -> AsyncIterator[_Session]:
        """The target's session, kept from being closed as idle while the caller uses it."""
        session = await self._session(target)
        if not session.alive:  # closed to make room between its opening and now
            session = await self._session(target)
        session.busy += 1
        try:
            yield session
        finally:
            session.busy -= 1
            session.last_used = time.monotonic()

    def _close_idle(self) -> None:
        """Close the sessions unused for ``idle_seconds``, drop stale listings; look again."""
        now = time.monotonic()
        for key, session in list(self._pool.sessions.items()):
            if not session.busy and now - session.last_used >= self.idle_seconds:
                self._drop(key)
        for key, listing in list(self._pool.listings.items()):
            if listing.expires <= now:
                del self._pool.listings[key]
        self._sweep = self._loop.call_later(min(self.idle_seconds / 4, 30.0), self._close_idle)

    def _stop_sweeping(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()

    def _make_room(self, *, keeping: _Session) -> None:
        """Past ``max_sessions``, close the least recently used idle sessions but ``keeping``."""
        idle = sorted(
            (session.last_used, key)
            for key, session in self._pool.sessions.items()
            if not session.busy and session is not keeping
        )
        for _, key in idle[: max(0, len(self._pool.sessions) - self.max_sessions)]:
            self._drop(key)

    async def _session(self, target: ServerTarget) -> _Session:
        session = self._pool.sessions.get(target.key)
        if session is not None and session.alive:
            return session
        opening = self._pool.opening.get(target.key)
        if opening is None:
            opening = self._loop.create_future()
            self._pool.opening[target.key] = opening
            task = self._loop.create_task(self._open(target, opening))
            self._pool.tasks.add(task)  # the loop holds tasks weakly
            task.add_done_callback(self._pool.tasks.discard)
        try:
            return await asyncio.shield(opening)
        except UpstreamError:
            raise
        except Exception as exc:  # connection refused arrives as an ExceptionGroup
            raise McpUnavailableError(
                f"MCP server '{target.label}' is unreachable: {_describe(exc)}"
            ) from None

    async def _open(self, target: ServerTarget, opened: asyncio.Future[_Session]) -> None:
        """The task that holds one session open until it is closed or the server drops it."""
        session: _Session | None = None
        try:
            policy = None if target.is_configured else self._policy
            if policy is not None and target.url is not None:  # refuse early, with a clear error
                await asyncio.to_thread(policy, httpx2_host(target.url))  # DNS off the loop
            async with contextlib.AsyncExitStack() as stack:
                # asyncio.timeout, not wait_for: wait_for (Python 3.11) runs the connect in a
                # task of its own, and the SDK's scopes must be left in the task that entered
                # them (else every close fails and keeps the session).
                forgotten = _Forgotten()
                async with asyncio.timeout(self.connect_timeout_seconds):
                    client = await self._connect(stack, target, forgotten)
                session = _Session(client=client, stop=asyncio.Event(), forgotten=forgotten)
                session.task = asyncio.current_task()
                self._pool.sessions[target.key] = session
                self._pool.opening.pop(target.key, None)
                self._make_room(keeping=session)
                opened.set_result(session)
                await self._hold(target, session)
        except Exception as exc:
            if not opened.done():
                opened.set_exception(exc)
            else:
                logger.info("MCP session to %s ended: %s", target.label, _describe(exc))
        finally:
            self._pool.opening.pop(target.key, None)
            if session is not None:
                session.alive = False
                if self._pool.sessions.get(target.key) is session:
                    del self._pool.sessions[target.key]

    async def _connect(
        self, stack: contextlib.AsyncExitStack, target: ServerTarget, forgotten: _Forgotten
    ) -> Any:
        from mcp import Client

        async def on_message(message: Any) -> None:
            if getattr(message, "method", None) == "notifications/tools/list_changed":
                self._pool.listings.pop(target.key, None)

        policy = None if target.is_configured else self._policy
        transport = await _transport(stack, target, self.connect_timeout_seconds, policy, forgotten)
        client = Client(
            transport,
            cache=None,
            message_handler=on_message,
            read_timeout_seconds=target.timeout_seconds,
        )
        return await stack.enter_async_context(client)

    async def _hold(self, target: ServerTarget, session: _Session) -> None:
        """Wait for the end, dropping the cached listing whenever the server's tools change.

        A 2026-07-28 server announces changes on a ``subscriptions/listen`` stream; when that
        stream is lost after it was acknowledged, the connection is gone and the session ends
        (the next call reconnects). Older servers (and servers that refuse the stream) send
        ``notifications/tools/list_changed`` to the message handler instead.
        """
        is_listening = False
        try:
            async with session.client.listen(tools_list_changed=True) as events:
                is_listening = True
                waiting = asyncio.ensure_future(session.stop.wait())
                try:
                    async for _event in _until(events, waiting):
                        self._pool.listings.pop(target.key, None)
                finally:
                    waiting.cancel()
                return
        except Exception as exc:  # no listen on this server, or the stream dropped
            logger.debug("listen stream on %s: %s", target.label, _describe(exc))
        if not is_listening:
            await session.stop.wait()

    def _drop(self, key: str) -> None:
        session = self._pool.sessions.get(key)
        if session is not None:
            self._retire(key, session)

    def _retire(self, key: str, session: _Session) -> None:
        """Close ``session``, and take it from the pool if a newer one has not replaced it."""
        if self._pool.sessions.get(key) is session:
            del self._pool.sessions[key]
        session.alive = False
        session.stop.set()

    async def _close_all(self) -> None:
        sessions = list(self._pool.sessions.values())
        for session in sessions:
            session.stop.set()
        tasks = [session.task for session in sessions if session.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=5)


def _import_sdk() -> None:
    import httpx2  # noqa: F401
    import mcp.client.sse
    import mcp.client.streamable_http
    import mcp.client.subscriptions  # noqa: F401


async def _until(events: Any, stop: asyncio.Future[Any]) -> Any:
    """Iterate ``events`` until ``stop`` completes.

    However it is left (the stop, or its task cancelled as the session closes), it cancels the
    step it waited for: that step's end (the stream's, as the connection goes) is then nobody's
    to take, and asyncio would log it as "Task exception was never retrieved".
    """
    iterator = events.__aiter__()
    step: asyncio.Future[Any] | None = None
    try:
        while True:
            step = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop in done:
                return
            try:
                yield step.result()
            except StopAsyncIteration:
                return
    finally:
        if step is not None:
            step.cancel()


def httpx2_host(url: str) -> str:
    """The host of an URL, as the HTTP client will connect to it."""
    import httpx2

    return str(httpx2.URL(url).host)


def _limits() -> Any:
    """The pool bounds httpx sets by default; idle connections dropped early (app.keepalive)."""
    import httpx2

    return httpx2.Limits(
        max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS
    )


def _failing_alone(inner: httpx2.AsyncBaseTransport) -> httpx2.AsyncBaseTransport:
    """``inner``, with a request whose connection failed before any answer failing alone.

    The SDK (2.3) ends the whole session when one request's HTTP exchange fails before the
    server answered (python-sdk#3522): every call in flight on the session fails with it, calls
    the server is running among them. Here such a failure of a JSON-RPC request (a call, a
    listing) is answered to the SDK as the server would refuse it: a JSON-RPC error for that
    request alone (:data:`UNANSWERED_CODE`), which the session carries on past. The handshake
    and notifications fail as before; so does anything once an answer has begun.
    """
    import httpx2

    class FailingAlone(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            try:
                return await inner.handle_async_request(request)
            except httpx2.TransportError as exc:
                request_id = _request_id(request)
                if request_id is None:
                    raise
                message = f"the connection failed before it answered: {_describe(exc)}"
                error = {"code": UNANSWERED_CODE, "message": message}
                return httpx2.Response(
                    502, json={"jsonrpc": "2.0", "id": request_id, "error": error}, request=request
                )

        async def aclose(self) -> None:
            await inner.aclose()

    return FailingAlone()


def _request_id(request: Any) -> Any:
    """The id of the JSON-RPC request a POST carries, unless it is part of the handshake."""
    if request.method != "POST":
        return None
    try:
        message = json.loads(request.content)
    except (ValueError, TypeError):
        return None
    if not isinstance(message, dict) or message.get("method") in _HANDSHAKE_METHODS:
        return None
    return message.get("id")  # None for a notification


_HANDSHAKE_METHODS = frozenset({"initialize", "server/discover"})
"""Left to fail as they do: the SDK reads a failed discover probe as an older server."""


def _pinned_transport(policy: AddressPolicy) -> Any:
    """An HTTP transport that connects only to addresses ``policy`` allows, checked at connect.

    httpx has no hook for name resolution; the pool's network backend is where the address a
    connection really goes to is chosen, so the check sits there (no DNS rebinding between a
    check and the connect). TLS still verifies the URL's host name. Proxies from the
    environment are ignored, as they would connect on our behalf.
    """
    import anyio.to_thread
    import httpcore2
    import httpx2

    class PinnedBackend(httpcore2.AsyncNetworkBackend):
        def __init__(self) -> None:
            self.inner = httpcore2.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> httpcore2.AsyncNetworkStream:
            addresses = await anyio.to_thread.run_sync(policy, host)
            failure: Exception = httpcore2.ConnectError(f"no address for {host}")
            for address in addresses:
                try:
                    return await self.inner.connect_tcp(
                        address, port, timeout, local_address, socket_options
                    )
                except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                    failure = exc
            raise failure

        async def connect_unix_socket(
            self,
            path: str,
            timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
            socket_options: Any = None,
        ) -> httpcore2.AsyncNetworkStream:
            raise httpcore2.ConnectError("unix sockets are not MCP servers")

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    transport = httpx2.AsyncHTTPTransport(trust_env=False, limits=_limits())
    transport._pool._network_backend = PinnedBackend()
    return transport


async def _transport(
    stack: contextlib.AsyncExitStack,
    target: ServerTarget,
    connect_timeout: float,
    policy: AddressPolicy | None,
    forgotten: _Forgotten,
) -> Any:
    """The SDK transport for a target (entered HTTP clients are closed with ``stack``).

    ``forgotten`` is set when the server answers a request of the session with 404.
    """
    import httpx2
    from mcp import StdioServerParameters, stdio_client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    headers = dict(target.headers)
    if target.transport == "stdio":
        assert target.command is not None
        params = StdioServerParameters(
            command=target.command, args=list(target.args), env=dict(target.env) or None
        )
        # Under Celery sys.stderr is a logging proxy without a file descriptor.
        return stdio_client(params, errlog=sys.__stderr__ or sys.stderr)
    assert target.url is not None
    read_timeout = max(300.0, target.timeout_seconds)

    async def notice_forgotten(response: Any) -> None:
        if response.status_code == 404 and "mcp-session-id" in response.request.headers:
            forgotten.is_set = True

    def http_client(
        headers: dict[str, str] | None = None,
        timeout: Any = None,
        auth: Any = None,
        *,
        fails_alone: bool = False,
    ) -> Any:
        transport = (
            httpx2.AsyncHTTPTransport(trust_env=True, limits=_limits())
            if policy is None
            else _pinned_transport(policy)
        )
        return httpx2.AsyncClient(
            headers=headers,
            timeout=timeout or httpx2.Timeout(connect_timeout, read=read_timeout),
            auth=auth,
            event_hooks={"response": [notice_forgotten]},
            transport=_failing_alone(transport) if fails_alone else transport,
            trust_env=policy is None,
        )

    if target.transport == "sse":
        return sse_client(
            target.url,
            headers=headers,
            timeout=connect_timeout,
            sse_read_timeout=read_timeout,
            httpx_client_factory=http_client,
        )
    http = http_client(headers, fails_alone=True)
    await stack.enter_async_context(http)
    return streamable_http_client(target.url, http_client=http)


async def _with_timeout(coro: Awaitable[T], seconds: float) -> T:
    # asyncio.timeout, not wait_for: the coroutine runs in the caller's task (wait_for wraps
    # it in a task of its own, one more task and loop pass per call).
    try:
        async with asyncio.timeout(seconds):
            return await coro
    except TimeoutError:
        raise McpTimeoutError(f"MCP request did not finish within {seconds:g} s.") from None


def _page(cursor: str | None) -> Any:
    from mcp_types import PaginatedRequestParams

    return PaginatedRequestParams(cursor=cursor) if cursor else None


def _listed(tool: Any) -> ListedTool:
    annotations = (
        tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
        if tool.annotations
        else None
    )
    return ListedTool(
        name=tool.name,
        description=tool.description,
        input_schema=dict(tool.input_schema or {"type": "object", "properties": {}}),
        annotations=annotations,
    )


def _describe(exc: BaseException) -> str:
    """A short description; an ExceptionGroup is described by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text[:300]
