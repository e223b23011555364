"""Client kinds with one fixed tool each: ``apply_patch``, ``shell``, ``local_shell``, ``computer``.

Each is one tool the model is offered as a function of the same name (its JSON schema the
arguments of the kind's call item), and one call item type carrying those arguments in the SDK's
shape (``operation``, ``action``). The client runs the call and answers with the kind's
``*_output`` item, which the model reads as the call's result. The item is announced
(``output_item.added``) once the model has finished it: its fields are not valid before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.protocol import events as ev
from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.function import answers_check, call_id_key
from app.tools.kinds import ToolKindSpec
from app.tools.presenters import append_result, call_view, result_item_id, result_view

Item = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class CallShape:
    """How one fixed client tool looks to the model and on the wire."""

    kind: str
    """The kind's name, also the tool's name for the model."""
    tool_types: tuple[str, ...]
    description: str
    parameters: dict[str, Any]
    item_type: str
    output_type: str
    id_prefix: str
    fields: Callable[[dict[str, Any]], Item]
    """The model's arguments as the call item's own fields."""
    arguments: Callable[[Item], Any]
    """A call item's fields back as the model's arguments."""
    output_text: Callable[[Item], str]
    """What the model reads of the client's output item."""
    output_key: Callable[[Item], str] = call_id_key
    """The output item's field that names the call."""
    static: Item = field(default_factory=dict)
    """Fields every call item carries."""

    def definition(self, tool: Item | None = None) -> ToolDefinition:
        """The tool as the model is offered it."""
        return ToolDefinition(
            name=self.kind, kind=self.kind, description=self.description, parameters=self.parameters
        )


class FixedCallPresenter:
    """The call items of one :class:`CallShape`."""

    def __init__(self, shape: CallShape):
        self.shape = shape
        self.item_type = shape.item_type
        self.id_prefix = shape.id_prefix

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item | None, list[ev.Event]]:
        return None, []  # announced when finished, once its fields are known

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        return []

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        item = self.call_item(item_id, call, tool)
        at = output_index
        return item, [ev.output_item_added(at, item), ev.output_item_done(at, item)]

    def call_item(self, item_id: str, call: ToolCall, tool: ToolDefinition | None) -> Item:
        """The call item of a call the model has finished."""
        return {
            "id": item_id,
            "type": self.item_type,
            "status": "completed",
            "call_id": call.id,
            **self.shape.static,
            **self.shape.fields(arguments_object(call.arguments)),
        }

    def call_of(self, item: Item) -> ToolCall:
        arguments = json.dumps(self.shape.arguments(item))
        return ToolCall(id=item["call_id"], name=self.shape.kind, arguments=arguments)

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        return bool(item["call_id"] in answered)

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        return append_result(response_id, output, result, self.shape.output_type)

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        return [call_view(self.call_of(item))]


def arguments_object(arguments: str) -> dict[str, Any]:
    """A call's arguments as an object (``{}`` for anything else: the model's JSON, as written)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class ShellCallPresenter(FixedCallPresenter):
    """``shell_call`` items: the client's, or the hosted shell's (app/tools/sandbox).

    A hosted call names its container (``environment``) and streams OpenAI's events of its
    commands; the sandbox's result is a ``shell_call_output`` item after it, one entry per
    command (``stdout``, ``stderr``, ``outcome``), with the events of each command's output::

        output_item.added (shell_call) → shell_call_command.added/delta/done per command
        → output_item.done … (the sandbox runs the commands) …
        output_item.added (shell_call_output, in progress)
        → shell_call_output_content.delta/done per command → output_item.done
    """

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        item = self.call_item(item_id, call, tool)
        at = output_index
        hosted = "environment" in item  # the client's: announced as the other fixed tools
        commands = [
            event
            for index, command in enumerate(item["action"]["commands"] if hosted else ())
            for event in (
                ev.shell_call_command_event("added", at, index, ""),
                ev.shell_call_command_delta(at, index, command),
                ev.shell_call_command_event("done", at, index, command),
            )
        ]
        return item, [ev.output_item_added(at, item), *commands, ev.output_item_done(at, item)]

    def call_item(self, item_id: str, call: ToolCall, tool: ToolDefinition | None) -> Item:
        item = super().call_item(item_id, call, tool)
        container_id = tool.options.get("container_id") if tool is not None else None
        if container_id:
            item["environment"] = {"type": "container_reference", "container_id": container_id}
        return item

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        data = result.data or {}
        entries = data.get("output")
        if not isinstance(entries, list):  # no run to report (the call timed out, its worker…)
            entries = [
                {"stdout": "", "stderr": result.output, "outcome": {"type": "exit", "exit_code": 1}}
            ]
        item = {
            "id": result_item_id(response_id, result.call_id, prefix="sho"),
            "type": self.shape.output_type,
            "call_id": result.call_id,
            "output": entries,
            "max_output_length": data.get("max_output_length"),
            "status": "completed",
        }
        at, item_id = len(output), str(item["id"])
        started = {**item, "output": [], "status": "in_progress"}
        contents = [
            event
            for command, entry in enumerate(entries)
            for event in (
                ev.shell_call_output_delta(item_id, at, command, entry),
                ev.shell_call_output_done(item_id, at, command, entry),
            )
        ]
        events = [ev.output_item_added(at, started), *contents, ev.output_item_done(at, item)]
        return [*output, item], events


def kind_of(shape: CallShape, presenter: FixedCallPresenter | None = None) -> ToolKindSpec:
    """The kind spec of a fixed client tool."""
    key = shape.output_key

    def view(item: Item, items: Sequence[Item]) -> list[Item]:
        return [result_view(item[key(item)], shape.output_text(item))]

    return ToolKindSpec(
        name=shape.kind,
        tool_types=shape.tool_types,
        presenter=presenter or FixedCallPresenter(shape),
        define=shape.definition,
        model_tool=lambda tool: {**shape.definition().chat_tool(), "strict": None},
        views={shape.output_type: view},
        choice_name=lambda ref: shape.kind,  # ``{"type": "shell"}`` names the one shell tool
        check_inputs=answers_check(shape.item_type, shape.output_type, output_key=key),
    )


def _without_none(values: Item) -> Item:
    return {k: v for k, v in values.items() if v is not None}


# -- apply_patch -----------------------------------------------------------------------------------


def _operation(args: dict[str, Any]) -> Item:
    kind = args.get("type") if args.get("type") in _OPERATIONS else "update_file"
    operation = {"type": kind, "path": str(args.get("path", ""))}
    if kind != "delete_file":
        operation["diff"] = str(args.get("diff", ""))
    return {"operation": operation}


_OPERATIONS = ("create_file", "update_file", "delete_file")

APPLY_PATCH = CallShape(
    kind=ToolKind.APPLY_PATCH,
    tool_types=("apply_patch",),
    description=(
        "Create, update or delete one file. `diff` is a V4A diff: for create_file the whole "
        "content, each line prefixed with '+'; for update_file the changed hunks."
    ),
    parameters={
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(_OPERATIONS)},
            "path": {"type": "string"},
            "diff": {"type": "string"},
        },
        "required": ["type", "path"],
    },
    item_type="apply_patch_call",
    output_type="apply_patch_call_output",
    id_prefix="apc",
    fields=_operation,
    arguments=lambda item: item["operation"],
    output_text=lambda item: item.get("output") or item["status"],
)

# -- shell -----------------------------------------------------------------------------------------


def _shell_action(args: dict[str, Any]) -> Item:
    commands = args.get("commands")
    return {
        "action": {
            "commands": [str(c) for c in commands] if isinstance(commands, list) else [],
            "timeout_ms": args.get("timeout_ms"),
            "max_output_length": args.get("max_output_length"),
        }
    }


def shell_output_text(item: Item) -> str:
    """What the model reads of a ``shell_call_output`` item."""
    parts = []
    for entry in item["output"]:
        outcome = entry.get("outcome") or {}
        ended = f"exit {outcome.get('exit_code')}"
        if outcome.get("type") == "timeout":
            ended = "timed out"
        parts.append(f"{entry.get('stdout', '')}{entry.get('stderr', '')}[{ended}]")
    return "\n".join(parts)


SHELL = CallShape(
    kind=ToolKind.SHELL,
    tool_types=("shell",),
    description="Run shell commands, one after another, and read what they print.",
    parameters={
        "type": "object",
        "properties": {
            "commands": {"type": "array", "items": {"type": "string"}},
            "timeout_ms": {"type": "integer"},
            "max_output_length": {"type": "integer"},
        },
        "required": ["commands"],
    },
    item_type="shell_call",
    output_type="shell_call_output",
    id_prefix="sh",
    fields=_shell_action,
    arguments=lambda item: _without_none(item["action"]),
    output_text=shell_output_text,
)

# -- local_shell -----------------------------------------------------------------------------------


def _exec_action(args: dict[str, Any]) -> Item:
    command = args.get("command")
    env = args.get("env")
    action = {
        "type": "exec",
        "command": [str(c) for c in command] if isinstance(command, list) else [],
        "env": env if isinstance(env, dict) else {},
        "working_directory": args.get("working_directory"),
        "timeout_ms": args.get("timeout_ms"),
    }
    return {"action": _without_none(action)}


LOCAL_SHELL = CallShape(
    kind=ToolKind.LOCAL_SHELL,
    tool_types=("local_shell",),
    description="Run one command (an argv list) on the user's machine.",
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}},
            "working_directory": {"type": "string"},
            "timeout_ms": {"type": "integer"},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["command"],
    },
    item_type="local_shell_call",
    output_type="local_shell_call_output",
    id_prefix="lsh",
    fields=_exec_action,
    arguments=lambda item: {k: v for k, v in item["action"].items() if k != "type"},
    output_text=lambda item: item["output"],
    output_key=lambda item: "call_id" if item.get("call_id") is not None else "id",
)
"""A ``local_shell_call_output`` names its call by ``call_id`` (the Agents SDK's, the AI SDK's) or
by ``id`` alone (the SDK's typed param)."""

# -- computer --------------------------------------------------------------------------------------

_ACTIONS = ("click", "double_click", "drag", "keypress", "move", "screenshot", "scroll", "type")

COMPUTER = CallShape(
    kind=ToolKind.COMPUTER,
    tool_types=("computer", "computer_use_preview"),
    description="Act on the user's screen (click, type, scroll …); the answer is a screenshot.",
    parameters={
        "type": "object",
        "properties": {
            "action": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": [*_ACTIONS, "wait"]},
                    "x": {"type": "integer"},
                    "y": {"type": "integer"},
                    "button": {"type": "string", "enum": ["left", "right", "wheel", "back"]},
                    "text": {"type": "string"},
                    "keys": {"type": "array", "items": {"type": "string"}},
                    "scroll_x": {"type": "integer"},
                    "scroll_y": {"type": "integer"},
                },
                "required": ["type"],
            }
        },
        "required": ["action"],
    },
    item_type="computer_call",
    output_type="computer_call_output",
    id_prefix="cu",
    fields=lambda args: {"action": args.get("action") or {"type": "screenshot"}},
    arguments=lambda item: {"action": item.get("action")},
    output_text=lambda item: "A screenshot of the screen after the action (not shown here).",
    static={"pending_safety_checks": []},
)

CLIENT_CALL_KINDS = (
    kind_of(APPLY_PATCH),
    kind_of(SHELL, ShellCallPresenter(SHELL)),
    kind_of(LOCAL_SHELL),
    kind_of(COMPUTER),
)
"""The specs of the fixed client tools (app/tools/registry.py lists them)."""
