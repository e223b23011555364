"""The fleet's own ``tool_search`` (OpenAI's hosted one): deferred tools held back, then loaded.

Through real turns on the store: the model is offered the search instead of the deferred tools,
its call is answered in the same step (a ``tool_search_call`` and a ``tool_search_output``,
``execution: "server"``, no call id, as OpenAI's), and the next turn offers what it loaded.
Items and events validate against the official SDK's types.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from openai.types.responses import ResponseToolSearchOutputItem

from app.config import Settings
from app.errors import InvalidRequestError
from app.responses import create_response
from app.run import RunDeps, StepOutcome, advance_response
from app.store import ResponseStore
from tests.app.test_client_kinds import INPUT_ITEM, OUTPUT_ITEM, STREAM_EVENT, TIDE
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text

ORDERS = {
    "type": "function",
    "name": "list_open_orders",
    "description": "List open orders for a customer ID.",
    "parameters": {
        "type": "object",
        "properties": {"customer_id": {"type": "string"}},
        "required": ["customer_id"],
    },
    "defer_loading": True,
}
PROFILE = {
    "type": "function",
    "name": "get_customer_profile",
    "description": "Fetch a customer profile by customer ID.",
    "parameters": {"type": "object", "properties": {"customer_id": {"type": "string"}}},
}
CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "CRM tools for customer lookup and order management.",
    "tools": [PROFILE, ORDERS],
}
WEATHER = {"type": "function", "name": "weather", "parameters": {"type": "object"}}
SEARCH = {"type": "tool_search"}
TOOLS = [WEATHER, CRM, TIDE, SEARCH]

Steps = Callable[..., tuple[str, ScriptedModel, RecordingDispatcher]]


@pytest.fixture
def steps(store: ResponseStore, make_settings: Callable[..., Settings]) -> Steps:
    """Create a response from ``body`` and run its turns with ``model`` while they follow."""

    def steps(model: ScriptedModel, **body: Any) -> tuple[str, ScriptedModel, RecordingDispatcher]:
        settings, dispatcher = make_settings(), RecordingDispatcher()
        body = {"model": "m", "input": "go", "background": True, "tools": TOOLS, **body}
        response, _ = create_response(store, dispatcher, settings, body)
        deps = RunDeps(store=store, provider=model, settings=settings, dispatcher=dispatcher)
        turn = 0
        while advance_response(deps, response.id, turn) is StepOutcome.CONTINUING:
            turn += 1
        return response.id, model, dispatcher

    return steps


def offered(model: ScriptedModel, call: int) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in model.requests[call].tools}


def output_and_events(store: ResponseStore, response_id: str) -> tuple[list[Any], list[Any]]:
    output = store.get(response_id).response.output
    events = [json.loads(e.data) for e in store.events_after(response_id, -1)]
    for item in output:
        OUTPUT_ITEM.validate_python(item)
    for event in events:
        STREAM_EVENT.validate_python(event)
    return output, events


def test_deferred_tools_are_held_back_and_the_search_names_what_it_loads(
    steps: Steps,
) -> None:
    _, model, _ = steps(ScriptedModel(text("Hi.")))

    first = offered(model, 0)
    assert list(first) == ["weather", "crm__get_customer_profile", "tool_search"]
    search = first["tool_search"]
    assert search["parameters"]["properties"]["paths"]["items"]["enum"] == ["crm", "tide"]
    assert "- crm: CRM tools for customer lookup and order management." in search["description"]
    assert "- tide: The next high tide." in search["description"]


def test_the_search_is_answered_in_its_step_and_the_next_turn_calls_what_it_loaded(
    steps: Steps, store: ResponseStore
) -> None:
    model = ScriptedModel(
        calls(("call_s", "tool_search", json.dumps({"paths": ["crm"]}))),
        calls(("call_o", "crm__list_open_orders", json.dumps({"customer_id": "C-1"}))),
    )

    response_id, model, dispatcher = steps(model)

    # answered in its step: the next turn queued at once, no tool queued, no pause
    assert (dispatcher.turns, dispatcher.chords) == ([(response_id, 0), (response_id, 1)], [])
    assert "crm__list_open_orders" not in offered(model, 0)
    assert [tool["name"] for tool in model.requests[1].tools] == [  # each name once
        "weather",
        "crm__get_customer_profile",
        "crm__list_open_orders",
        "tool_search",
    ]
    output, events = output_and_events(store, response_id)
    searched, found, ordered = output
    assert {k: searched[k] for k in ("type", "call_id", "execution", "status", "arguments")} == {
        "type": "tool_search_call",
        "call_id": None,
        "execution": "server",
        "status": "completed",
        "arguments": {"paths": ["crm"]},
    }
    loaded = ResponseToolSearchOutputItem.model_validate(found)
    assert (loaded.execution, loaded.call_id, loaded.status) == ("server", None, "completed")
    assert found["tools"] == [{**CRM, "tools": [ORDERS]}]
    assert (ordered["type"], ordered["namespace"], ordered["name"]) == (
        "function_call",
        "crm",
        "list_open_orders",
    )
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added == ["tool_search_call", "tool_search_output", "function_call"]
    # the model read its search back as a call and its result, by one call id
    call, result = model.requests[1].items[-2:]
    assert (call["type"], call["name"], result["type"]) == (
        "function_call",
        "tool_search",
        "function_call_output",
    )
    assert call["call_id"] == result["call_id"] == searched["id"]
    assert json.loads(result["output"]) == {"loaded_tools": ["crm__list_open_orders"]}


def test_a_deferred_top_level_function_is_loaded_by_its_name(
    steps: Steps, store: ResponseStore
) -> None:
    model = ScriptedModel(calls(("call_s", "tool_search", '{"paths": ["tide"]}')), text("Six."))

    response_id, model, _ = steps(model)

    assert "tide" not in offered(model, 0)
    assert offered(model, 1)["tide"]["parameters"] == TIDE["parameters"]
    _, found, said = store.get(response_id).response.output
    assert found["tools"] == [{**TIDE, "strict": None}]
    assert said["type"] == "message"


@pytest.mark.parametrize("arguments", ['{"paths": ["nowhere"]}', '{"paths": 7}', "not json"])
def test_a_search_that_finds_nothing_says_so(
    steps: Steps, store: ResponseStore, arguments: str
) -> None:
    model = ScriptedModel(calls(("call_s", "tool_search", arguments)), text("Nothing."))

    response_id, model, _ = steps(model)

    _, found, _ = store.get(response_id).response.output
    assert found["tools"] == []
    assert model.requests[1].items[-1]["output"] == "No tools found."
    assert "crm__list_open_orders" not in offered(model, 1)


def test_the_search_sent_back_as_input_keeps_its_tools_loaded(
    steps: Steps, store: ResponseStore
) -> None:
    # the whole history again, as the Agents SDK sends it with store=False
    model = ScriptedModel(calls(("call_s", "tool_search", '{"paths": ["crm"]}')), text("ok"))
    first, _, _ = steps(model)
    history = [
        {"role": "user", "content": "go"},
        *[dict(item) for item in store.get(first).response.output[:2]],
    ]
    for item in history[1:]:
        del item["call_id"]  # the SDK leaves a null out
        INPUT_ITEM.validate_python(item)

    _, model, _ = steps(ScriptedModel(text("Loaded.")), input=history, store=False)

    assert "crm__list_open_orders" in offered(model, 0)
    call, result = model.requests[0].items[-2:]
    assert call["call_id"] == result["call_id"]
    assert json.loads(result["output"]) == {"loaded_tools": ["crm__list_open_orders"]}


def test_a_client_searchs_items_still_need_their_call_id(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    output = {"type": "tool_search_output", "execution": "client", "tools": []}
    body = {"model": "m", "input": [output], "tools": TOOLS}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), body)

    assert caught.value.param == "input.0.call_id"


def test_the_hosted_search_cannot_be_forced(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    body = {"model": "m", "input": "go", "tools": TOOLS, "tool_choice": {"type": "tool_search"}}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), body)

    assert (caught.value.param, caught.value.code) == ("tool_choice", "unsupported_tool")
