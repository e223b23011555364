"""The ``custom`` kind: client tools whose input is one free-form string (optionally a grammar).

A Chat Completions model knows only JSON-argument functions, so a custom tool is offered as a
function with one string property, ``input`` (the grammar, if any, told in its description), and
its call becomes a ``custom_tool_call`` item whose ``input`` is that string. The arguments stream
as JSON, not as the input, so the input's events (``response.custom_tool_call_input.delta`` and
``.done``) are sent once the call is complete. The client answers with a
``custom_tool_call_output`` item; the model reads it as the call's result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.protocol import events as ev
from app.tools.base import ToolCall, ToolDefinition, ToolKind
from app.tools.function import answers_check
from app.tools.kinds import ToolKindSpec
from app.tools.presenters import (
    ResultItemCalls,
    call_view,
    model_name,
    result_view,
    wire_name,
    with_namespace,
)

Item = dict[str, Any]

CUSTOM = ToolKind.CUSTOM
"""The kind's name."""


def custom_definition(
    tool: Item, *, name: str | None = None, options: dict[str, Any] | None = None
) -> ToolDefinition:
    """A declared custom tool as the model is offered it (``name``: the model's name for it)."""
    return ToolDefinition(
        name=name or tool["name"],
        kind=CUSTOM,
        description=_description(tool),
        parameters={
            "type": "object",
            "properties": {"input": {"type": "string", "description": _input_hint(tool)}},
            "required": ["input"],
        },
        options=options or {},
    )


def _description(tool: Item) -> str | None:
    return tool.get("description") or None


def _input_hint(tool: Item) -> str:
    fmt = tool.get("format") or {"type": "text"}
    if fmt.get("type") == "grammar":
        return f"The input, following this {fmt['syntax']} grammar:\n{fmt['definition']}"
    return "The input, as free-form text."


def custom_input(arguments: str) -> str:
    """The input a model's arguments carry (``{"input": …}``; anything else is the input)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    text = parsed.get("input") if isinstance(parsed, dict) else None
    return text if isinstance(text, str) else arguments


def input_delta(item_id: str, output_index: int, delta: str) -> ev.Event:
    """``response.custom_tool_call_input.delta``."""
    return {
        "type": "response.custom_tool_call_input.delta",
        "item_id": item_id,
        "output_index": output_index,
        "delta": delta,
    }


def input_done(item_id: str, output_index: int, text: str) -> ev.Event:
    """``response.custom_tool_call_input.done``."""
    return {
        "type": "response.custom_tool_call_input.done",
        "item_id": item_id,
        "output_index": output_index,
        "input": text,
    }


class CustomCallPresenter(ResultItemCalls):
    """``custom_tool_call`` items, answered by ``custom_tool_call_output`` items."""

    item_type = "custom_tool_call"
    id_prefix = "ctc"
    result_type = "custom_tool_call_output"

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        return self._item(item_id, call, tool, ""), []

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        return []  # JSON pieces, not the input: the input's events follow in ``finished``

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        text = custom_input(call.arguments)
        item = self._item(item_id, call, tool, text)
        return item, [
            input_delta(item_id, output_index, text),
            input_done(item_id, output_index, text),
            ev.output_item_done(output_index, item),
        ]

    @staticmethod
    def _item(item_id: str, call: ToolCall, tool: ToolDefinition | None, text: str) -> Item:
        name, namespace = wire_name(call.name, tool)
        item = {"id": item_id, "type": "custom_tool_call", "call_id": call.id, "name": name}
        item["input"] = text
        return with_namespace(item, namespace)

    def call_of(self, item: Item) -> ToolCall:
        arguments = json.dumps({"input": item.get("input", "")})
        return ToolCall(id=item["call_id"], name=model_name(item), arguments=arguments)

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        return [call_view(self.call_of(item))]


def output_view(item: Item, items: Sequence[Item]) -> list[Item]:
    """A ``custom_tool_call_output`` as the model reads it: the call's result.

    A list of parts stays one, images and files too, as a ``function_call_output``'s does.
    """
    return [result_view(item["call_id"], item["output"])]


CUSTOM_CALLS = CustomCallPresenter()

CUSTOM_KIND = ToolKindSpec(
    name=CUSTOM,
    tool_types=("custom",),
    presenter=CUSTOM_CALLS,
    define=custom_definition,
    model_tool=lambda tool: {**custom_definition(tool).chat_tool(), "strict": None},
    views={"custom_tool_call_output": output_view},
    check_inputs=answers_check("custom_tool_call", "custom_tool_call_output"),
)
"""Client-executed: the response pauses on a ``custom_tool_call``."""
