"""The executor of the ``tools.mcp`` queue: one MCP call, its result as data for the model."""

from __future__ import annotations

import json
import logging
from concurrent.futures import Future
from typing import Any

from app.errors import UpstreamError
from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.mcp.client import CallOutcome, McpClient, McpTimeoutError
from app.tools.mcp.servers import McpServers

logger = logging.getLogger(__name__)

_MAX_INLINE_BYTES = 1_000_000
"""Binary content larger than this (base64 characters) is summarised, not kept in the item."""


class McpExecutor:
    """Runs MCP calls over the process's pooled sessions."""

    kind = ToolKind.MCP

    def __init__(self, servers: McpServers, client: McpClient):
        self.servers = servers
        self.client = client

    def can_execute(self, tool: ToolDefinition) -> bool:
        """MCP tools with a server reference."""
        return tool.kind == ToolKind.MCP and tool.mcp is not None

    def execute(self, call: ToolCall, tool: ToolDefinition) -> ToolResult:
        """Call the tool; every failure comes back as an ``is_error`` result."""
        return self.submit(call, tool).result()

    def submit(self, call: ToolCall, tool: ToolDefinition) -> Future[ToolResult]:
        """Start the call on the client's loop and return at once (no thread waits on it).

        The future's result is what :meth:`execute` returns; cancelling it cancels the call.
        """
        assert tool.mcp is not None
        try:
            arguments = call.parsed_arguments()
        except ValueError as exc:
            return _done(_failed(call, "mcp_protocol_error", -32602, f"Invalid arguments: {exc}."))
        label = tool.mcp.server_label
        try:
            target = self.servers.target(tool.mcp)
            pending = self.client.submit_call(
                target, tool.mcp.tool_name, arguments, idempotency_key=call.idempotency_key
            )
        except UpstreamError as exc:
            return _done(_failed(call, "mcp_protocol_error", -32000, exc.message))
        answer: Future[ToolResult] = Future()

        def finish(done: Future[CallOutcome]) -> None:
            if answer.done():  # cancelled by the caller
                return
            if done.cancelled():
                answer.cancel()
                return
            try:
                answer.set_result(result_of(call.id, done.result()))
            except McpTimeoutError as exc:
                answer.set_result(_failed(call, "mcp_protocol_error", -32001, exc.message))
            except UpstreamError as exc:
                logger.info("MCP call %s on %s failed: %s", call.id, label, exc)
                answer.set_result(_failed(call, "mcp_protocol_error", -32000, exc.message))
            except Exception as exc:  # a bug of ours must still end the call
                logger.exception("MCP call %s on %s broke", call.id, label)
                answer.set_result(_failed(call, "mcp_protocol_error", -32000, str(exc)))

        answer.add_done_callback(lambda mine: mine.cancelled() and pending.cancel())
        pending.add_done_callback(finish)
        return answer


def _done(result: ToolResult) -> Future[ToolResult]:
    future: Future[ToolResult] = Future()
    future.set_result(result)
    return future


def result_of(call_id: str, outcome: CallOutcome) -> ToolResult:
    """A call's outcome as the model reads it (text; other parts summarised) and item data."""
    content = [_kept(block) for block in outcome.content]
    text = model_text(content, outcome.structured)
    data: dict[str, Any] = {}
    if any(block.get("type") != "text" for block in content):
        data["content"] = content
    if outcome.structured is not None:
        data["structured_content"] = outcome.structured
    if outcome.is_error:
        data["error"] = {"type": "mcp_tool_execution_error", "content": content}
    return ToolResult(call_id=call_id, output=text, is_error=outcome.is_error, data=data or None)


def model_text(content: list[dict[str, Any]], structured: dict[str, Any] | None) -> str:
    """Text parts as they are; images, audio and resources as one-line summaries."""
    parts = [_summary(block) for block in content]
    if not parts and structured is not None:
        parts = [json.dumps(structured)]
    return "\n".join(parts)


def _summary(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        data = str(block.get("data") or "")
        size = len(data) * 3 // 4 - data[-2:].count("=")
        return f"[{kind}: {block.get('mime_type', 'unknown type')}, {size} bytes]"
    if kind == "resource":
        resource = block.get("resource") or {}
        if "text" in resource:
            return str(resource["text"])
        return f"[resource: {resource.get('uri', '')}]"
    if kind == "resource_link":
        return f"[resource link: {block.get('uri', '')}]"
    return f"[{kind} content]"


def _kept(block: dict[str, Any]) -> dict[str, Any]:
    if len(str(block.get("data", ""))) > _MAX_INLINE_BYTES:
        return {**block, "data": None, "truncated": True}
    return block


def _failed(call: ToolCall, kind: str, code: int, message: str) -> ToolResult:
    return ToolResult(
        call_id=call.id,
        output=f"Error: {message}",
        is_error=True,
        data={"error": {"type": kind, "code": code, "message": message}},
    )
