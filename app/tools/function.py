"""The ``function`` kind: tools the client runs; the response pauses with their calls.

The client answers each ``function_call`` with a ``function_call_output`` item in its next
request (``previous_response_id``); :func:`check_call_outputs` holds those answers to the calls.

A top-level function with ``defer_loading: true`` is one OpenAI loads through its tool search.
With a hosted ``tool_search`` declared, the model is offered it once the search loaded it
(app/tools/tool_search.py); without one, from the start, as any function. Its calls carry the
shape OpenAI gives a deferred function's: ``namespace`` is the function's own name (the Agents
SDK finds the tool of such a call by that shape only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.errors import InvalidRequestError
from app.tools.base import ToolDefinition, ToolKind
from app.tools.kinds import RequestContext, ToolKindSpec, missing_output, named_definition


def call_id_key(item: dict[str, Any]) -> str:
    """The field of an output item that names its call: ``call_id``, as most kinds have it."""
    return "call_id"


def answers_check(
    call_type: str, output_type: str, *, output_key: Callable[[dict[str, Any]], str] = call_id_key
) -> Callable[[RequestContext], None]:
    """A ``check_inputs`` for a client kind: ``output_type`` items answer ``call_type`` calls.

    Every output answers a known call; once the input answers any, every pending call of the
    kind gets its answer (a call the input ends with needs one too: ``ToolKinds``' check). A
    call a message follows may go without one (a client went on without sending it; the model
    is told no result came). ``output_key``: the output's field naming the call (``call_id``;
    ``call_id`` or ``id`` for ``local_shell_call_output``). Items without a call id are not
    the client's to answer (a search the server ran came with its output).
    """
    label = call_type.replace("_", " ")

    def call_of(item: dict[str, Any]) -> Any:
        return item.get(output_key(item))

    def check(context: RequestContext) -> None:
        outputs = [
            (n, i)
            for n, i in enumerate(context.inputs)
            if i.get("type") == output_type and call_of(i) is not None
        ]
        if not outputs:
            return  # nothing to hold to the calls (and the chain need not be read)
        items = [*context.history, *context.inputs]
        calls = [i["call_id"] for i in items if i.get("type") == call_type and i.get("call_id")]
        answered = {call_of(i) for i in items if i.get("type") == output_type}
        for index, item in outputs:
            if call_of(item) not in calls:
                raise InvalidRequestError(
                    f"No tool call found for {label} output with call_id '{call_of(item)}'.",
                    param=f"input.{index}.{output_key(item)}",
                    code="invalid_value",
                )
        for call_id in calls:
            if call_id not in answered:
                raise missing_output(call_type, call_id)

    return check


check_call_outputs = answers_check("function_call", "function_call_output")
"""``function_call_output`` items answer known ``function_call`` items, all of them."""


_named = named_definition(ToolKind.FUNCTION)


def function_definition(tool: dict[str, Any]) -> ToolDefinition:
    """A declared function, or one a tool search loaded.

    A deferred one's calls carry its name as their ``namespace``.
    """
    definition = _named(tool)
    if not tool.get("defer_loading"):
        return definition
    return replace(definition, options={"namespace": tool["name"], "name": tool["name"]})


FUNCTION_KIND = ToolKindSpec(
    name=ToolKind.FUNCTION,
    tool_types=("function",),
    define=function_definition,
    check_inputs=check_call_outputs,
)
"""Client-executed: no queue, no executor; its calls are ``function_call`` items."""
