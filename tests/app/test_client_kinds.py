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
from openai.types.responses import (
    ResponseInputItemParam,
    ResponseItem,
    ResponseOutputItem,
    ResponseStreamEvent,
)

from app.config import Settings
from app.errors import InvalidRequestError
from app.providers.chunks import Finish, ToolCallDelta
from app.providers.translate import to_chat_messages
from app.responses import cancel_response, create_response, list_input_items
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from tests.app.test_run import FakeModel, answer
from tests.support.dispatch import RecordingDispatcher

OUTPUT_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseOutputItem)
STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)
INPUT_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseInputItemParam)
LISTED_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseItem)

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


def test_a_custom_tool_s_async_option_is_taken_and_not_echoed(run: Run) -> None:
    """The SDK's ``CustomToolParam`` has ``async``, and the AI SDK's ``openai.tools.custom``
    sends it; before, a 400 "Unknown parameter: 'tools.0.async'" (a namespace's: ….tools.0…)."""
    nested = {**NAMESPACE, "tools": [{**GRAMMAR_TOOL, "async": False}]}
    tools = [{**GRAMMAR_TOOL, "name": "calc", "async": False}, nested]

    turn = run(call("calc", {"input": "6*7"}), tools=tools)

    assert [item["name"] for item in turn.output] == ["calc"]
    echoed = turn.events[-1]["response"]["tools"]
    assert echoed == [{**GRAMMAR_TOOL, "name": "calc"}, {**NAMESPACE, "tools": [GRAMMAR_TOOL]}]


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

    called = first.events[-1]["response"]["output"][0]
    assert second.model.requests[0].items[-2:] == [
        {"id": called["id"], "type": "function_call", "call_id": "call_1", "name": "math"}
        | {"arguments": SIX_TIMES},
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
]
WEATHER = {"type": "function", "name": "weather", "parameters": {"type": "object"}}


def test_hosted_tools_are_dropped(run: Run) -> None:
    turn = run(answer("Hi."), tools=[WEATHER, *HOSTED])

    assert [tool["name"] for tool in turn.model.requests[0].tools] == ["weather"]
    assert [tool["type"] for tool in turn.events[-1]["response"]["tools"]] == ["function"]


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


@pytest.mark.parametrize(
    ("policy", "forced"),
    [
        ("drop", "web_search_preview"),  # no plugin backs it here
        ("drop", "file_search"),
        ("reject", "file_search"),
        ("drop", "image_generation"),
        ("reject", "image_generation"),
    ],
)
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


FIXED = {
    "apply_patch": (
        {"type": "apply_patch"},
        {"type": "create_file", "path": "a.txt", "diff": "+hello"},
        {"operation": {"type": "create_file", "path": "a.txt", "diff": "+hello"}},
        {"type": "apply_patch_call_output", "call_id": "call_1", "status": "completed"},
        "completed",
    ),
    "shell": (
        {"type": "shell", "environment": {"type": "local"}},
        {"commands": ["ls", "pwd"], "timeout_ms": 1000},
        {"action": {"commands": ["ls", "pwd"], "timeout_ms": 1000, "max_output_length": None}},
        {
            "type": "shell_call_output",
            "call_id": "call_1",
            "output": [
                {"stdout": "a.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
                {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}},
            ],
        },
        "a.txt\n[exit 0]\n[timed out]",
    ),
    "local_shell": (
        {"type": "local_shell"},
        {"command": ["ls", "-l"], "working_directory": "/tmp"},
        {
            "action": {
                "type": "exec",
                "command": ["ls", "-l"],
                "env": {},
                "working_directory": "/tmp",
            }
        },
        {"type": "local_shell_call_output", "id": "call_1", "output": "total 0"},
        "total 0",
    ),
    "computer": (
        {"type": "computer_use_preview", "display_width": 800, "display_height": 600}
        | {"environment": "linux"},
        {"action": {"type": "click", "button": "left", "x": 3, "y": 4}},
        {"action": {"type": "click", "button": "left", "x": 3, "y": 4}},
        {
            "type": "computer_call_output",
            "call_id": "call_1",
            "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA=="},
        },
        "A screenshot of the screen after the action (not shown here).",
    ),
}


@pytest.mark.parametrize("kind", sorted(FIXED))
def test_fixed_client_tool_call_pauses_and_its_output_continues(run: Run, kind: str) -> None:
    tool, arguments, fields, output, read = FIXED[kind]

    first = run(call(kind, arguments), tools=[tool])

    [item] = first.output
    assert {key: item[key] for key in fields} == fields
    assert item["call_id"] == "call_1"
    sdk_valid(first)
    assert first.events[-1]["response"]["status"] == "completed"  # paused for the client
    INPUT_ITEM.validate_python(output)
    second = run(answer("Done."), input=[output], previous_response_id=first.response_id)
    seen = second.model.requests[0].items[-2:]
    assert (seen[0]["type"], seen[0]["name"]) == ("function_call", kind)
    assert seen[1] == {"type": "function_call_output", "call_id": "call_1", "output": read}
    assert second.events[-1]["response"]["status"] == "completed"


@pytest.mark.parametrize("kind", sorted(FIXED))
def test_fixed_client_tool_output_for_an_unknown_call_is_400(run: Run, kind: str) -> None:
    tool, arguments, _, output, _ = FIXED[kind]
    first = run(call(kind, arguments), tools=[tool])
    key = "id" if kind == "local_shell" else "call_id"

    with pytest.raises(InvalidRequestError) as caught:
        run(answer("?"), input=[{**output, key: "nope"}], previous_response_id=first.response_id)

    assert caught.value.param == f"input.0.{key}"


LOCAL_SHELL_OUTPUTS = {
    "call_id": {"call_id": "call_1"},  # what the Agents SDK and the AI SDK send
    "call_id and its own id": {"call_id": "call_1", "id": "lsho_1"},
    "id": {"id": "call_1"},  # the SDK's typed param
}


@pytest.mark.parametrize("names", sorted(LOCAL_SHELL_OUTPUTS))
def test_a_local_shell_output_names_its_call_by_call_id_or_else_by_id(
    run: Run, store: ResponseStore, names: str
) -> None:
    tool, arguments, *_ = FIXED["local_shell"]
    first = run(call("local_shell", arguments), tools=[tool])
    output = {"type": "local_shell_call_output", "output": "total 0", **LOCAL_SHELL_OUTPUTS[names]}

    second = run(answer("Done."), input=[output], previous_response_id=first.response_id)

    seen = second.model.requests[0].items[-1]
    assert seen == {"type": "function_call_output", "call_id": "call_1", "output": "total 0"}
    assert second.events[-1]["response"]["status"] == "completed"
    [kept] = list_input_items(store, second.response_id, limit=1, order="asc", after=None)["data"]
    assert {key: kept[key] for key in output} == output  # as sent, with an id if it had none
    assert kept["id"]
    LISTED_ITEM.validate_python(kept)


def test_a_local_shell_output_for_an_unknown_call_id_is_400(run: Run) -> None:
    tool, arguments, *_ = FIXED["local_shell"]
    first = run(call("local_shell", arguments), tools=[tool])
    output = {"type": "local_shell_call_output", "call_id": "nope", "id": "call_1", "output": ""}

    with pytest.raises(InvalidRequestError) as caught:
        run(answer("?"), input=[output], previous_response_id=first.response_id)

    assert caught.value.param == "input.0.call_id"
    assert "with call_id 'nope'" in caught.value.message


def test_a_local_shell_output_naming_no_call_is_400(run: Run) -> None:
    tool, arguments, *_ = FIXED["local_shell"]
    first = run(call("local_shell", arguments), tools=[tool])
    output = {"type": "local_shell_call_output", "output": "total 0"}

    with pytest.raises(InvalidRequestError) as caught:
        run(answer("?"), input=[output], previous_response_id=first.response_id)

    assert (caught.value.param, caught.value.code) == (
        "input.0.call_id",
        "missing_required_parameter",
    )


def test_a_local_shell_call_sent_back_without_status_is_history(run: Run) -> None:
    # the AI SDK's whole history (store: false): the call without its status
    tool, arguments, *_ = FIXED["local_shell"]
    first = run(call("local_shell", arguments), tools=[tool])
    [made] = first.output
    sent_back = {key: value for key, value in made.items() if key != "status"}
    output = {"type": "local_shell_call_output", "call_id": "call_1", "output": "total 0"}

    second = run(
        answer("Done."),
        input=[{"role": "user", "content": "go"}, sent_back, output],
        tools=[tool],
        store=False,
    )

    assert [i["type"] for i in second.model.requests[0].items] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert second.events[-1]["response"]["status"] == "completed"


ENDING_CALLS = {
    "function call": {"type": "function_call", "call_id": "c1", "name": "get_weather"}
    | {"arguments": "{}"},
    "custom tool call": {"type": "custom_tool_call", "call_id": "c1", "name": "math", "input": "1"},
    "local shell call": {"type": "local_shell_call", "id": "ls_1", "call_id": "c1"}
    | {"status": "completed", "action": {"type": "exec", "command": ["ls"], "env": {}}},
    "shell call": {"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"]}},
    "apply patch call": {"type": "apply_patch_call", "call_id": "c1", "status": "completed"}
    | {"operation": {"type": "delete_file", "path": "a"}},
    "computer call": {"type": "computer_call", "id": "cu_1", "call_id": "c1", "status": "completed"}
    | {"action": {"type": "screenshot"}, "pending_safety_checks": []},
    # the server's kinds, sent back before they ended
    "mcp call": {"type": "mcp_call", "id": "c1", "server_label": "s", "name": "echo"}
    | {"arguments": "{}", "status": "in_progress"},
    "web search call": {"type": "web_search_call", "id": "c1", "status": "in_progress"}
    | {"action": {"type": "search", "query": "q"}},
}


@pytest.mark.parametrize("label", list(ENDING_CALLS))
def test_an_input_ending_with_a_call_without_its_output_is_400(
    store: ResponseStore, make_settings: Callable[..., Settings], label: str
) -> None:
    """As OpenAI's: the model cannot go on from a call it has no result of. Before, the
    response failed (the model server refused the prompt: "An assistant message with
    'tool_calls' must be followed by tool messages"), and ``input_tokens`` was a 502."""
    thinking = {"type": "reasoning", "id": "rs_1", "summary": []}
    body = {"input": [{"role": "user", "content": "go"}, thinking, ENDING_CALLS[label]]}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), body | {"model": "m"})

    assert caught.value.message == f"No tool output found for {label} 'c1'."
    assert (caught.value.param, caught.value.code) == ("input", "missing_tool_output")


def test_a_result_answers_only_the_call_before_it_of_its_id(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """A code interpreter call (shown with its result) and then a shell call of the same id:
    the shell call is still unanswered. Before, the check took the first call's result for
    both, and the model server refused the prompt (found by a longer schemathesis run)."""
    ran = {"type": "code_interpreter_call", "id": "c1", "status": "completed", "code": "1"}
    ran |= {"container_id": "cntr_1", "outputs": []}
    body = {"model": "m", "input": [ran, ENDING_CALLS["shell call"]]}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), body)

    assert caught.value.message == "No tool output found for shell call 'c1'."


def test_a_call_without_its_output_may_come_before_a_message_or_a_state_only_create(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """A client went on without sending the output (the model is told none came), or
    WebSocket mode's ``"generate": false`` keeps the state only: no model call from it."""
    settings, dispatcher = make_settings(), RecordingDispatcher()
    call = ENDING_CALLS["function call"]
    went_on = [{"role": "user", "content": "go"}, call, {"role": "user", "content": "and?"}]

    create_response(store, dispatcher, settings, {"model": "m", "input": went_on})
    create_response(store, dispatcher, settings, {"model": "m", "input": [call]}, generate=False)


@pytest.mark.parametrize(
    "ending",
    [
        # its view says how it ended, whatever its status
        {"type": "code_interpreter_call", "id": "ci_1", "status": "in_progress", "code": "1"}
        | {"container_id": "cntr_1", "outputs": None},
        # without its code (optional in the SDK's param): its view raised KeyError: 'code' (a
        # 500 at create, found by a longer schemathesis run; before, the turn failed)
        {"type": "code_interpreter_call", "id": "ci_1", "status": "completed"}
        | {"container_id": "cntr_1"},
        # an MCP call sent back without status (optional in the SDK's param): the worker's
        # view of it raised KeyError: 'status' (the turn failed, input_tokens was a 500)
        {"type": "mcp_call", "id": "mcp_1", "server_label": "s", "name": "echo"}
        | {"arguments": "{}", "output": "papaya"},
        {"type": "local_shell_call_output", "id": "c1", "output": "total 0"},  # by id
    ],
)
def test_an_input_ending_with_a_call_the_model_sees_the_end_of_goes_on(
    run: Run, ending: dict[str, Any]
) -> None:
    before = [ENDING_CALLS["local shell call"]] if ending["type"].endswith("_output") else []

    turn = run(answer("ok"), input=[{"role": "user", "content": "go"}, *before, ending])

    assert turn.events[-1]["response"]["status"] == "completed"
    seen = turn.model.requests[0].items
    assert [item["type"] for item in seen[1:]] == ["function_call", "function_call_output"]


def test_client_calls_replayed_as_history_reach_the_model(run: Run) -> None:
    # Codex's way: no previous_response_id, the whole history sent again every turn.
    first = run(call("math", {"input": "6*7"}), tools=[GRAMMAR_TOOL])
    history = [
        *first.output,
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": "42"},
    ]

    ask = {"role": "user", "content": "what is 6*7?"}

    second = run(answer("42."), input=[ask, *history], tools=[GRAMMAR_TOOL])

    assert [i["type"] for i in second.model.requests[0].items] == [
        "message",
        "function_call",
        "function_call_output",
    ]


def test_a_custom_tool_output_of_parts_keeps_its_image_for_the_model(run: Run) -> None:
    first = run(call("math", {"input": "plot x"}), tools=[GRAMMAR_TOOL])
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    parts = [{"type": "input_text", "text": "The plot:"}, image]
    output = {"type": "custom_tool_call_output", "call_id": "call_1", "output": parts}

    second = run(answer("A line."), input=[output], previous_response_id=first.response_id)

    items = second.model.requests[0].items
    assert items[-1] == {"type": "function_call_output", "call_id": "call_1", "output": parts}
    assert to_chat_messages(None, items)[-2:] == [
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "The plot:\n[image returned: see the next user message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "From the result of math (call_1):"},
                {"type": "image_url", "image_url": {"url": image["image_url"], "detail": "auto"}},
            ],
        },
    ]


def test_an_extension_tool_type_is_the_plugin_that_declares_it(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(internal_tool_modules="tests.support.tools")
    dispatcher = RecordingDispatcher()
    body = {"model": "m", "input": "go", "tools": [{"type": "acme:shout", "volume": 11}]}
    response, _ = create_response(store, dispatcher, settings, body)
    model = call("shout", {"text": "hi"})

    deps = RunDeps(store=store, provider=model, settings=settings, dispatcher=dispatcher)
    advance_response(deps, response.id, 0)

    [echoed] = response.tools
    assert (echoed["type"], echoed["name"], echoed["volume"]) == ("acme:shout", "shout", 11)
    assert [tool["name"] for tool in model.requests[0].tools] == ["shout"]
    [chord] = dispatcher.chords  # run by the plugin on the internal tool workers
    assert chord.calls == [("call_1", "tools.internal")]


def test_an_extension_tool_type_no_plugin_declares_is_400(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(internal_tool_modules="tests.support.tools")
    body = {"model": "m", "input": "go", "tools": [WEATHER, {"type": "acme:whisper"}]}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), settings, body)

    assert (caught.value.param, caught.value.code) == ("tools.1.type", "invalid_value")
    assert "acme:whisper" in caught.value.message


def test_allowed_tools_names_fixed_client_tools_by_type(run: Run) -> None:
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "shell"}]}

    turn = run(call("shell", {"commands": ["ls"]}), tools=[{"type": "shell"}], tool_choice=choice)

    [item] = turn.output
    assert item["type"] == "shell_call"


@pytest.mark.parametrize(
    ("tool", "choice", "forced"),
    [
        ({"type": "shell"}, {"type": "shell"}, "shell"),
        ({"type": "apply_patch"}, {"type": "apply_patch"}, "apply_patch"),
        (FIXED["computer"][0], {"type": "computer_use_preview"}, "computer"),
        (GRAMMAR_TOOL, {"type": "custom", "name": "math"}, "math"),
    ],
)
def test_tool_choice_by_type_forces_the_kinds_function(
    run: Run, tool: dict[str, Any], choice: dict[str, Any], forced: str
) -> None:
    turn = run(answer("ok"), tools=[WEATHER, tool], tool_choice=choice)

    assert turn.model.requests[0].tool_choice == {"type": "function", "name": forced}
    assert turn.events[-1]["response"]["tool_choice"] == choice  # echoed as sent


# -- tool_search the client runs (Codex CLI's deferred MCP tools) ----------------------------------

CLIENT_SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Search the deferred tools.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
        "required": ["query"],
    },
}
LOADED = [
    {
        "type": "namespace",
        "name": "mcp__crm__",
        "description": "The CRM server's tools.",
        "tools": [
            {
                "type": "function",
                "name": "lookup",
                "description": "Find a customer.",
                "parameters": {"type": "object", "properties": {"who": {"type": "string"}}},
                "strict": False,
                "defer_loading": True,
            }
        ],
    },
    {"type": "function", "name": "clock", "parameters": {"type": "object", "properties": {}}},
]
SEARCH_OUTPUT = {
    "type": "tool_search_output",
    "call_id": "call_1",
    "execution": "client",
    "status": "completed",
    "tools": LOADED,
}


def test_client_tool_search_is_offered_with_its_schema_and_its_call_pauses(run: Run) -> None:
    turn = run(call("tool_search", {"query": "crm", "limit": 3}), tools=[WEATHER, CLIENT_SEARCH])

    offered = {tool["name"]: tool for tool in turn.model.requests[0].tools}
    assert offered["tool_search"]["parameters"] == CLIENT_SEARCH["parameters"]
    assert offered["tool_search"]["description"] == "Search the deferred tools."
    [item] = turn.output
    assert item == {
        "id": item["id"],
        "type": "tool_search_call",
        "status": "completed",
        "call_id": "call_1",
        "execution": "client",
        "arguments": {"query": "crm", "limit": 3},
    }
    assert item["id"].startswith("tsc_")
    sdk_valid(turn)
    added = [e["item"] for e in turn.events if e["type"] == "response.output_item.added"]
    assert added == [item]
    assert turn.events[-1]["response"]["status"] == "completed"  # paused for the client
    assert turn.events[-1]["response"]["tools"][1] == CLIENT_SEARCH  # echoed as declared


def test_tool_search_output_offers_its_tools_and_the_model_reads_the_search(run: Run) -> None:
    first = run(call("tool_search", {"query": "crm"}), tools=[CLIENT_SEARCH])
    INPUT_ITEM.validate_python(SEARCH_OUTPUT)

    second = run(
        call("mcp__crm____lookup", {"who": "Ada"}, call_id="call_2"),
        input=[SEARCH_OUTPUT],
        previous_response_id=first.response_id,
        tools=[CLIENT_SEARCH],
    )

    request = second.model.requests[0]
    assert [tool["name"] for tool in request.tools] == [
        "tool_search",
        "mcp__crm____lookup",
        "clock",
    ]
    seen = request.items[-2:]
    assert (seen[0]["type"], seen[0]["name"]) == ("function_call", "tool_search")
    assert json.loads(seen[0]["arguments"]) == {"query": "crm"}
    loaded = {"loaded_tools": ["mcp__crm____lookup", "clock"]}
    assert seen[1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": json.dumps(loaded),
    }
    assert to_chat_messages(None, seen) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "tool_search", "arguments": seen[0]["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(loaded)},
    ]
    [item] = second.output
    assert (item["type"], item["name"], item["namespace"]) == (
        "function_call",
        "lookup",
        "mcp__crm__",
    )
    assert json.loads(item["arguments"]) == {"who": "Ada"}
    sdk_valid(second)
    assert second.events[-1]["response"]["status"] == "completed"


def test_tools_a_search_loaded_are_not_offered_without_its_output(run: Run) -> None:
    turn = run(answer("Hi."), tools=[CLIENT_SEARCH])

    assert [tool["name"] for tool in turn.model.requests[0].tools] == ["tool_search"]


def test_tool_search_items_replayed_as_history_reach_the_model(run: Run) -> None:
    # Codex's way: no previous_response_id, its whole history (and its tools) sent again.
    first = run(call("tool_search", {"query": "crm"}), tools=[CLIENT_SEARCH])
    [search] = first.output
    INPUT_ITEM.validate_python(search)
    history = [{"role": "user", "content": "go"}, search, SEARCH_OUTPUT]

    second = run(answer("Found it."), input=history, tools=[CLIENT_SEARCH])

    seen = second.model.requests[0].items[-2:]
    assert (seen[0]["name"], seen[1]["call_id"]) == ("tool_search", "call_1")
    assert "clock" in [tool["name"] for tool in second.model.requests[0].tools]


@pytest.mark.parametrize(
    "search", [{"type": "tool_search"}, {"type": "tool_search", "execution": "server"}]
)
def test_a_hosted_tool_search_with_nothing_deferred_is_not_offered(
    run: Run, search: dict[str, Any]
) -> None:
    turn = run(answer("Hi."), tools=[WEATHER, search])

    assert [tool["name"] for tool in turn.model.requests[0].tools] == ["weather"]
    assert [tool["type"] for tool in turn.events[-1]["response"]["tools"]] == [
        "function",
        "tool_search",
    ]


# -- a deferred function (defer_loading) behind OpenAI's own tool search --------------------------

TIDE = {
    "type": "function",
    "name": "tide",
    "description": "The next high tide.",
    "parameters": {"type": "object", "properties": {"port": {"type": "string"}}},
    "defer_loading": True,
}


def test_a_deferred_function_without_a_hosted_search_is_offered_from_the_start(run: Run) -> None:
    turn = run(call("tide", {"port": "Bergen"}), tools=[TIDE])

    assert [tool["name"] for tool in turn.model.requests[0].tools] == ["tide"]
    [item] = turn.output
    assert (item["type"], item["name"], item["namespace"]) == ("function_call", "tide", "tide")
    sdk_valid(turn)
    done = next(e for e in turn.events if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "tide"
    assert turn.events[-1]["response"]["tools"] == [{**TIDE, "strict": None}]


def test_a_deferred_functions_call_in_the_history_is_shown_by_its_name(run: Run) -> None:
    # the whole history again, as the Agents SDK sends it with store=False
    called = {
        "type": "function_call",
        "call_id": "call_7",
        "name": "tide",
        "namespace": "tide",
        "arguments": '{"port": "Bergen"}',
    }
    INPUT_ITEM.validate_python(called)
    answered = {"type": "function_call_output", "call_id": "call_7", "output": "six"}
    history = [{"role": "user", "content": "go"}, called, answered]

    second = run(answer("At six."), input=history, tools=[TIDE], store=False)

    shown, result = second.model.requests[0].items[-2:]
    assert (shown["type"], shown["name"], result["output"]) == ("function_call", "tide", "six")


def test_a_deferred_function_a_client_search_loaded_is_called_with_its_name_as_namespace(
    run: Run,
) -> None:
    first = run(call("tool_search", {"query": "tide"}), tools=[CLIENT_SEARCH])
    loaded = {**SEARCH_OUTPUT, "tools": [TIDE]}

    second = run(
        call("tide", {"port": "Oslo"}, call_id="call_2"),
        input=[loaded],
        previous_response_id=first.response_id,
        tools=[CLIENT_SEARCH],
    )

    assert [tool["name"] for tool in second.model.requests[0].tools] == ["tool_search", "tide"]
    [item] = second.output
    assert (item["name"], item["namespace"]) == ("tide", "tide")
    sdk_valid(second)


def test_tool_choice_tool_search_forces_the_clients_search(run: Run) -> None:
    choice = {"type": "tool_search"}

    turn = run(answer("ok"), tools=[WEATHER, CLIENT_SEARCH], tool_choice=choice)

    assert turn.model.requests[0].tool_choice == {"type": "function", "name": "tool_search"}


@pytest.mark.parametrize("tools", [[{"type": "tool_search"}], [WEATHER]])
def test_tool_choice_tool_search_without_a_client_search_is_400(
    store: ResponseStore, make_settings: Callable[..., Settings], tools: list[Any]
) -> None:
    body = {"model": "m", "input": "go", "tools": tools, "tool_choice": {"type": "tool_search"}}

    with pytest.raises(InvalidRequestError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), body)

    assert (caught.value.param, caught.value.code) == ("tool_choice", "unsupported_tool")


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({**SEARCH_OUTPUT, "call_id": "nope"}, "input.0.call_id"),
        ({**SEARCH_OUTPUT, "tools": [{"type": "mcp", "server_label": "x"}]}, "input.0.tools.0"),
        ({**SEARCH_OUTPUT, "tools": [{"type": "function"}]}, "input.0.tools.0.name"),
        ({**SEARCH_OUTPUT, "tools": "clock"}, "input.0.tools"),
        (
            {"type": "tool_search_call", "call_id": "c", "arguments": "{}", "execution": "client"},
            "input.0.arguments",
        ),
        ({"type": "tool_search_call", "arguments": {}}, "input.0.call_id"),
    ],
)
def test_malformed_tool_search_items_are_400(run: Run, item: dict[str, Any], param: str) -> None:
    first = run(call("tool_search", {"query": "crm"}), tools=[CLIENT_SEARCH])

    with pytest.raises(InvalidRequestError) as caught:
        run(answer("?"), input=[item], previous_response_id=first.response_id)

    assert caught.value.param == param
