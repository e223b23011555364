"""``web_search`` backed by an operator's internal plugin: ``web_search_call`` items and events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent

from app.config import Settings
from app.responses import create_response
from app.store import ResponseStore
from tests.app.test_loop import Loop
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text

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
