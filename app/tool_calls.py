"""One tool call: the unit of work of the ``tools.<kind>`` queues.

A call's result is stored under ``(response_id, call_id)`` before the task is acknowledged; a
redelivered task whose result is stored returns at once, so no tool runs twice for one call.
The call runs in a helper thread under a deadline; the task watches the response meanwhile and
abandons the call when the response is cancelled.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from app.config import Settings
from app.conversation import load_history
from app.errors import AppError
from app.protocol.response import ACTIVE_STATUSES, ResponseObject
from app.store import ResponseStore
from app.tools import presenters
from app.tools.base import (
    ExecutorRegistry,
    ToolCall,
    ToolDefinition,
    ToolResult,
    cap_output,
)
from app.tools.catalog import definitions

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDeps:
    """The collaborators of a tool worker process."""

    store: ResponseStore
    executors: ExecutorRegistry
    settings: Settings


def run_tool_call(deps: ToolDeps, response_id: str, call_id: str) -> str:
    """Execute one call of a response and store its result; returns what happened."""
    store = deps.store
    if store.tool_results(response_id, [call_id])[0] is not None:
        return "stored"
    stored = store.load(response_id)
    if stored is None or stored.response.status not in ACTIVE_STATUSES:
        return "skipped"
    found = presenters.find_call(stored.response.output, call_id)
    if found is None:
        return "skipped"
    presenter = presenters.for_item(found[1])
    assert presenter is not None
    call = presenter.call_of(found[1])
    tool = _definition(store, stored.response, call.name, stored.extra.get("mcp_sealed"))
    result = _execute(deps, response_id, call, tool)
    if result is None:
        return "cancelled"
    result = ToolResult(
        call_id=call_id,
        output=cap_output(result.output, deps.settings.tool_output_max_chars),
        is_error=result.is_error,
        data=result.data,
    )
    if store.status(response_id) not in ACTIVE_STATUSES:
        return "cancelled"  # a result that arrives after a cancel is discarded
    store.put_tool_result(response_id, call_id, result.to_json())
    return "error" if result.is_error else "ok"


def _definition(
    store: ResponseStore, response: ResponseObject, name: str, sealed: dict[str, str] | None
) -> ToolDefinition | None:
    """The called tool; MCP tools listed earlier in the chain need the chain to be found."""
    tool = definitions(response.tools, response.output, sealed=sealed).get(name)
    if tool is not None or response.previous_response_id is None:
        return tool
    try:
        history = load_history(store, response.previous_response_id)
    except AppError:
        return None
    return definitions(response.tools, [*history, *response.output], sealed=sealed).get(name)


def _execute(
    deps: ToolDeps, response_id: str, call: ToolCall, tool: ToolDefinition | None
) -> ToolResult | None:
    if tool is None:
        return ToolResult(call_id=call.id, output=f"Unknown tool '{call.name}'.", is_error=True)
    executor = deps.executors.for_tool(tool)
    if executor is None:
        message = f"No executor for {tool.kind} tool '{tool.name}' on this worker."
        return ToolResult(call_id=call.id, output=message, is_error=True)
    timeout = tool.timeout_seconds or deps.settings.tool_timeout_seconds
    box: list[ToolResult] = []

    def target() -> None:
        try:
            box.append(executor.execute(call, tool))
        except Exception as exc:  # a failing tool is data for the model
            logger.warning("tool %s raised", tool.name, exc_info=True)
            box.append(ToolResult(call_id=call.id, output=f"Error: {exc}", is_error=True))

    worker = threading.Thread(target=target, name=f"tool-{call.id}", daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout
    while worker.is_alive():
        worker.join(_POLL_SECONDS)
        if deps.store.status(response_id) not in ACTIVE_STATUSES:
            return None
        if time.monotonic() > deadline and worker.is_alive():
            return ToolResult(
                call_id=call.id,
                output=f"Error: tool '{tool.name}' timed out after {timeout:g} s.",
                is_error=True,
            )
    return box[0]
