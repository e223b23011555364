"""examples/mcp_server.py as a real process, driven by the ``mcp`` SDK's client."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from mcp import Client

from app.tools.mcp.client import McpClient
from app.tools.mcp.target import ServerTarget
from tests.support.mcp_servers import RunningServer, start_example_server


@pytest.fixture(scope="module")
def example() -> Iterator[RunningServer]:
    server = start_example_server()
    yield server
    server.stop()


def list_tools(url: str) -> dict[str, Any]:
    async def listed() -> dict[str, Any]:
        async with Client(url) as client:
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    return anyio.run(listed)


def call(url: str, name: str, arguments: dict[str, Any]) -> Any:
    async def called() -> Any:
        async with Client(url) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(called)


def test_example_server_lists_its_typed_tools(example: RunningServer) -> None:
    tools = list_tools(example.url)
    assert sorted(tools) == ["add", "echo", "utc_now", "word_count"]
    for tool in tools.values():
        assert tool.description and tool.input_schema["type"] == "object"
    types = {
        name: {key: prop["type"] for key, prop in tool.input_schema["properties"].items()}
        for name, tool in tools.items()
    }
    assert types == {
        "echo": {"text": "string"},
        "add": {"a": "integer", "b": "integer"},
        "word_count": {"text": "string"},
        "utc_now": {},
    }
    assert tools["add"].output_schema["properties"] == {"sum": {"title": "Sum", "type": "integer"}}


def test_example_server_calls_each_tool(example: RunningServer) -> None:
    echoed = call(example.url, "echo", {"text": "hello, fleet"})
    assert not echoed.is_error and echoed.content[0].text == "hello, fleet"

    added = call(example.url, "add", {"a": 2, "b": 40})
    assert not added.is_error and added.structured_content == {"sum": 42}
    assert json.loads(added.content[0].text) == {"sum": 42}

    counted = call(example.url, "word_count", {"text": "one two\nthree"})
    assert counted.structured_content == {"words": 3, "lines": 2, "characters": 13}

    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    now = call(example.url, "utc_now", {})
    stamp = dt.datetime.fromisoformat(now.content[0].text)
    assert stamp.utcoffset() == dt.timedelta(0)
    assert before <= stamp <= dt.datetime.now(dt.UTC)


def test_example_server_reports_bad_arguments_as_a_tool_error(example: RunningServer) -> None:
    result = call(example.url, "add", {"a": "two", "b": 40})
    assert result.is_error and "valid integer" in result.content[0].text


def test_example_server_health_route(example: RunningServer) -> None:
    health = httpx.get(example.url.removesuffix("/mcp") + "/health", timeout=5)
    assert health.status_code == 200 and health.json() == {"status": "ok"}


def test_example_server_allowed_host_keeps_dns_rebinding_protection() -> None:
    server = start_example_server(None, "--allowed-host", "mcp-example")
    try:
        port = urlsplit(server.url).port
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
        accept = {"Accept": "application/json, text/event-stream"}
        statuses = {
            host: httpx.post(
                server.url, json=initialize, headers={**accept, "Host": host}, timeout=5
            ).status_code
            for host in (f"mcp-example:{port}", f"127.0.0.1:{port}", f"attacker.example:{port}")
        }
    finally:
        server.stop()
    assert statuses == {
        f"mcp-example:{port}": 200,
        f"127.0.0.1:{port}": 200,
        f"attacker.example:{port}": 421,
    }


def test_a_sigterm_stops_the_server_while_a_fleet_worker_holds_a_session() -> None:
    """uvicorn waits on SIGTERM until every open stream ends; a fleet session keeps one open.

    The fleet's MCP client holds a change-notification stream for each session. Before, the
    example server then never stopped on SIGTERM (compose waited out its grace period and killed
    it); now the streams are cut after a short grace.
    """
    server = start_example_server()
    client = McpClient()
    try:
        target = ServerTarget(label="example", url=server.url, is_configured=True)
        assert client.call_tool(target, "add", {"a": 1, "b": 2}).structured == {"sum": 3}
        server.process.terminate()
        server.process.wait(timeout=15)  # the grace is 3 s
    finally:
        server.stop()
        client.close()
