"""The tool kinds' registry: every kind once, and a new kind added as one spec and nothing else."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from app.config import Settings
from app.protocol import events as ev
from app.protocol.response import ResponseStatus
from app.run import RunDeps, StepOutcome, advance_response
from app.store import ResponseStore
from app.tools.base import ToolCall, ToolDefinition, ToolKind
from app.tools.function import FUNCTION_KIND
from app.tools.kinds import ToolKinds, ToolKindSpec, named_definition
from app.tools.presenters import FunctionCallPresenter, Item
from app.tools.registry import BUILTIN_KINDS, KINDS
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text
from tests.support.responses import stored_response


class RobotCalls(FunctionCallPresenter):
    """``robot_call`` items: a kind no build ships, made of a spec alone."""

    item_type = "robot_call"
    id_prefix = "rbc"

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        item, events = super().started(item_id, output_index, call, tool)
        return {**item, "type": self.item_type}, events

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        return []

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        item, _ = super().finished(item_id, output_index, call, tool)
        item = {**item, "type": self.item_type}
        return item, [ev.output_item_done(output_index, item)]

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        return [{**item, "type": "function_call"}]


def robot_kind(*, queue: str | None = None) -> ToolKindSpec:
    """A kind called ``robot``: run by the client, or on ``queue``."""
    return ToolKindSpec(
        name="robot",
        tool_types=("robot",),
        presenter=RobotCalls(),
        queue=queue,
        define=named_definition("robot"),
    )


PATCH = {
    "type": "robot",
    "name": "apply",
    "description": "Apply a patch",
    "parameters": {"type": "object", "properties": {"patch": {"type": "string"}}},
}


def test_every_builtin_kind_is_registered_once() -> None:
    names = [spec.name for spec in KINDS.specs]
    assert sorted(names) == sorted(ToolKind) and len(set(names)) == len(names)
    tool_types = [t for spec in KINDS.specs for t in spec.tool_types]
    taking_all = [t for spec in KINDS.specs if spec.accepts is None for t in spec.tool_types]
    assert len(set(taking_all)) == len(taking_all)  # one kind takes what the others leave
    assert {"function", "internal", "mcp", "code_interpreter", "sandbox"} < set(tool_types)
    assert {"custom", "namespace", "web_search", "file_search"} < set(tool_types)
    assert KINDS.queues == ("tools.mcp", "tools.sandbox", "tools.internal")
    assert KINDS.spec(ToolKind.FUNCTION) is FUNCTION_KIND and FUNCTION_KIND.queue is None


def test_a_kind_or_a_tool_type_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        ToolKinds((*BUILTIN_KINDS, FUNCTION_KIND))
    with pytest.raises(ValueError, match="belongs to two kinds"):
        ToolKinds((*BUILTIN_KINDS, ToolKindSpec(name="other", tool_types=("function",))))
    picky = ToolKindSpec(name="other", tool_types=("function",), accepts=lambda tool: True)
    with pytest.raises(ValueError, match="belongs to two kinds"):
        ToolKinds((*BUILTIN_KINDS, picky))  # after a kind that takes them all: never reached


def test_a_type_two_kinds_share_is_the_first_accepting_kinds() -> None:
    client = {"type": "tool_search", "execution": "client"}
    assert KINDS.spec_of_tool(client) is KINDS.spec(ToolKind.TOOL_SEARCH)
    hosted = KINDS.spec(ToolKind.HOSTED_TOOL_SEARCH)
    assert KINDS.spec_of_tool({"type": "tool_search"}) is hosted
    assert KINDS.spec_of_tool({**client, "execution": "server"}) is hosted


def test_a_new_kind_is_offered_defined_and_presented_from_its_spec_alone() -> None:
    kinds = ToolKinds((*BUILTIN_KINDS, robot_kind()))
    assert kinds.model_tools([PATCH]) == [PATCH]
    assert kinds.definitions([PATCH])["apply"].kind == "robot"
    assert not kinds.is_agentic([PATCH])
    assert isinstance(kinds.presenters.for_item({"type": "robot_call"}), RobotCalls)
    # Without its spec the fleet knows no such kind: offered as declared, but never a tool.
    assert KINDS.definitions([PATCH]) == {}
    assert KINDS.presenters.for_item({"type": "robot_call"}) is None


def run_robot_turn(
    store: ResponseStore, settings: Settings, kind: ToolKindSpec
) -> tuple[str, StepOutcome, RecordingDispatcher, ScriptedModel]:
    response = stored_response(store, tools=[PATCH])
    model = ScriptedModel(calls(("call_p", "apply", '{"patch": "+x"}')), text("done"))
    dispatcher = RecordingDispatcher()
    deps = RunDeps(
        store=store,
        provider=model,
        settings=settings,
        dispatcher=dispatcher,
        kinds=ToolKinds((*BUILTIN_KINDS, kind)),
    )
    return response.id, advance_response(deps, response.id, 0), dispatcher, model


def test_a_new_client_kind_pauses_the_response_with_its_call_item(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    rid, outcome, dispatcher, model = run_robot_turn(store, make_settings(), robot_kind())

    assert outcome is StepOutcome.COMPLETED  # paused for the client (no server-side tools)
    assert [tool["name"] for tool in model.requests[0].tools] == ["apply"]
    response = store.get(rid).response
    assert response.status == ResponseStatus.COMPLETED
    [item] = response.output
    assert item["type"] == "robot_call" and item["id"].startswith("rbc_")
    assert item["call_id"] == "call_p" and dispatcher.chords == []


def test_a_new_server_side_kind_is_dispatched_to_its_queue(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    kind = robot_kind(queue="tools.robot")
    rid, outcome, dispatcher, _ = run_robot_turn(store, make_settings(), kind)

    assert outcome is StepOutcome.WAITING
    [chord] = dispatcher.chords
    assert (chord.response_id, chord.calls, chord.then_turn) == (
        rid,
        [("call_p", "tools.robot")],
        1,
    )
    assert ToolKinds((*BUILTIN_KINDS, kind)).queues[-1] == "tools.robot"


def test_before_model_hooks_of_every_kind_run_in_order(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    seen: list[tuple[str, Any]] = []

    def hook(name: str) -> Any:
        def run(dep: object, step: Any, out: Any) -> Any:
            seen.append((name, dep))
            out.emit(ev.error_event(code=name, message="hook ran"))  # any event will do
            return step.response

        return run

    first = ToolKindSpec(name="first", tool_types=("first",), before_model=hook("first"))
    second = ToolKindSpec(name="second", tool_types=("second",), before_model=hook("second"))
    response = stored_response(store)
    deps = RunDeps(
        store=store,
        provider=ScriptedModel(text("hi")),
        settings=make_settings(),
        kinds=ToolKinds((*BUILTIN_KINDS, first, second)),
        kind_deps={"second": "its client"},
    )
    assert advance_response(deps, response.id, 0) is StepOutcome.COMPLETED
    assert seen == [("first", None), ("second", "its client")]
    errors = [e.data for e in store.events_after(response.id, -1) if e.type == "error"]
    assert ['"first"' in data for data in errors] == [True, False]
