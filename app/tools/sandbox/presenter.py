"""How sandbox calls look on the wire.

``code_interpreter`` calls are ``code_interpreter_call`` items, updated in place with their
result (OpenAI's shape)::

    output_item.added (in_progress) → code_interpreter_call.in_progress
    → code_interpreter_call_code.delta… → code_interpreter_call_code.done
    → code_interpreter_call.interpreting          (the call is queued on tools.sandbox)
    → code_interpreter_call.completed → output_item.done (completed | failed, with logs)

Operator-declared sandboxed function tools are ordinary ``function_call`` items.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.protocol import events as ev
from app.tools.base import ToolCall, ToolDefinition, ToolResult
from app.tools.presenters import FUNCTION_CALLS, call_view, result_view
from app.tools.sandbox.tools import CODE_INTERPRETER

Item = dict[str, Any]

_OPEN_STATUSES = frozenset({"in_progress", "interpreting"})


class CodeStream:
    """Decodes the ``code`` string of JSON arguments as they stream in, piece by piece."""

    def __init__(self) -> None:
        self._raw = ""
        self._start: int | None = None
        self._pos = 0
        self._closed = False

    def feed(self, delta: str) -> str:
        """The code decoded from ``delta`` (and what earlier pieces left undecodable)."""
        self._raw += delta
        if self._closed:
            return ""
        if self._start is None:
            marker = self._raw.find('"code"')
            colon = self._raw.find(":", marker) if marker >= 0 else -1
            quote = self._raw.find('"', colon) if colon >= 0 else -1
            if quote < 0:
                return ""
            self._start = self._pos = quote + 1
        return self._decode()

    def _decode(self) -> str:
        raw, i = self._raw, self._pos
        while i < len(raw):
            if raw[i] == "\\":
                width = 6 if raw[i + 1 : i + 2] == "u" else 2
                if i + width > len(raw):
                    break  # an escape cut in two: wait for the rest
                i += width
            elif raw[i] == '"':
                self._closed = True
                break
            else:
                i += 1
        segment, self._pos = raw[self._pos : i], i
        try:
            return str(json.loads(f'"{segment}"', strict=False)) if segment else ""
        except ValueError:
            return ""


def code_of(call: ToolCall) -> str:
    """The code of a code interpreter call (its raw arguments when they are not JSON)."""
    try:
        code = call.parsed_arguments().get("code")
    except ValueError:
        return call.arguments
    return code if isinstance(code, str) else call.arguments


class SandboxPresenter:
    """``code_interpreter_call`` items for the code interpreter; function calls otherwise."""

    item_type = "code_interpreter_call"
    id_prefix = "ci"

    def __init__(self) -> None:
        self._streams: dict[str, CodeStream] = {}

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        if tool is None or tool.name != CODE_INTERPRETER:
            return FUNCTION_CALLS.started(item_id, output_index, call, tool)
        self._streams[item_id] = CodeStream()
        item = _item(item_id, tool, code="", status="in_progress")
        return item, [ev.code_interpreter_call_event("in_progress", item_id, output_index)]

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        stream = self._streams.get(item_id)
        if stream is None:
            return FUNCTION_CALLS.arguments_delta(item_id, output_index, delta)
        code = stream.feed(delta)
        return [ev.code_interpreter_code_delta(item_id, output_index, code)] if code else []

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        if tool is None or tool.name != CODE_INTERPRETER:
            return FUNCTION_CALLS.finished(item_id, output_index, call, tool)
        self._streams.pop(item_id, None)
        code = code_of(call)
        item = _item(item_id, tool, code=code, status="interpreting")
        return item, [
            ev.code_interpreter_code_done(item_id, output_index, code),
            ev.code_interpreter_call_event("interpreting", item_id, output_index),
        ]

    def call_of(self, item: Item) -> ToolCall:
        return ToolCall(
            id=item["id"],
            name=CODE_INTERPRETER,
            arguments=json.dumps({"code": item.get("code") or ""}),  # sent back without: none
        )

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        return item["status"] not in _OPEN_STATUSES

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        item = {
            **output[index],
            "status": "failed" if result.is_error else "completed",
            "outputs": [{"type": "logs", "logs": result.output}],
        }
        updated = [*output[:index], item, *output[index + 1 :]]
        return updated, [
            ev.code_interpreter_call_event("completed", item["id"], index),
            ev.output_item_done(index, item),
        ]

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        call = self.call_of(item)
        logs = [o["logs"] for o in item.get("outputs") or [] if o.get("type") == "logs"]
        # A call that never finished (its response was cancelled) still needs an answer.
        text = "\n".join(logs) if logs else "Error: the code did not run to the end."
        return [call_view(call), result_view(call.id, text)]


def _item(item_id: str, tool: ToolDefinition, *, code: str, status: str) -> Item:
    return {
        "id": item_id,
        "type": "code_interpreter_call",
        "status": status,
        "code": code,
        "container_id": tool.options.get("container_id") or "",
        "outputs": None,
    }
