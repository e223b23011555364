"""Client-executed tool kinds end to end: the official SDK against the fleet (issue 17, sec. 2).

The simulator is scripted with ``[call NAME {…}]``; the SDK parses every item and event into
its own types (warnings are errors in this suite), and the client's ``*_output`` item continues
the chain to the model's answer.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import openai
import pytest
from openai.types.responses import (
    ResponseApplyPatchToolCall,
    ResponseComputerToolCall,
    ResponseCustomToolCall,
    ResponseCustomToolCallInputDeltaEvent,
    ResponseCustomToolCallInputDoneEvent,
    ResponseFunctionShellToolCall,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseToolSearchCall,
    ResponseToolSearchOutputItem,
)
from openai.types.responses.response_output_item import LocalShellCall

from tests.support.mcp_servers import PIXEL_PNG
from tests.support.recording import Recorder

MATH = {"type": "custom", "name": "math", "description": "Evaluate an expression."}
AGENTS = {
    "type": "namespace",
    "name": "agents",
    "description": "Sub-agents.",
    "tools": [{"type": "function", "name": "spawn", "parameters": None, "strict": None}],
}

VIEW_IMAGE = {
    "type": "function",
    "name": "view_image",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
PIXEL_URL = "data:image/png;base64," + base64.b64encode(PIXEL_PNG).decode()


def create(client: openai.OpenAI, given: Any, tools: list[dict[str, Any]], **kw: Any) -> Any:
    return client.responses.create(model="antwort-sim", input=given, tools=tools, **kw)


def test_custom_tool_streams_its_input_and_continues_with_its_output(
    client: openai.OpenAI,
) -> None:
    stream = create(client, 'Compute [call math {"input": "6*7"}]', [MATH], stream=True)
    events = list(stream)

    deltas = [e for e in events if isinstance(e, ResponseCustomToolCallInputDeltaEvent)]
    [done] = [e for e in events if isinstance(e, ResponseCustomToolCallInputDoneEvent)]
    assert "".join(d.delta for d in deltas) == done.input == "6*7"
    final = events[-1].response
    [call] = final.output
    assert isinstance(call, ResponseCustomToolCall) and call.input == "6*7"

    output = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "42"}
    answer = create(client, [output], [MATH], previous_response_id=final.id)
    assert answer.output_text == "Tool results: 42"


def test_codex_style_tools_namespace_call_and_web_search_dropped(client: openai.OpenAI) -> None:
    tools = [AGENTS, {"type": "web_search", "external_web_access": True}]
    paused = create(client, 'Delegate [call agents__spawn {"task": "tests"}]', tools, store=False)

    [call] = paused.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert (call.name, call.namespace, json.loads(call.arguments)) == (
        "spawn",
        "agents",
        {"task": "tests"},
    )
    history = [
        {"role": "user", "content": "Delegate"},
        call.to_dict(),
        {"type": "function_call_output", "call_id": call.call_id, "output": "spawned"},
    ]
    answer = create(client, history, tools, store=False)  # the whole history again
    assert answer.output_text == "Tool results: spawned"


FIXED: dict[str, tuple[dict[str, Any], str, type[Any], dict[str, Any]]] = {
    "apply_patch": (
        {"type": "apply_patch"},
        '{"type": "create_file", "path": "a.txt", "diff": "+hi"}',
        ResponseApplyPatchToolCall,
        {"type": "apply_patch_call_output", "status": "completed", "output": "patched"},
    ),
    "shell": (
        {"type": "shell"},
        '{"commands": ["echo hi"]}',
        ResponseFunctionShellToolCall,
        {
            "type": "shell_call_output",
            "output": [{"stdout": "hi", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        },
    ),
    "local_shell": (
        {"type": "local_shell"},
        '{"command": ["echo", "hi"]}',
        LocalShellCall,
        {"type": "local_shell_call_output", "output": "hi"},
    ),
    "computer": (
        {"type": "computer_use_preview", "display_width": 800, "display_height": 600}
        | {"environment": "browser"},
        '{"action": {"type": "screenshot"}}',
        ResponseComputerToolCall,
        {
            "type": "computer_call_output",
            "output": {"type": "computer_screenshot", "image_url": "https://example.com/s.png"},
        },
    ),
}


@pytest.mark.parametrize("kind", sorted(FIXED))
def test_fixed_client_tool_pauses_and_continues(client: openai.OpenAI, kind: str) -> None:
    tool, arguments, item_type, output = FIXED[kind]

    paused = create(client, f"Go [call {kind} {arguments}]", [tool])

    [call] = paused.output
    assert isinstance(call, item_type) and paused.status == "completed"
    key = "id" if kind == "local_shell" else "call_id"
    answer = create(client, [{**output, key: call.call_id}], [tool], previous_response_id=paused.id)
    assert answer.status == "completed" and answer.output_text.startswith("Tool results: ")


def test_an_extension_tool_type_runs_on_the_fleet(client: openai.OpenAI) -> None:
    answer = create(client, 'Shout [call shout {"text": "hi"}]', [{"type": "acme:shout"}])

    assert [item.type for item in answer.output] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    assert answer.output_text == "Tool results: HI"


def test_an_image_in_a_function_result_reaches_the_model_after_the_results(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    # Codex's view_image answers with an input_image part ("original" detail); a chat tool
    # message holds text only, so the image follows the turn's results in a user message.
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    paused = create(client, f'{marker} [call view_image {{"path": "cat.png"}}]', [VIEW_IMAGE])
    [call] = paused.output
    assert isinstance(call, ResponseFunctionToolCall)
    output = [
        {"type": "input_text", "text": "cat.png:"},
        {"type": "input_image", "image_url": PIXEL_URL, "detail": "original"},
    ]
    answer: Any = {"type": "function_call_output", "call_id": call.call_id, "output": output}

    final = create(client, [answer], [VIEW_IMAGE], previous_response_id=paused.id)

    assert final.output_text == "Tool results: cat.png: [image returned: see the next user message]"
    assert sent[1]["messages"][-2:] == [
        {
            "role": "tool",
            "tool_call_id": call.call_id,
            "content": "cat.png:\n[image returned: see the next user message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"From the result of view_image ({call.call_id}):"},
                {"type": "image_url", "image_url": {"url": PIXEL_URL, "detail": "high"}},
            ],
        },
    ]


def called_as(response: Any) -> tuple[str, str | None, Any]:
    """The one function call of ``response``: its name, namespace and arguments."""
    [call] = response.output
    assert isinstance(call, ResponseFunctionToolCall)
    return call.name, call.namespace, json.loads(call.arguments)


SEARCH = {
    "type": "tool_search",
    "execution": "client",
    "description": "Search the deferred tools.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
}
CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "The CRM's tools.",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"who": {"type": "string"}}},
            "defer_loading": True,
        }
    ],
}


@pytest.mark.parametrize("store", [True, False], ids=["chained", "history"])
def test_hosted_tool_search_loads_the_deferred_tools_then_they_are_called(
    client: openai.OpenAI, sim_recorder: Recorder, store: bool
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    tools = [CRM, {"type": "tool_search"}]
    stream = create(
        client, f'{marker} Find [call tool_search {{"paths": ["crm"]}}]', tools, stream=True
    )
    events = list(stream)

    final = events[-1].response
    search, found, said = final.output
    assert isinstance(search, ResponseToolSearchCall)
    assert isinstance(found, ResponseToolSearchOutputItem)
    assert (search.execution, search.call_id, search.arguments) == (
        "server",
        None,
        {"paths": ["crm"]},
    )
    assert (found.execution, found.call_id) == ("server", None)
    assert [tool.to_dict() for tool in found.tools] == [CRM]
    assert said.content[0].text == 'Tool results: {"loaded_tools": ["crm__lookup"]}'
    added = [e.item.type for e in events if isinstance(e, ResponseOutputItemAddedEvent)]
    assert added == ["tool_search_call", "tool_search_output", "message"]
    before, after = sent  # the model had the search alone, then what it loaded
    assert [tool["function"]["name"] for tool in before["tools"]] == ["tool_search"]
    assert "crm: The CRM's tools." in before["tools"][0]["function"]["description"]
    assert [tool["function"]["name"] for tool in after["tools"]] == ["crm__lookup", "tool_search"]

    ask = {"role": "user", "content": 'Now [call crm__lookup {"who": "Ada"}]'}
    if store:
        called = create(client, [ask], tools, previous_response_id=final.id)
    else:  # the Agents SDK's way: the whole history again, nothing kept
        earlier = [item.to_dict() for item in final.output]
        called = create(
            client, [{"role": "user", "content": "Find"}, *earlier, ask], tools, store=False
        )

    assert called_as(called) == ("lookup", "crm", {"who": "Ada"})


@pytest.mark.parametrize("store", [True, False], ids=["chained", "history"])
def test_client_tool_search_pauses_then_its_tools_are_called(
    client: openai.OpenAI, store: bool
) -> None:
    stream = create(client, 'Find [call tool_search {"query": "crm"}]', [SEARCH], stream=True)
    events = list(stream)

    final = events[-1].response
    [search] = final.output
    assert isinstance(search, ResponseToolSearchCall)
    assert (search.arguments, search.execution) == ({"query": "crm"}, "client")
    [added] = [e for e in events if isinstance(e, ResponseOutputItemAddedEvent)]
    assert added.item.id == search.id
    assert final.status == "completed"  # paused for the client

    loaded = {"type": "tool_search_output", "call_id": search.call_id, "tools": [CRM]}
    ask = {"role": "user", "content": 'Now [call crm__lookup {"who": "Ada"}]'}
    if store:
        called = create(client, [loaded, ask], [SEARCH], previous_response_id=final.id)
    else:  # Codex's way: the whole history again, nothing kept
        history = [{"role": "user", "content": "Find"}, search.to_dict(), loaded, ask]
        called = create(client, history, [SEARCH], store=False)

    assert called_as(called) == ("lookup", "crm", {"who": "Ada"})
