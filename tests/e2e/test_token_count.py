"""``POST /v1/responses/input_tokens`` against the fleet: a worker asks the model server."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import CLIENT_FN, assert_error_body
from tests.support.recording import Recorder

LOCAL = {"type": "mcp", "server_label": "local", "require_approval": "never"}
"""The fleet's configured stdio MCP server (tests/support/mcp_servers.py's tools)."""


def without_max_tokens(body: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in body.items() if name != "max_tokens"}


def test_count_is_the_input_tokens_of_the_responses_first_turn(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    body: dict[str, Any] = {
        "model": "antwort-sim",
        "instructions": "Answer in one sentence.",
        "input": f"{marker} What is the weather in Oslo today?",
    }

    counted = client.responses.input_tokens.count(**body)
    created = client.responses.create(**body)

    assert counted.object == "response.input_tokens"
    assert created.usage is not None and counted.input_tokens == created.usage.input_tokens
    count_request, turn_request = sent
    assert count_request["max_tokens"] == 1
    assert without_max_tokens(count_request) == turn_request


@pytest.mark.parametrize("protocol", ["native", "json"])
def test_count_lists_mcp_servers_and_speaks_the_tool_protocol_as_a_turn_does(
    client: openai.OpenAI, sim_recorder: Recorder, protocol: str
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    body: dict[str, Any] = {
        "model": "antwort-sim",
        "input": f"{marker} hello",
        "tools": [LOCAL, CLIENT_FN],
    }
    metadata = {"antwort_tool_protocol": protocol}

    # the SDK's count takes no metadata: the fleet's extension travels in the body
    counted = client.responses.input_tokens.count(**body, extra_body={"metadata": metadata})
    created = client.responses.create(**body, metadata=metadata)

    assert created.status == "completed" and counted.input_tokens > 0
    count_request, turn_request = sent[:2]
    assert without_max_tokens(count_request) == turn_request
    if protocol == "native":
        names = {tool["function"]["name"] for tool in count_request["tools"]}
        assert {"get_weather", "echo"} <= names  # the MCP server's tools, listed for the count
    else:  # the tools are in the protocol's system prompt, which the count includes
        system = count_request["messages"][0]["content"]
        assert "get_weather" in system and "echo" in system


def test_count_continues_a_chain_as_its_next_response(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    first = client.responses.create(model="antwort-sim", input=f"{marker} My name is Ada.")
    body = {"model": "antwort-sim", "input": "What is my name?", "previous_response_id": first.id}

    counted = client.responses.input_tokens.count(**body)
    second = client.responses.create(**body)

    assert second.usage is not None and counted.input_tokens == second.usage.input_tokens
    assert without_max_tokens(sent[1]) == sent[2]
    assert len(sent[1]["messages"]) == 3


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        (
            {"model": "antwort-sim", "input": "x", "stream": True},
            400,
            "unknown_parameter",
            "stream",
        ),
        ({"model": "antwort-sim", "input": []}, 400, "empty_array", "input"),
        (
            {"model": "antwort-sim", "input": "x", "previous_response_id": "resp_nothere"},
            400,
            "previous_response_not_found",
            "previous_response_id",
        ),
    ],
)
def test_count_refuses_bad_requests_in_openais_shape(
    fleet: Fleet, body: dict[str, Any], status: int, code: str, param: str
) -> None:
    answer = httpx.post(f"{fleet.base_url}/v1/responses/input_tokens", json=body, timeout=30)

    error = assert_error_body(answer, status)
    assert (error["code"], error["param"]) == (code, param)
