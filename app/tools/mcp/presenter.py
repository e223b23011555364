"""How MCP calls look on the wire: ``mcp_call`` and ``mcp_approval_request`` items and their events.

An ``mcp_call`` item carries its own result: it stays ``in_progress`` while the tool runs and is
updated in place (``completed`` with ``output``, or ``failed`` with ``error``). A call of a tool
that needs approval becomes an ``mcp_approval_request`` item instead; the response pauses on it,
and the client's ``mcp_approval_response`` decides in the next request. The model sees all of it
as ``function_call``/``function_call_output`` pairs; an unreachable server's ``mcp_list_tools``
item is shown to it as a developer note.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from app.protocol import events as ev
from app.tools import presenters
from app.tools.base import ToolCall, ToolDefinition, ToolResult
from app.tools.mcp.catalog import (
    APPROVAL_REQUEST_ITEM,
    APPROVAL_RESPONSE_ITEM,
    CALL_ITEM,
    alias,
    model_name,
)

Item = dict[str, Any]


def approval_request_id(call_item_id: str) -> str:
    """The id of the approval request that stands where the call item ``call_item_id`` would."""
    return "mcpr_" + call_item_id.partition("_")[2]


def approved_call_id(response_id: str, request_id: str) -> str:
    """The id of the ``mcp_call`` item that runs an approved request in ``response_id``."""
    digest = hashlib.blake2b(f"{response_id}:{request_id}".encode(), digest_size=12)
    return f"mcp_{digest.hexdigest()}"


def call_item(
    item_id: str,
    *,
    server_label: str,
    name: str,
    arguments: str,
    approval_request_id: str | None = None,
) -> Item:
    """An ``mcp_call`` item in progress."""
    return {
        "id": item_id,
        "type": CALL_ITEM,
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
        "output": None,
        "error": None,
        "status": "in_progress",
        "approval_request_id": approval_request_id,
    }


def call_started_events(item: Item, output_index: int) -> list[ev.Event]:
    """``output_item.added`` and ``mcp_call.in_progress`` for a new call item."""
    return [
        ev.output_item_added(output_index, item),
        ev.mcp_event("response.mcp_call.in_progress", item["id"], output_index),
    ]


def arguments_events(item: Item, output_index: int) -> list[ev.Event]:
    """The call's arguments as one delta and its ``done``."""
    return [
        ev.mcp_call_arguments_delta(item["id"], output_index, item["arguments"]),
        ev.mcp_call_arguments_done(item["id"], output_index, item["arguments"]),
    ]


def _ref(tool: ToolDefinition | None) -> tuple[str, str, bool]:
    assert tool is not None and tool.mcp is not None, "MCP calls are presented for MCP tools"
    return tool.mcp.server_label, tool.mcp.tool_name, tool.mcp.needs_approval


class McpCallPresenter:
    """``mcp_call`` items, updated in place with their result."""

    item_type = CALL_ITEM
    id_prefix = "mcp"

    def __init__(self) -> None:
        self._streaming: set[str] = set()
        """Calls being streamed as ``mcp_call`` (not gated): their arguments go out as deltas."""

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        label, name, is_gated = _ref(tool)
        if is_gated:
            return _approval_item(approval_request_id(item_id), label, name, ""), []
        self._streaming.add(item_id)
        item = call_item(item_id, server_label=label, name=name, arguments="")
        return item, [ev.mcp_event("response.mcp_call.in_progress", item_id, output_index)]

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        if item_id not in self._streaming:  # an approval request: no call events
            return []
        return [ev.mcp_call_arguments_delta(item_id, output_index, delta)]

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        label, name, is_gated = _ref(tool)
        if is_gated:
            item = _approval_item(approval_request_id(item_id), label, name, call.arguments)
            return item, [ev.output_item_done(output_index, item)]
        self._streaming.discard(item_id)
        item = call_item(item_id, server_label=label, name=name, arguments=call.arguments)
        return item, [ev.mcp_call_arguments_done(item_id, output_index, call.arguments)]

    def call_of(self, item: Item) -> ToolCall:
        return ToolCall(
            id=item["id"],
            name=alias(item["server_label"], item["name"]),
            arguments=item.get("arguments") or "{}",
        )

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        return item.get("status") != "in_progress"  # sent back without one: done

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        data = result.data or {}
        item = {**output[index], "status": "failed" if result.is_error else "completed"}
        if result.is_error:
            item["output"] = None
            item["error"] = data.get("error") or {
                "type": "mcp_protocol_error",
                "code": -32603,
                "message": result.output,
            }
        else:
            item["output"] = result.output
            item["error"] = None
        for key in ("content", "structured_content"):
            if data.get(key) is not None:
                item[key] = data[key]
        event = "response.mcp_call.failed" if result.is_error else "response.mcp_call.completed"
        updated = [*output[:index], item, *output[index + 1 :]]
        return updated, [
            ev.mcp_event(event, item["id"], index),
            ev.output_item_done(index, item),
        ]

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        call_id = item.get("approval_request_id") or item["id"]
        viewed: list[Item] = []
        if not item.get("approval_request_id"):
            viewed.append(_function_call(call_id, output, item))
        if item.get("status") != "in_progress":
            viewed.append(presenters.result_view(call_id, _model_text(item)))
        return viewed


class ApprovalRequestPresenter(McpCallPresenter):
    """``mcp_approval_request`` items: calls that wait for the client's decision."""

    item_type = APPROVAL_REQUEST_ITEM
    id_prefix = "mcpr"

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        return False  # answered by an mcp_approval_response in a later request

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        return list(output), []  # an approval request never runs; its approved call does

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        is_decided = any(
            other.get("type") == APPROVAL_RESPONSE_ITEM
            and other.get("approval_request_id") == item["id"]
            for other in output
        )
        return [_function_call(item["id"], output, item)] if is_decided else []


def _approval_item(item_id: str, label: str, name: str, arguments: str) -> Item:
    return {
        "id": item_id,
        "type": APPROVAL_REQUEST_ITEM,
        "server_label": label,
        "name": name,
        "arguments": arguments,
    }


def _function_call(call_id: str, items: Sequence[Item], item: Item) -> Item:
    name = model_name(items, item["server_label"], item["name"])
    arguments = item.get("arguments") or "{}"
    return presenters.call_view(ToolCall(id=call_id, name=name, arguments=arguments))


def _model_text(item: Item) -> str:
    if item.get("output") is not None:
        return str(item["output"])
    error = item.get("error") or {}
    if isinstance(error, dict):
        message = error.get("message") or json.dumps(error.get("content"))
    else:
        message = str(error)
    return f"Error: {message}"


def view_approval_response(item: Item, items: Sequence[Item]) -> list[Item]:
    """A denial reaches the model as the call's output; an approval as the call's own output."""
    if item.get("approve"):
        return []
    reason = f" Reason: {item['reason']}" if item.get("reason") else ""
    return [
        presenters.result_view(
            item["approval_request_id"], f"The user denied this tool call; it did not run.{reason}"
        )
    ]


def view_list_tools(item: Item, items: Sequence[Item]) -> list[Item]:
    """A listing that failed is told to the model; a listing that worked is in its tools."""
    if not item.get("error"):
        return []
    note = (
        f"MCP server '{item['server_label']}' is unavailable ({item['error']}); "
        "its tools cannot be used in this response."
    )
    return [{"type": "message", "role": "developer", "content": note}]


MCP_CALLS = McpCallPresenter()
APPROVAL_REQUESTS = ApprovalRequestPresenter()
