"""``web_search`` backed by an operator's internal plugin: ``web_search_call`` items and events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent

from app.config import Settings
from app.errors import InvalidRequestError
from app.responses import create_response
from app.store import ResponseStore
from tests.app.test_loop import Loop
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}

OUTPUT_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseOutputItem)
STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


def test_web_search_runs_on_the_plugin_that_backs_it(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    loop = Loop(
        store=store,
        settings=make_settings(internal_tool_modules="tests.support.search_tools"),
        model=ScriptedModel(
            calls(("call_1", "web_search", '{"query": "antwort"}')), text("Found it.")
        ),
    )
    rid = loop.create(tools=[{"type": "web_search", "search_context_size": "low"}])

    assert loop.drive(rid) == "completed"

    search, message = loop.response(rid).output
    assert (search["type"], search["status"], search["action"]) == (
        "web_search_call",
        "completed",
        {"type": "search", "query": "antwort"},
    )
    assert search["output"] == "1 page for antwort: https://example.com/antwort"
    assert message["content"][0]["text"] == "Found it."
    events = loop.events(rid)
    for item in loop.response(rid).output:
        OUTPUT_ITEM.validate_python(item)
    for event in events:
        STREAM_EVENT.validate_python(event)
    phases = [e["type"] for e in events if e["type"].startswith("response.web_search_call.")]
    assert phases == [
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
    ]
    offered = loop.model.requests[0].tools
    assert [tool["name"] for tool in offered] == ["web_search"]
    assert loop.model.requests[1].items[-2:] == [
        {"id": search["id"], "type": "function_call", "call_id": search["id"], "name": "web_search"}
        | {"arguments": '{"query": "antwort"}'},
        {"id": search["id"], "type": "function_call_output", "call_id": search["id"]}
        | {"output": search["output"]},
    ]


def test_web_search_forced_by_tool_choice_when_backed(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(internal_tool_modules="tests.support.search_tools")
    body = {"input": "go", "tools": [{"type": "web_search_preview"}]}
    body["tool_choice"] = {"type": "web_search_preview"}

    response, _ = create_response(store, RecordingDispatcher(), settings, body)

    assert response.tool_choice == {"type": "web_search_preview"}


@pytest.mark.parametrize(
    ("declared", "forced"),
    [
        ("web_search", "web_search"),  # the Agents SDK's tool_choice="web_search", the AI SDK's
        ("web_search", "web_search_preview"),  # one search here, by any of its names
        ("web_search_preview", "web_search"),
        ("web_search_2025_08_26", "web_search_2025_08_26"),
    ],
)
def test_a_tool_choice_by_any_web_search_name_forces_the_search(
    store: ResponseStore, make_settings: Callable[..., Settings], declared: str, forced: str
) -> None:
    """Before, ``{"type": "web_search"}`` was a 400 ("Input should be 'auto', 'required' or
    'none'") though both SDKs send it to force their web search tool."""
    loop = Loop(
        store=store,
        settings=make_settings(internal_tool_modules="tests.support.search_tools"),
        model=ScriptedModel(calls(("call_1", "web_search", '{"query": "x"}')), text("Found.")),
    )
    rid = loop.create(tools=[WEATHER, {"type": declared}], tool_choice={"type": forced})

    assert loop.drive(rid) == "completed"

    first, second = loop.model.requests
    assert first.tool_choice == {"type": "function", "name": "web_search"}
    assert second.tool_choice == "auto"  # forced on the first turn only
    assert loop.response(rid).tool_choice == {"type": forced}  # echoed as sent
    assert [item["type"] for item in loop.response(rid).output] == ["web_search_call", "message"]


@pytest.mark.parametrize(("policy", "param"), [("drop", "tool_choice"), ("reject", "tools.0")])
def test_a_tool_choice_forcing_web_search_without_a_plugin_is_400(
    store: ResponseStore, make_settings: Callable[..., Settings], policy: str, param: str
) -> None:
    settings = make_settings(unavailable_hosted_tools=policy)
    body = {"input": "go", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), settings, body)

    assert (caught.value.param, caught.value.code) == (param, "unsupported_tool")
    assert caught.value.message == "The hosted tool 'web_search' is not available on this server."


def test_a_tool_choice_forcing_web_search_needs_a_search_declared(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(internal_tool_modules="tests.support.search_tools")
    body = {"input": "go", "tools": [WEATHER], "tool_choice": {"type": "web_search"}}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), settings, body)

    assert (caught.value.param, caught.value.code) == ("tool_choice", "invalid_value")


def test_a_request_without_web_search_reads_no_tool_definition(
    store: ResponseStore, make_settings: Callable[..., Settings], monkeypatch: Any
) -> None:
    """Preparing a request looks plugins up only when it declares a web search tool.

    Every registered tool's ``definition()`` used to be built at each create, whatever the
    request (a few percent of the gateway's CPU per response).
    """
    from tests.support import search_tools

    built: list[str] = []
    definition = search_tools.Searcher.definition

    def counted(self: search_tools.Searcher) -> Any:
        built.append("test_search")
        return definition(self)

    settings = make_settings(internal_tool_modules="tests.support.search_tools")
    function = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    # the process's first request loads the registry (once): alone, this test ran first
    create_response(store, RecordingDispatcher(), settings, {"input": "hi", "tools": [function]})
    monkeypatch.setattr(search_tools.Searcher, "definition", counted)
    create_response(store, RecordingDispatcher(), settings, {"input": "hi", "tools": [function]})
    assert built == []
    create_response(
        store, RecordingDispatcher(), settings, {"input": "hi", "tools": [{"type": "web_search"}]}
    )
    assert built  # a declared web search still finds its plugin


def test_a_search_sent_back_with_the_whole_history_reaches_the_model(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    loop = Loop(
        store=store,
        settings=make_settings(internal_tool_modules="tests.support.search_tools"),
        model=ScriptedModel(calls(("call_1", "web_search", '{"query": "antwort"}')), text("Ok.")),
    )
    rid = loop.create(tools=[{"type": "web_search"}])
    loop.drive(rid)
    history = [{"role": "user", "content": "go"}, *loop.response(rid).output]

    then = {"role": "user", "content": "And then?"}
    again = loop.create(tools=[{"type": "web_search"}], input=[*history, then])
    assert loop.drive(again) == "completed"

    search = history[1]
    assert loop.model.requests[-1].items[1:3] == [
        {"id": search["id"], "type": "function_call", "call_id": search["id"], "name": "web_search"}
        | {"arguments": '{"query": "antwort"}'},
        {"id": search["id"], "type": "function_call_output", "call_id": search["id"]}
        | {"output": search["output"]},
    ]
