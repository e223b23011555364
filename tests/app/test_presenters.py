"""The presenter hook: a kind whose item carries its own result, end to end through the builder.

The ``terminal`` kind here is a new kind added as one spec (as issue 17's kinds are).
"""

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from app.output import OutputBuilder
from app.protocol import events as ev
from app.providers.chunks import Finish, ToolCallDelta
from app.sink import EventSink
from app.store import ResponseStore
from app.tools import presenters
from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.kinds import ToolKinds, ToolKindSpec
from app.tools.presenters import FUNCTION_CALLS
from app.tools.registry import BUILTIN_KINDS, KINDS
from tests.app.test_output import events, new_response

Item = dict[str, Any]


class InPlacePresenter:
    """A ``terminal_call`` item that holds its result (as ``mcp_call`` and others do)."""

    item_type = "terminal_call"
    id_prefix = "sh"

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        item = {"id": item_id, "type": "terminal_call", "status": "in_progress", "command": ""}
        return item, [{"type": "terminal_call.in_progress", "item_id": item_id}]

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        return []

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        command = call.parsed_arguments()["command"]
        item = {"id": item_id, "type": "terminal_call", "status": "in_progress", "command": command}
        return item, [{"type": "terminal_call.command.done", "item_id": item_id}]

    def call_of(self, item: Item) -> ToolCall:
        return ToolCall(
            id=item["id"], name="terminal", arguments=json.dumps({"command": item["command"]})
        )

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        return bool(item["status"] != "in_progress")

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        item = {**output[index], "status": "failed" if result.is_error else "completed"}
        item["output"] = result.output
        updated = [*output[:index], item, *output[index + 1 :]]
        return updated, [ev.output_item_done(index, item)]

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        call = self.call_of(item)
        viewed = [presenters.call_view(call)]
        if "output" in item:
            viewed.append(presenters.result_view(call.id, item["output"]))
        return viewed


SHELL = ToolKindSpec(
    name="terminal", tool_types=("terminal",), presenter=InPlacePresenter(), queue="tools.terminal"
)


@pytest.fixture
def terminal_kind() -> Iterator[ToolKinds]:
    yield ToolKinds((*BUILTIN_KINDS, SHELL))


def builder_of(
    kinds: ToolKinds, rid: str, sink: EventSink, tools: dict[str, ToolDefinition], **kw: Any
) -> OutputBuilder:
    return OutputBuilder(
        response_id=rid,
        turn=0,
        first_output_index=0,
        sink=sink,
        tools=tools,
        presenters=kinds.presenters,
        **kw,
    )


def test_a_kind_presents_its_calls_and_results_in_its_own_items(
    store: ResponseStore, terminal_kind: ToolKinds
) -> None:
    rid = new_response(store)
    sink = EventSink(store, rid, coalesce_seconds=0)
    tools = {
        "terminal": ToolDefinition(name="terminal", kind="terminal"),
        "lookup": ToolDefinition(name="lookup", kind=ToolKind.INTERNAL),
    }
    builder = builder_of(terminal_kind, rid, sink, tools)
    builder.feed(
        ToolCallDelta(index=0, call_id=None, name="terminal", arguments='{"command": "ls"}')
    )
    builder.feed(ToolCallDelta(index=1, call_id="call_b", name="lookup", arguments='{"q": 1}'))
    builder.feed(Finish(reason="tool_calls"))
    output = builder.close()
    sink.flush()

    terminal, lookup = output.calls
    assert terminal["type"] == "terminal_call" and terminal["id"].startswith("sh_")
    assert terminal["status"] == "in_progress" and terminal["command"] == "ls"
    assert lookup["type"] == "function_call" and lookup["status"] == "completed"
    types = [e["type"] for e in events(store, rid)]
    assert types[:3] == [
        "response.output_item.added",
        "terminal_call.in_progress",
        "terminal_call.command.done",
    ]
    # The terminal call stays open (no output_item.done) until its result arrives.
    assert types.count("response.output_item.done") == 1

    found = terminal_kind.presenters
    assert found.unanswered_calls(output.items) == output.items
    answered, emitted = found.apply_result(
        rid, output.items, ToolResult(call_id=terminal["id"], output="a.txt")
    )
    answered, _ = found.apply_result(rid, answered, ToolResult(call_id="call_b", output="42"))
    assert [i["type"] for i in answered] == [
        "terminal_call",
        "function_call",
        "function_call_output",
    ]
    assert answered[0]["status"] == "completed" and answered[0]["output"] == "a.txt"
    assert emitted == [ev.output_item_done(0, answered[0])]
    assert found.unanswered_calls(answered) == []

    viewed = found.model_view(answered)
    # One model turn: both calls, then both results in call order.
    assert [(i["type"], i["call_id"]) for i in viewed] == [
        ("function_call", terminal["id"]),
        ("function_call", "call_b"),
        ("function_call_output", terminal["id"]),
        ("function_call_output", "call_b"),
    ]


def test_apply_result_of_an_unknown_call_raises() -> None:
    with pytest.raises(KeyError):
        KINDS.presenters.apply_result("resp_x", [], ToolResult(call_id="call_nope", output=""))


def test_unknown_tools_are_presented_as_function_calls() -> None:
    assert KINDS.presenters.for_tool(None) is FUNCTION_CALLS
    assert KINDS.presenters.for_tool(ToolDefinition(name="x", kind="unknown")) is FUNCTION_CALLS
    assert KINDS.presenters.for_item({"type": "message"}) is None


def test_progress_names_a_call_by_the_loops_id_whatever_its_kind(
    store: ResponseStore, terminal_kind: ToolKinds
) -> None:
    rid = new_response(store)
    sink = EventSink(store, rid, coalesce_seconds=0)
    tools = {"terminal": ToolDefinition(name="terminal", kind="terminal")}
    builder = builder_of(terminal_kind, rid, sink, tools, progress=True)
    builder.feed(
        ToolCallDelta(index=0, call_id="call_x", name="terminal", arguments='{"command": "ls"}')
    )
    builder.feed(Finish(reason="tool_calls"))
    [terminal] = builder.close().items
    sink.flush()

    [started] = [e for e in events(store, rid) if e["type"] == "antwort:step.started"]
    # The terminal item answers to its item id (as mcp_call does), not the model's call_id: the
    # step.completed event of its result will carry the same id.
    assert started["call_id"] == terminal["id"] == terminal_kind.presenters.call_of(terminal).id


@pytest.mark.parametrize("gated", [False, True])
def test_mcp_call_arguments_stream_as_the_model_writes_them_unless_gated(
    store: ResponseStore, gated: bool
) -> None:
    from app.tools.base import McpToolRef

    rid = new_response(store)
    sink = EventSink(store, rid, coalesce_seconds=0)
    ref = McpToolRef(server_label="srv", tool_name="add", needs_approval=gated)
    tools = {"add": ToolDefinition(name="add", kind=ToolKind.MCP, mcp=ref)}
    builder = OutputBuilder(response_id=rid, turn=0, first_output_index=0, sink=sink, tools=tools)
    builder.feed(ToolCallDelta(index=0, call_id="call_m", name="add", arguments='{"a": 1,'))
    builder.feed(ToolCallDelta(index=0, arguments=' "b": 2}'))
    builder.feed(Finish(reason="tool_calls"))
    [item] = builder.close().items
    sink.flush()

    emitted = events(store, rid)
    deltas = [e["delta"] for e in emitted if e["type"] == "response.mcp_call_arguments.delta"]
    done = [e for e in emitted if e["type"] == "response.mcp_call_arguments.done"]
    if gated:  # an approval request carries its arguments whole, with no call events
        assert item["type"] == "mcp_approval_request" and (deltas, done) == ([], [])
    else:
        assert item["type"] == "mcp_call"
        assert deltas == ['{"a": 1,', ' "b": 2}']
        assert [e["arguments"] for e in done] == ['{"a": 1, "b": 2}']
