"""What the model is sent on turn N+1 holds turn N as the model produced it.

The model is the simulator over real HTTP (``tests/support/recording.py`` records the bodies it
received); the loop, the MCP server and Redis are real, in one process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.config import Settings
from app.protocol.items import item_id
from app.providers.openai_chat import ChatCompletionsProvider
from app.providers.translate import to_chat_messages
from app.store import ResponseStore
from app.tools.kinds import KindContext
from app.tools.mcp.kind import make_mcp_executor
from app.tools.registry import KINDS
from app.tools.transcript import group_turns
from tests.app.test_mcp_run import Fleet, mcp_tool
from tests.support.mcp_servers import RunningServer, running
from tests.support.recording import Recorder

FOUR_TOOLS = "echo add whoami list_count"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running("streamable-http", name="unit") as started:
        yield started


@pytest.fixture
def fleet(store: ResponseStore, make_settings: Callable[..., Settings]) -> Iterator[Fleet]:
    """The loop in one process (tests/app/test_mcp_run.py's), its MCP client real."""
    settings = make_settings(mcp_allowed_hosts="127.0.0.1", mcp_secret_key="unit-key")
    executor = make_mcp_executor(KindContext(settings=settings, redis=store.redis, keys=store.keys))
    yield Fleet(store, settings, executor)
    executor.client.close()


@pytest.fixture
def tools(server: RunningServer) -> list[dict[str, Any]]:
    """The MCP test server's tools, without approvals."""
    return [mcp_tool(server, require_approval="never")]


@pytest.fixture
def model(sim_url: str) -> Iterator[ChatCompletionsProvider]:
    """The simulator over HTTP, as the fleet's provider calls it."""
    provider = ChatCompletionsProvider(base_url=sim_url, max_retries=0)
    yield provider
    provider.close()


def _assistant_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]


def _shape(messages: list[dict[str, Any]]) -> list[str]:
    return [
        f"{m['role']}:{len(m['tool_calls'])}" if m.get("tool_calls") else m["role"]
        for m in messages
    ]


def test_parallel_mcp_calls_go_back_as_one_assistant_message(
    fleet: Fleet,
    tools: list[dict[str, Any]],
    model: ChatCompletionsProvider,
    sim_recorder: Recorder,
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    first = fleet.create(input=f"{marker} use {FOUR_TOOLS}", tools=tools)

    assert fleet.run(model, first) == "completed"

    assert len(sent) == 2
    [turn] = _assistant_turns(sent[1]["messages"])
    names = [call["function"]["name"] for call in turn["tool_calls"]]
    assert names == FOUR_TOOLS.split()
    assert _shape(sent[1]["messages"]) == ["user", "assistant:4", "tool", "tool", "tool", "tool"]
    ids = [call["id"] for call in turn["tool_calls"]]
    assert [m["tool_call_id"] for m in sent[1]["messages"][2:]] == ids

    # The next response of the chain sees the same turn, then the answer, then its own input.
    second = fleet.create(input=f"{marker} thanks", previous_response_id=first, tools=tools)
    assert fleet.run(model, second) == "completed"
    assert sent[2]["messages"][: len(sent[1]["messages"])] == sent[1]["messages"]
    answer = sent[2]["messages"][len(sent[1]["messages"])]
    assert answer["role"] == "assistant" and answer["content"].startswith("Tool results: ")


def test_client_results_reach_the_model_in_call_order(
    fleet: Fleet, model: ChatCompletionsProvider, sim_recorder: Recorder
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    tools = [
        {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
        for name in ("get_weather", "get_time")
    ]
    first = fleet.create(input=f"{marker} get_weather and get_time", tools=tools)
    assert fleet.run(model, first) == "completed"
    calls = [i for i in fleet.store.get(first).response.output if i["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["get_weather", "get_time"]

    answers = [
        {"type": "function_call_output", "call_id": call["call_id"], "output": call["name"]}
        for call in reversed(calls)  # the client answers in its own order
    ]
    second = fleet.create(input=answers, previous_response_id=first, tools=tools)
    assert fleet.run(model, second) == "completed"

    messages = sent[1]["messages"]
    assert _shape(messages) == ["user", "assistant:2", "tool", "tool"]
    assert [m["content"] for m in messages[2:]] == ["get_weather", "get_time"]


def _mcp_item(rid: str, turn: int, index: int) -> dict[str, Any]:
    return {
        "id": item_id("mcp", rid, turn, index),
        "type": "mcp_call",
        "server_label": "s",
        "name": f"tool{index}",
        "arguments": "{}",
        "output": f"out{index}",
        "error": None,
        "status": "completed",
    }


def test_calls_of_separate_turns_stay_separate() -> None:
    one_turn = [_mcp_item("resp_a", 1, 0), _mcp_item("resp_a", 1, 1)]
    two_turns = [_mcp_item("resp_a", 1, 0), _mcp_item("resp_a", 2, 1)]

    one = to_chat_messages(None, KINDS.presenters.model_view(one_turn))
    two = to_chat_messages(None, KINDS.presenters.model_view(two_turns))

    assert _shape(one) == ["assistant:2", "tool", "tool"]
    assert _shape(two) == ["assistant:1", "tool", "assistant:1", "tool"]


def test_a_turns_text_shares_its_assistant_message() -> None:
    said = {
        "id": item_id("msg", "resp_a", 0, 0),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
    }
    items = [
        {"type": "message", "role": "user", "content": "hi"},
        said,
        _mcp_item("resp_a", 0, 1),
        _mcp_item("resp_a", 0, 2),
    ]

    messages = to_chat_messages(None, KINDS.presenters.model_view(items))

    assert _shape(messages) == ["user", "assistant:2", "tool", "tool"]
    assert messages[1]["content"] == "Let me look."


def test_untagged_history_is_one_turn_until_a_result() -> None:
    def call(call_id: str) -> dict[str, Any]:
        return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}

    def result(call_id: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": call_id, "output": call_id}

    items = [call("a"), call("b"), result("b"), result("a"), call("c"), result("c")]

    viewed = group_turns(
        items, view=lambda item: [item], is_call=lambda item: item["type"] == "function_call"
    )

    assert [(i["type"], i["call_id"]) for i in viewed] == [
        ("function_call", "a"),
        ("function_call", "b"),
        ("function_call_output", "a"),
        ("function_call_output", "b"),
        ("function_call", "c"),
        ("function_call_output", "c"),
    ]


# -- the JSON tool protocol: the model's own directives, verbatim --------------------------------

JSON_MODE = {"antwort_tool_protocol": "json"}


def _directives(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant"]


def test_json_protocol_replays_the_models_directives_verbatim(
    fleet: Fleet,
    tools: list[dict[str, Any]],
    model: ChatCompletionsProvider,
    sim_recorder: Recorder,
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    first = fleet.create(input=f"{marker} echo text=hi", tools=tools, metadata=JSON_MODE)

    assert fleet.run(model, first) == "completed"

    # Call 1 plans, call 2 (same turn, after the go-ahead) asks for echo; turn 2 answers.
    assert len(sent) == 3
    plan = sent[1]["messages"][-2]["content"]
    assert json.loads(plan)["type"] == "plan" and _directives(sent[1]["messages"]) == [plan]
    turn2 = sent[2]["messages"][1:]
    plan_again, tool_request = _directives(turn2)
    assert plan_again == plan
    assert json.loads(tool_request)["step_title"] == "Run echo"  # the model's title, kept
    assert turn2[2]["content"].startswith("[antwort] Plan noted.")
    assert turn2[-1]["content"].startswith("[antwort] Result of echo")

    # A later response of the chain replays every directive of the first, as written.
    second = fleet.create(
        input=f"{marker} thanks", previous_response_id=first, tools=tools, metadata=JSON_MODE
    )
    assert fleet.run(model, second) == "completed"
    later = sent[3]["messages"][1:]
    assert later[: len(turn2)] == turn2
    reply = json.loads(later[len(turn2)]["content"])
    answer = fleet.store.get(first).response.output[-1]["content"][0]["text"]
    assert reply == {"type": "reply", "message": answer}
