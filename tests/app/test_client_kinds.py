"""Client-executed tool kinds and hosted tools (issue 17, section 2), through a real turn.

Each kind's call pauses the response; its items and events validate against the official SDK's
types; the client's ``*_output`` item continues the chain, and the model reads the call and its
result back as the function call and result it made.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseInputItemParam, ResponseOutputItem, ResponseStreamEvent

from app.config import Settings
from app.errors import InvalidRequestError
from app.providers.chunks import Finish, ToolCallDelta
from app.responses import cancel_response, create_response
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from tests.app.test_run import FakeModel, answer
from tests.support.dispatch import RecordingDispatcher

OUTPUT_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseOutputItem)
STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)
INPUT_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseInputItemParam)

NAMESPACE = {
    "type": "namespace",
    "name": "agents",
    "description": "Sub-agents.",
    "tools": [
        {
            "type": "function",
            "name": "spawn",
            "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
            "strict": False,
        },
        {"type": "custom", "name": "note", "description": "Write a note."},
    ],
}
GRAMMAR_TOOL = {
    "type": "custom",
    "name": "math",
    "description": "Evaluate.",
    "format": {"type": "grammar", "syntax": "regex", "definition": r"\d+[+*]\d+"},
}


@dataclass
class Turn:
    """One model turn of a response, as the store holds it afterwards."""

    response_id: str
    output: list[dict[str, Any]]
    events: list[dict[str, Any]]
    model: FakeModel


Run = Callable[..., Turn]


@pytest.fixture
def run(store: ResponseStore, make_settings: Callable[..., Settings]) -> Run:
    """Create a response from ``body`` and run its first turn with ``model``."""

    def run(model: FakeModel, **body: Any) -> Turn:
        settings = make_settings()
        body = {"model": "m", "input": "go", "background": True, **body}
        response, _ = create_response(store, RecordingDispatcher(), settings, body)
        advance_response(RunDeps(store=store, provider=model, settings=settings), response.id, 0)
        events = [json.loads(e.data) for e in store.events_after(response.id, -1)]
        return Turn(response.id, store.get(response.id).response.output, events, model)

    return run


def call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> FakeModel:
    text = json.dumps(arguments)
    return FakeModel(
        ToolCallDelta(index=0, call_id=call_id, name=name, arguments=text[:5]),
        ToolCallDelta(index=0, arguments=text[5:]),
        Finish(reason="tool_calls"),
    )


def sdk_valid(turn: Turn) -> None:
    for item in turn.output:
        OUTPUT_ITEM.validate_python(item)
    for event in turn.events:
        STREAM_EVENT.validate_python(event)


def test_namespace_tools_are_offered_by_alias_and_called_with_their_namespace(run: Run) -> None:
    turn = run(call("agents__spawn", {"task": "tests"}), tools=[NAMESPACE])

    offered = [tool["name"] for tool in turn.model.requests[0].tools]
    assert offered == ["agents__spawn", "agents__note"]
    [item] = turn.output
    assert (item["type"], item["name"], item["namespace"]) == ("function_call", "spawn", "agents")
    sdk_valid(turn)
    done = next(e for e in turn.events if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "spawn"
    assert turn.events[-1]["response"]["status"] == "completed"


def test_namespace_custom_tool_is_a_custom_call_with_its_namespace(run: Run) -> None:
    turn = run(call("agents__note", {"input": "remember"}), tools=[NAMESPACE])

    [item] = turn.output
    assert (item["type"], item["name"], item["namespace"], item["input"]) == (
        "custom_tool_call",
        "note",
        "agents",
        "remember",
    )
    sdk_valid(turn)


def test_custom_tool_call_streams_its_input_events(run: Run) -> None:
    turn = run(call("math", {"input": "6*7"}), tools=[GRAMMAR_TOOL])

    [item] = turn.output
    assert (item["type"], item["call_id"], item["name"], item["input"]) == (
        "custom_tool_call",
        "call_1",
        "math",
        "6*7",
    )
    sdk_valid(turn)
    types = [e["type"] for e in turn.events]
    start = types.index("response.output_item.added")
    assert types[start : start + 4] == [
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
    ]
    [offered] = turn.model.requests[0].tools
    assert r"\d+[+*]\d+" in offered["parameters"]["properties"]["input"]["description"]


def test_custom_tool_output_continues_the_chain(run: Run) -> None:
    first = run(call("math", {"input": "6*7"}), tools=[GRAMMAR_TOOL])
    output = {"type": "custom_tool_call_output", "call_id": "call_1", "output": "42"}
    INPUT_ITEM.validate_python(output)

    second = run(
        answer("It is 42."),
        input=[output],
        tools=[GRAMMAR_TOOL],
        previous_response_id=first.response_id,
    )

    assert second.model.requests[0].items[-2:] == [
        {"type": "function_call", "call_id": "call_1", "name": "math", "arguments": SIX_TIMES},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ]
    assert second.events[-1]["response"]["status"] == "completed"


SIX_TIMES = json.dumps({"input": "6*7"})


def test_custom_tool_output_for_an_unknown_call_is_400(run: Run) -> None:
    first = run(call("math", {"input": "6*7"}), tools=[GRAMMAR_TOOL])
    output = {"type": "custom_tool_call_output", "call_id": "call_nope", "output": "42"}

    with pytest.raises(InvalidRequestError) as caught:
        run(answer("?"), input=[output], previous_response_id=first.response_id)

    assert (caught.value.param, caught.value.code) == ("input.0.call_id", "invalid_value")


HOSTED = [
    {"type": "web_search", "external_web_access": True},
    {"type": "web_search_preview"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "image_generation"},
    {"type": "tool_search"},
]
WEATHER = {"type": "function", "name": "weather", "parameters": {"type": "object"}}


def test_hosted_tools_are_dropped_from_what_the_model_sees(run: Run) -> None:
    turn = run(answer("Hi."), tools=[WEATHER, *HOSTED])

    assert [tool["name"] for tool in turn.model.requests[0].tools] == ["weather"]
    echoed = turn.events[-1]["response"]["tools"]
    assert [tool["type"] for tool in echoed] == ["function", *(t["type"] for t in HOSTED)]


@pytest.mark.parametrize("index", range(len(HOSTED)))
def test_hosted_tools_are_refused_when_the_policy_says_reject(
    store: ResponseStore, make_settings: Callable[..., Settings], index: int
) -> None:
    settings = make_settings(unavailable_hosted_tools="reject")
    body = {"model": "m", "input": "go", "tools": [WEATHER, HOSTED[index]]}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), settings, body)

    assert (caught.value.param, caught.value.code) == ("tools.1", "unsupported_tool")
    assert HOSTED[index]["type"] in caught.value.message


@pytest.mark.parametrize("policy", ["drop", "reject"])
@pytest.mark.parametrize("forced", ["web_search_preview", "file_search", "image_generation"])
def test_tool_choice_forcing_a_hosted_tool_is_400(
    store: ResponseStore, make_settings: Callable[..., Settings], policy: str, forced: str
) -> None:
    settings = make_settings(unavailable_hosted_tools=policy)
    body = {"model": "m", "input": "go", "tools": [{"type": forced}]}
    body["tool_choice"] = {"type": forced}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), settings, body)

    assert (caught.value.param, caught.value.code) == ("tool_choice", "unsupported_tool")


def test_cancel_with_a_custom_call_paused_is_unchanged(run: Run, store: ResponseStore) -> None:
    turn = run(call("math", {"input": "6*7"}), tools=[GRAMMAR_TOOL])

    dispatcher = RecordingDispatcher()
    again = cancel_response(store, dispatcher, turn.response_id)

    assert again.status == "completed" and dispatcher.revoked == []
