"""The ``function`` kind: tools the client runs; the response pauses with their calls.

The client answers each ``function_call`` with a ``function_call_output`` item in its next
request (``previous_response_id``); :func:`check_call_outputs` holds those answers to the calls.
"""

from __future__ import annotations

from app.errors import InvalidRequestError
from app.tools.base import ToolKind
from app.tools.kinds import RequestContext, ToolKindSpec, named_definition


def check_call_outputs(context: RequestContext) -> None:
    """Every ``function_call_output`` answers a known call; every pending call gets its answer.

    Raises:
        InvalidRequestError: an output for an unknown call, or a pending call left unanswered.
    """
    items = [*context.history, *context.inputs]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    answered = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    for index, item in enumerate(context.inputs):
        if item.get("type") == "function_call_output" and item["call_id"] not in calls:
            raise InvalidRequestError(
                f"No tool call found for function call output with call_id '{item['call_id']}'.",
                param=f"input.{index}.call_id",
                code="invalid_value",
            )
    if not any(item.get("type") == "function_call_output" for item in context.inputs):
        return
    for call_id in calls:
        if call_id not in answered:
            raise InvalidRequestError(
                f"No tool output found for function call '{call_id}'.",
                param="input",
                code="missing_tool_output",
            )


FUNCTION_KIND = ToolKindSpec(
    name=ToolKind.FUNCTION,
    tool_types=("function",),
    define=named_definition(ToolKind.FUNCTION),
    check_inputs=check_call_outputs,
)
"""Client-executed: no queue, no executor; its calls are ``function_call`` items."""
