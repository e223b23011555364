"""``additional_tools`` input items: tools made available at a point of the conversation (Codex
CLI's "lite" requests declare their tools this way and send no ``tools``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from openai.types.responses.response_input_item_param import AdditionalTools

from app.config import Settings
from app.errors import InvalidRequestError
from app.providers.translate import to_chat_messages
from app.responses import create_response, list_input_items
from app.store import ResponseStore
from tests.app.test_client_kinds import Run, call, run  # noqa: F401 - the fixture
from tests.app.test_run import answer
from tests.support.dispatch import RecordingDispatcher

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": False,
}
EXEC = {"type": "custom", "name": "exec", "description": "Run code."}
NAMESPACE = {
    "type": "namespace",
    "name": "collaboration",
    "description": "Work with others.",
    "tools": [{"type": "function", "name": "followup_task", "parameters": {"type": "object"}}],
}
ADDED: AdditionalTools = {
    "type": "additional_tools",
    "role": "developer",
    "tools": [WEATHER, EXEC, NAMESPACE],  # type: ignore[list-item]
}
LITE = [
    ADDED,
    {"role": "developer", "content": "You are a coding agent."},
    {"role": "user", "content": "What is the weather in Oslo?"},
]


def offered(request: Any) -> set[str]:
    return {
        tool["function"]["name"] if "function" in tool else tool["name"] for tool in request.tools
    }


def test_the_items_tools_are_offered_and_the_item_is_not_shown(run: Run) -> None:  # noqa: F811
    turn = run(answer("Rain."), input=LITE, store=False)

    [request] = turn.model.requests
    assert {"get_weather", "exec", "collaboration__followup_task"} <= offered(request)
    messages = to_chat_messages(request.instructions, request.items)
    assert [m["role"] for m in messages] == ["system", "user"]


def test_a_call_of_an_added_function_is_the_clients(run: Run) -> None:  # noqa: F811
    turn = run(call("get_weather", {"city": "Oslo"}), input=LITE)

    [function_call] = turn.output
    assert function_call["type"] == "function_call" and function_call["name"] == "get_weather"
    assert turn.events[-1]["response"]["tools"][0]["name"] == "get_weather"


def test_the_item_is_kept_as_sent(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    response, _ = create_response(
        store, RecordingDispatcher(), make_settings(), {"model": "m", "input": LITE}
    )

    listed = list_input_items(store, response.id, limit=10, order="asc", after=None)["data"]
    assert listed[0]["type"] == "additional_tools" and listed[0]["id"].startswith("at_")
    assert listed[0]["tools"] == [WEATHER, EXEC, NAMESPACE]


def test_a_chain_still_offers_an_earlier_items_client_tools(run: Run) -> None:  # noqa: F811
    first = run(answer("Rain."), input=LITE)

    later = run(answer("Sun."), input="And in Bergen?", previous_response_id=first.response_id)

    assert {"get_weather", "exec", "collaboration__followup_task"} <= offered(
        later.model.requests[0]
    )


def test_a_forced_tool_may_be_an_added_one(run: Run) -> None:  # noqa: F811
    turn = run(
        call("get_weather", {"city": "Oslo"}),
        input=LITE,
        tool_choice={"type": "function", "name": "get_weather"},
    )

    assert turn.model.requests[0].tool_choice == {"type": "function", "name": "get_weather"}


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({**ADDED, "tools": [{"type": "function"}]}, "input.1.tools.0.name"),
        ({**ADDED, "tools": [{"type": "teleport"}]}, "input.1.tools.0"),
        ({**ADDED, "role": "user"}, "input.1.role"),
    ],
)
def test_a_bad_item_is_a_400_naming_its_place(
    store: ResponseStore, make_settings: Callable[..., Settings], item: dict[str, Any], param: str
) -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "Hi"}, item]}

    with pytest.raises(InvalidRequestError) as refused:
        create_response(store, RecordingDispatcher(), make_settings(), body)

    assert refused.value.param == param


def test_an_input_of_added_tools_alone_is_a_400(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        create_response(
            store, RecordingDispatcher(), make_settings(), {"model": "m", "input": [ADDED]}
        )

    assert (refused.value.param, refused.value.code) == ("input", "invalid_value")
