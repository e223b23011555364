"""The synchronous MCP client and the executor against real MCP servers (subprocesses)."""

import asyncio
import gc
import json
import logging
import threading
import time
import weakref
from collections.abc import Iterator

import pytest

from app.config import Settings
from app.errors import UpstreamError
from app.keepalive import KEEPALIVE_EXPIRY_SECONDS
from app.tools.base import McpToolRef, ToolCall, ToolDefinition, ToolKind
from app.tools.mcp.client import (
    IDEMPOTENCY_META_KEY,
    McpClient,
    McpTimeoutError,
    McpUnavailableError,
    _until,
)
from app.tools.mcp.executor import McpExecutor
from app.tools.mcp.security import Sealer, allowed_addresses
from app.tools.mcp.servers import McpServers
from app.tools.mcp.target import ServerTarget
from tests.support.idle_close import closing_idle_connections
from tests.support.mcp_servers import (
    PIXEL_PNG,
    RunningServer,
    digest,
    free_port,
    running,
    start_server,
    stdio_command,
)


@pytest.fixture(scope="module")
def http_server() -> Iterator[RunningServer]:
    with running("streamable-http", name="unit") as server:
        yield server


@pytest.fixture
def client() -> Iterator[McpClient]:
    mcp = McpClient(list_ttl_seconds=300, connect_timeout_seconds=5)
    yield mcp
    mcp.close()


def target(server: RunningServer | str, **kw: object) -> ServerTarget:
    url = server if isinstance(server, str) else server.url
    kw.setdefault("timeout_seconds", 5)
    return ServerTarget(label="unit", url=url, **kw)  # type: ignore[arg-type]


def test_list_and_call_over_one_pooled_session(
    client: McpClient, http_server: RunningServer
) -> None:
    names = [tool.name for tool in client.list_tools(target(http_server))]
    assert {"echo", "add", "slow", "picture"} <= set(names)
    outcome = client.call_tool(target(http_server), "echo", {"text": "hi"})
    assert outcome.content == [{"type": "text", "text": "unit: hi"}] and not outcome.is_error
    assert client.call_tool(target(http_server), "add", {"a": 2, "b": 3}).structured == {
        "result": 5
    }
    assert client.session_count() == 1


def test_headers_reach_the_server_and_key_the_pool(
    client: McpClient, http_server: RunningServer
) -> None:
    one = target(http_server, headers=(("X-Test-Token", "tok-one"),))
    two = target(http_server, headers=(("X-Test-Token", "tok-two"),))
    assert "tok-one" not in repr(one) and "tok-one" not in one.key and one.key != two.key
    text = client.call_tool(one, "whoami", {}).content[0]["text"]
    assert text.startswith(f"token={digest('tok-one')} ")
    assert (
        client.call_tool(two, "whoami", {})
        .content[0]["text"]
        .startswith(f"token={digest('tok-two')} ")
    )
    assert client.session_count() == 2


def tokens(server: RunningServer, *names: str) -> list[ServerTarget]:
    """Targets of ``server`` that differ in their token only (each user's own)."""
    return [target(server, headers=(("X-Test-Token", name),)) for name in names]


def test_past_its_bound_the_pool_closes_the_least_recently_used_session(
    http_server: RunningServer,
) -> None:
    """Before, each token's session held a connection for good: a user each, unbounded."""
    mcp = McpClient(connect_timeout_seconds=5, max_sessions=2)
    try:
        one, two, three = tokens(http_server, "one", "two", "three")
        for each in (one, two, one, three):
            assert not mcp.call_tool(each, "echo", {"text": "hi"}).is_error

        assert mcp.session_count() == 2
        assert not mcp._is_alive(two)  # the least recently used
        assert mcp._is_alive(one) and mcp._is_alive(three)
        assert not mcp.call_tool(two, "echo", {"text": "again"}).is_error  # connects again
        assert mcp.session_count() == 2
    finally:
        mcp.close()


def test_a_closed_session_ends_cleanly_and_leaves_nothing_behind(
    http_server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the SDK client's scopes were entered in ``wait_for``'s task and left in the
    session's: every close failed ("Attempted to exit cancel scope in a different task") and
    kept the client, its tasks and streams for good (about 25 KB a session, seen growing a
    worker by 150 MB an hour under per-user tokens)."""
    mcp = McpClient(connect_timeout_seconds=5, max_sessions=1)
    try:
        clients = []
        with caplog.at_level(logging.INFO, logger="app.tools.mcp.client"):  # the closes too
            for each in tokens(http_server, "a", "b", "c", "d"):
                assert not mcp.call_tool(each, "echo", {"text": "hi"}).is_error
                clients.append(weakref.ref(mcp._pool.sessions[each.key].client))
            deadline = time.monotonic() + 10
            while len(mcp._pool.tasks) > 1 and time.monotonic() < deadline:  # the closes to end
                time.sleep(0.01)

        gc.collect()
        assert [ref() is None for ref in clients] == [True, True, True, False]
        assert not [r.getMessage() for r in caplog.records if "ended" in r.getMessage()]
    finally:
        mcp.close()


def test_a_session_in_use_is_not_closed_to_make_room(http_server: RunningServer) -> None:
    mcp = McpClient(connect_timeout_seconds=5, max_sessions=1)
    try:
        slow, quick = tokens(http_server, "slow", "quick")
        running = mcp.submit_call(slow, "slow", {"seconds": 1})
        deadline = time.monotonic() + 10
        while mcp.session_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)

        assert not mcp.call_tool(quick, "echo", {"text": "hi"}).is_error
        assert not running.result(timeout=10).is_error
        assert mcp.session_count() <= 2
    finally:
        mcp.close()


def test_an_idle_session_is_closed_and_the_next_call_connects_again(
    http_server: RunningServer,
) -> None:
    mcp = McpClient(connect_timeout_seconds=5, idle_seconds=0.4)
    try:
        [user] = tokens(http_server, "idle")
        assert not mcp.call_tool(user, "echo", {"text": "hi"}).is_error
        assert mcp.session_count() == 1

        deadline = time.monotonic() + 10
        while mcp.session_count() and time.monotonic() < deadline:
            time.sleep(0.05)

        assert mcp.session_count() == 0
        assert not mcp.call_tool(user, "echo", {"text": "again"}).is_error
    finally:
        mcp.close()


def test_listing_is_cached_until_the_server_says_it_changed(client: McpClient) -> None:
    server = start_server("streamable-http", name="cache")
    try:
        tgt = target(server)
        client.list_tools(tgt)
        count = client.call_tool(tgt, "list_count", {}).structured
        client.list_tools(tgt)  # from the cache: the server sees no new tools/list
        assert client.call_tool(tgt, "list_count", {}).structured == count
        client.call_tool(tgt, "grow", {})
        for _ in range(100):  # the notification arrives on its own stream
            if "extra" in [tool.name for tool in client.list_tools(tgt)]:
                break
            threading.Event().wait(0.05)
        assert "extra" in [tool.name for tool in client.list_tools(tgt)]
    finally:
        server.stop()


def test_timeouts_and_tool_errors(client: McpClient, http_server: RunningServer) -> None:
    # the session opens with the default timeout (its start on a busy machine is no timeout);
    # a call's own timeout is the target's
    client.list_tools(target(http_server))
    quick = target(http_server, timeout_seconds=0.5)
    with pytest.raises(McpTimeoutError, match="did not answer within 0.5 s"):
        client.call_tool(quick, "slow", {"seconds": 5})
    failed = client.call_tool(target(http_server), "fail", {"message": "nope"})
    assert failed.is_error and "nope" in failed.content[0]["text"]


def test_unreachable_server_is_an_upstream_error(client: McpClient) -> None:
    with pytest.raises(McpUnavailableError, match="unreachable"):
        client.list_tools(target(f"http://127.0.0.1:{free_port()}/mcp"))


def test_a_dropped_session_reconnects(client: McpClient) -> None:
    port = free_port()
    server = start_server("streamable-http", name="first", port=port)
    tgt = target(server)
    try:
        assert client.call_tool(tgt, "echo", {"text": "a"}).content[0]["text"] == "first: a"
        with pytest.raises(UpstreamError):
            client.call_tool(tgt, "vanish", {})
    finally:
        server.stop()
    again = start_server("streamable-http", name="second", port=port)
    try:
        assert client.call_tool(tgt, "echo", {"text": "b"}).content[0]["text"] == "second: b"
    finally:
        again.stop()


@pytest.mark.parametrize("handshake_era", [True, False], ids=["2025-era", "2026-07-28"])
def test_a_session_the_server_forgot_is_started_again(
    client: McpClient, handshake_era: bool
) -> None:
    """A server that restarted (or expired the session) answers its requests 404.

    The next call starts a new session and is sent there, once. Before, a 2025-era session (no
    listen stream to end it) answered every call "Session not found" while it was in use.
    """
    port = free_port()
    servers: list[RunningServer] = []

    def restart(name: str) -> None:
        if servers:
            servers[-1].stop()
        servers.append(
            start_server("streamable-http", name=name, port=port, handshake_era=handshake_era)
        )

    tgt = target(f"http://127.0.0.1:{port}/mcp")
    try:
        restart("first")
        assert client.call_tool(tgt, "echo", {"text": "a"}).content[0]["text"] == "first: a"
        restart("second")
        assert client.call_tool(tgt, "echo", {"text": "b"}).content[0]["text"] == "second: b"
        restart("third")
        assert "echo" in [tool.name for tool in client.list_tools(tgt)]
        assert client.call_tool(tgt, "echo", {"text": "c"}).content[0]["text"] == "third: c"
        assert client.session_count() == 1
    finally:
        servers[-1].stop()


def test_eight_parallel_calls_share_one_session(
    client: McpClient, http_server: RunningServer
) -> None:
    results: list[str] = []

    def nap(index: int) -> None:
        outcome = client.call_tool(target(http_server), f"nap{index}", {})
        results.append(outcome.content[0]["text"])

    threads = [threading.Thread(target=nap, args=(i,)) for i in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == ["together"] * 8
    assert client.session_count() == 1


@pytest.mark.parametrize("pinned", [False, True], ids=["configured", "pinned"])
def test_a_connection_idle_for_the_keepalive_expiry_is_not_reused(
    http_server: RunningServer, pinned: bool
) -> None:
    """A server closing idle connections soon after 4 s never sees a call on one.

    uvicorn (the MCP SDK's servers), Node and Hypercorn close a connection idle for 5 s; a call
    sent on it as they do is reset unread. Before, httpx kept connections for 5 s: such a call
    failed ("closed the connection"), and the SDK ended its session with every call on it (in
    the wide soak, one MCP call in some 19,000).
    """
    idle_seconds = KEEPALIVE_EXPIRY_SECONDS + 0.5
    port = int(http_server.url.split(":")[2].split("/")[0])
    mcp = McpClient(address_policy=(lambda host: ["127.0.0.1"]) if pinned else None)
    try:
        with closing_idle_connections(port, idle_seconds=idle_seconds) as proxy:
            tgt = target(
                f"http://127.0.0.1:{proxy.port}/mcp", is_configured=not pinned, timeout_seconds=10
            )
            for text in ("a", "b"):
                assert (
                    mcp.call_tool(tgt, "echo", {"text": text}).content[0]["text"] == f"unit: {text}"
                )
            time.sleep(idle_seconds + 0.2)
            assert mcp.call_tool(tgt, "echo", {"text": "c"}).content[0]["text"] == "unit: c"
            assert proxy.resets == 0
            assert mcp.session_count() == 1
    finally:
        mcp.close()


def test_a_call_whose_connection_failed_before_any_answer_fails_alone(
    http_server: RunningServer,
) -> None:
    """One connection's failure does not end the session, nor the calls in flight on it.

    Before, the SDK ended the session on it (python-sdk#3522): a call the server was running
    on another connection failed with it ("closed the connection"), though it ran.
    """
    port = int(http_server.url.split(":")[2].split("/")[0])
    mcp = McpClient()
    try:
        # Margins of 1.5 s each way: the running call is sent well within the proxy's idle
        # limit, and the lost one well past it yet well within the client's 4 s keep-alive.
        with closing_idle_connections(port, idle_seconds=1.5) as proxy:
            tgt = target(f"http://127.0.0.1:{proxy.port}/mcp", timeout_seconds=10)
            warm = [mcp.submit_call(tgt, "slow", {"seconds": 0.3}) for _ in range(3)]
            assert [call.result().content[0]["text"] for call in warm] == ["slept 0.3"] * 3
            running_call = mcp.submit_call(tgt, "slow", {"seconds": 5})
            time.sleep(2.5)  # the other pooled connections idle: the proxy resets the next request
            with pytest.raises(UpstreamError) as lost:
                mcp.call_tool(tgt, "echo", {"text": "lost"})
            assert proxy.resets == 1
            assert running_call.result().content[0]["text"] == "slept 5.0"
            assert "the connection failed before it answered" in str(lost.value)
            assert mcp.call_tool(tgt, "echo", {"text": "x"}).content[0]["text"] == "unit: x"
            assert mcp.session_count() == 1
    finally:
        mcp.close()


def test_sse_and_stdio_transports(client: McpClient) -> None:
    server = start_server("sse", name="sse")
    try:
        sse = ServerTarget(label="s", transport="sse", url=server.url, timeout_seconds=5)
        assert client.call_tool(sse, "echo", {"text": "x"}).content[0]["text"] == "sse: x"
    finally:
        server.stop()
    command, args = stdio_command("pipe")
    stdio = ServerTarget(label="p", transport="stdio", command=command, args=tuple(args))
    assert client.call_tool(stdio, "echo", {"text": "y"}).content[0]["text"] == "pipe: y"


def test_address_policy_refuses_before_connecting(http_server: RunningServer) -> None:
    guarded = McpClient(address_policy=lambda host: allowed_addresses(host, None))
    try:
        with pytest.raises(UpstreamError, match="private, loopback"):
            guarded.list_tools(target(http_server))
    finally:
        guarded.close()


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_connections_go_only_to_addresses_the_policy_gives(transport: str) -> None:
    asked: list[str] = []

    def policy(host: str) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]  # wherever the name resolves to, connect here

    pinned = McpClient(address_policy=policy)
    with running(transport, name="pinned", any_host=True) as server:
        port = server.url.split(":")[2].split("/")[0]
        kind = "sse" if transport == "sse" else "streamable_http"
        path = "/sse" if transport == "sse" else "/mcp"
        # A name that resolves nowhere: only the pinned address makes the connection possible.
        url = f"http://mcp-pinned.invalid:{port}{path}"
        tgt = ServerTarget(label="p", transport=kind, url=url, timeout_seconds=5)  # type: ignore[arg-type]
        try:
            outcome = pinned.call_tool(tgt, "echo", {"text": "x"})
        finally:
            pinned.close()
    assert outcome.content[0]["text"] == "pinned: x"
    assert set(asked) == {"mcp-pinned.invalid"} and len(asked) >= 2  # early check + connect


def test_executor_results_are_data(client: McpClient, http_server: RunningServer) -> None:
    settings = Settings(mcp_timeout_seconds=3)  # also the timeout of each session's start
    sealer = Sealer(b"k")
    executor = McpExecutor(McpServers(settings, sealer=sealer), client)

    def run(name: str, arguments: str, sealed: str | None = None):  # type: ignore[no-untyped-def]
        ref = McpToolRef(
            server_label="unit", tool_name=name, server_url=http_server.url, sealed_headers=sealed
        )
        tool = ToolDefinition(name=name, kind=ToolKind.MCP, mcp=ref)
        assert executor.can_execute(tool)
        return executor.execute(ToolCall(id="c1", name=name, arguments=arguments), tool)

    picture = run("picture", "{}")
    assert picture.output == f"[image: image/png, {len(PIXEL_PNG)} bytes]"
    assert picture.data is not None and picture.data["content"][0]["type"] == "image"
    added = run("add", '{"a": 1, "b": 1}')
    assert added.output == "2" and added.data == {"structured_content": {"result": 2}}
    failed = run("fail", '{"message": "bad"}')
    assert failed.is_error and failed.data is not None
    assert failed.data["error"]["type"] == "mcp_tool_execution_error"
    slow = run("slow", '{"seconds": 5}')
    assert slow.is_error and slow.data is not None and slow.data["error"]["code"] == -32001
    assert run("echo", "[1]").is_error  # arguments must be an object
    sealed = sealer.seal("unit", {"X-Test-Token": "sealed!"})
    assert run("whoami", "{}", sealed).output.startswith(f"token={digest('sealed!')} ")
    assert run("whoami", "{}", "v1.AAAA").is_error  # headers that cannot be opened


def test_a_call_carries_its_idempotency_key_in_meta(
    client: McpClient, http_server: RunningServer
) -> None:
    keyed = client.call_tool(target(http_server), "received_meta", {}, idempotency_key="r:c1")
    unkeyed = client.call_tool(target(http_server), "received_meta", {})

    assert json.loads(keyed.content[0]["text"])[IDEMPOTENCY_META_KEY] == "r:c1"
    assert IDEMPOTENCY_META_KEY not in json.loads(unkeyed.content[0]["text"])


def test_a_listen_stream_ending_after_its_session_closed_leaves_no_error_unretrieved() -> None:
    """The session's task is cancelled while it waits for the stream, which then ends: asyncio
    has no task error to log ("Task exception was never retrieved")."""

    class EndsLater:
        def __init__(self) -> None:
            self.end = asyncio.Event()

        def __aiter__(self) -> "EndsLater":
            return self

        async def __anext__(self) -> None:
            await self.end.wait()
            raise StopAsyncIteration  # the connection is gone

    async def close_while_listening() -> list[dict[str, object]]:
        loop = asyncio.get_running_loop()
        logged: list[dict[str, object]] = []
        loop.set_exception_handler(lambda _loop, context: logged.append(context))
        events, stop = EndsLater(), loop.create_future()

        async def hold() -> None:
            async for _event in _until(events, stop):
                pass

        holding = asyncio.ensure_future(hold())
        await asyncio.sleep(0.01)
        holding.cancel()  # the session closes
        await asyncio.gather(holding, return_exceptions=True)
        events.end.set()
        await asyncio.sleep(0.01)
        gc.collect()  # an unretrieved task error is logged as the task is freed
        return logged

    assert asyncio.run(close_while_listening()) == []
