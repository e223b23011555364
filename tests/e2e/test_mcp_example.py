"""The example MCP server (examples/mcp_server.py) as the fleet's configured server ``example``.

The session fleet reads examples/mcp_servers.json's ``example`` with its URL moved to a loopback
port (tests/e2e/conftest.py); this module runs the example server on that port.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import openai
import pytest

from tests.e2e.conftest import EXAMPLE_SERVERS_FILE, Fleet
from tests.e2e.helpers import plain
from tests.support.mcp_servers import RunningServer, start_example_server

EXAMPLE = {"type": "mcp", "server_label": "example"}


@pytest.fixture(scope="module")
def example_server(fleet: Fleet) -> Iterator[RunningServer]:
    configured = json.loads(Path(fleet.env["ANTWORT_MCP_SERVERS_FILE"]).read_text())
    server = start_example_server(urlsplit(configured["servers"]["example"]["url"]).port)
    yield server
    server.stop()


def test_mcp_example_server_is_listed_and_called_by_label(
    client: openai.OpenAI, example_server: RunningServer
) -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    response = client.responses.create(
        model="antwort-sim",
        input="echo add word_count utc_now text=hello a=2 b=40",
        tools=[EXAMPLE],  # type: ignore[list-item]
    )
    assert response.status == "completed"
    body = plain(response)
    # require_approval "never" comes from the configured file: no approval request
    kinds = [item["type"] for item in body["output"]]
    assert kinds == ["mcp_list_tools", "mcp_call", "mcp_call", "mcp_call", "mcp_call", "message"]
    listing = body["output"][0]
    assert listing["server_label"] == "example" and listing.get("error") is None
    listed = {tool["name"]: tool for tool in listing["tools"]}
    assert sorted(listed) == ["add", "echo", "utc_now", "word_count"]
    assert listed["add"]["input_schema"]["properties"]["a"]["type"] == "integer"

    calls = {item["name"]: item for item in body["output"][1:5]}
    assert {(c["server_label"], c["status"]) for c in calls.values()} == {("example", "completed")}
    assert json.loads(calls["add"]["arguments"]) == {"a": 2, "b": 40}
    assert calls["echo"]["output"] == "hello"
    assert json.loads(calls["add"]["output"]) == {"sum": 42}
    assert calls["add"]["structured_content"] == {"sum": 42}
    assert json.loads(calls["word_count"]["output"]) == {"words": 1, "lines": 1, "characters": 5}
    stamp = dt.datetime.fromisoformat(calls["utc_now"]["output"])
    assert before <= stamp <= dt.datetime.now(dt.UTC)

    configured = json.loads(EXAMPLE_SERVERS_FILE.read_text())["servers"]["example"]
    (echoed,) = body["tools"]
    assert echoed.get("server_url") is None
    assert echoed["server_description"] == configured["description"]
    assert response.output_text.startswith("Tool results: ")
