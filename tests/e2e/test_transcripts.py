"""What the model reads on turn N+1 holds turn N as it produced it, through the real fleet.

The fleet's model is the session's simulator, in this process: its recorder keeps the Chat
Completions bodies the inference workers sent (``tests/support/recording.py``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai

from tests.support.recording import Recorder

LOCAL = {"type": "mcp", "server_label": "local", "require_approval": "never"}
"""The fleet's configured stdio MCP server (tests/support/mcp_servers.py's tools)."""
JSON_MODE = {"antwort_tool_protocol": "json"}


def _shape(messages: list[dict[str, Any]]) -> list[str]:
    return [
        f"{m['role']}:{len(m['tool_calls'])}" if m.get("tool_calls") else m["role"]
        for m in messages
    ]


def test_parallel_mcp_calls_reach_the_model_as_one_turn(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    first = client.responses.create(
        model="antwort-sim",
        input=f"{marker} use echo add whoami list_count",
        tools=[LOCAL],  # type: ignore[list-item]
    )
    assert first.status == "completed"
    assert [i.type for i in first.output].count("mcp_call") == 4

    second = client.responses.create(
        model="antwort-sim", input=f"{marker} thanks", previous_response_id=first.id
    )
    assert second.status == "completed"

    turn = sent[1]["messages"]
    assert _shape(turn) == ["user", "assistant:4", "tool", "tool", "tool", "tool"]
    ids = [call["id"] for call in turn[1]["tool_calls"]]
    assert [m["tool_call_id"] for m in turn[2:]] == ids
    assert sent[2]["messages"][: len(turn)] == turn


def test_client_results_in_any_order_reach_the_model_in_call_order(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    tools: Any = [
        {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
        for name in ("get_weather", "get_time")
    ]
    first = client.responses.create(
        model="antwort-sim", input=f"{marker} get_weather and get_time", tools=tools
    )
    calls = [item for item in first.output if item.type == "function_call"]
    answers: Any = [
        {"type": "function_call_output", "call_id": call.call_id, "output": call.name}
        for call in reversed(calls)
    ]
    second = client.responses.create(
        model="antwort-sim", input=answers, previous_response_id=first.id, tools=tools
    )
    assert second.status == "completed"

    messages = sent[1]["messages"]
    assert _shape(messages) == ["user", "assistant:2", "tool", "tool"]
    assert [m["content"] for m in messages[2:]] == ["get_weather", "get_time"]


def test_json_protocol_directives_come_back_verbatim(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    first = client.responses.create(
        model="antwort-sim",
        input=f"{marker} echo text=hi",
        tools=[LOCAL],  # type: ignore[list-item]
        metadata=JSON_MODE,
    )
    assert first.status == "completed"
    second = client.responses.create(
        model="antwort-sim",
        input=f"{marker} thanks",
        previous_response_id=first.id,
        tools=[LOCAL],  # type: ignore[list-item]
        metadata=JSON_MODE,
    )
    assert second.status == "completed"

    # Turn 1 plans, then (after the go-ahead) asks for echo; turn 2 replies; the next response
    # plans and replies again.
    assert len(sent) == 5
    plan = sent[1]["messages"][-2]["content"]
    turn2 = sent[2]["messages"][1:]
    written = [m["content"] for m in turn2 if m["role"] == "assistant"]
    assert written[0] == plan and json.loads(plan)["type"] == "plan"
    assert json.loads(written[1])["step_title"] == "Run echo"
    later = sent[3]["messages"][1:]
    assert later[: len(turn2)] == turn2
    reply = json.loads(later[len(turn2)]["content"])
    assert reply == {"type": "reply", "message": first.output_text}


def test_an_openai_history_with_file_search_and_image_generation_is_read_by_the_model(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    """A conversation started at OpenAI goes on here: its hosted calls are history the
    model reads (a call and its result, in words), not a 400."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    search = {
        "id": "fs_1",
        "type": "file_search_call",
        "status": "completed",
        "queries": ["refund policy"],
        "results": [{"file_id": "file-1", "filename": "policy.md", "text": "Refunds: 30 days."}],
    }
    image = {
        "id": "ig_1",
        "type": "image_generation_call",
        "status": "completed",
        "result": "iVBORw0KGgo=",
        "output_format": "png",
    }
    history: Any = [
        {"role": "user", "content": "Refund policy? And draw a fox."},
        search,
        image,
        {"role": "assistant", "content": "30 days; here is your fox."},
        {"role": "user", "content": f"{marker} thanks"},
    ]

    response = client.responses.create(model="antwort-sim", input=history)

    assert response.status == "completed"
    messages = sent[0]["messages"]
    assert _shape(messages) == [
        "user",
        "assistant:1",
        "tool",
        "assistant:1",
        "tool",
        "assistant",
        "user",
    ]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "file_search"
    assert messages[2]["content"] == "From policy.md:\nRefunds: 30 days."
    assert messages[3]["tool_calls"][0]["function"]["name"] == "image_generation"
    assert messages[4]["content"] == "An image was generated (png)."
    stored = client.responses.input_items.list(response.id, order="asc").data
    assert [item.type for item in stored][1:3] == ["file_search_call", "image_generation_call"]
