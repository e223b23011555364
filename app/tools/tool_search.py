"""The ``tool_search`` kind the client runs: a search over tools the client holds back.

Codex CLI declares ``{"type": "tool_search", "execution": "client", "parameters": …}`` and defers
its MCP tools behind it. The model is offered it as a function of the client's schema; its call
becomes a ``tool_search_call`` item (``arguments``: an object) and the response pauses for the
client, which answers with a ``tool_search_output`` listing the tools it loaded (function, custom
and namespace tools). While that output is in the context the model is offered those tools too
(a namespace's as ``<namespace>__<name>``), and their calls are the client's, as any function's.

A ``tool_search`` OpenAI runs (no ``execution``, or ``server``) is a hosted tool
(app/tools/hosted.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.protocol.client_tools import is_client_tool_search
from app.tools.base import ToolDefinition, ToolKind
from app.tools.client_calls import CallShape, kind_of
from app.tools.custom import custom_definition
from app.tools.function import function_definition
from app.tools.namespace import namespace_tools
from app.tools.presenters import namespaced

Item = dict[str, Any]

TOOL_SEARCH = ToolKind.TOOL_SEARCH
"""The kind's name, also the tool's name for the model."""

_DESCRIPTION = "Search for further tools; the ones found can be called afterwards."
_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
}


def tool_search_definition(tool: Item | None = None) -> ToolDefinition:
    """The declared ``tool_search`` as the model is offered it: the client's schema."""
    declared = tool or {}
    return ToolDefinition(
        name=TOOL_SEARCH,
        kind=TOOL_SEARCH,
        description=declared.get("description") or _DESCRIPTION,
        parameters=declared.get("parameters") or _PARAMETERS,
    )


def searched_tools(
    declared: Sequence[Item], items: Sequence[Item], extra: Mapping[str, Any]
) -> dict[str, ToolDefinition]:
    """The tools the chain's items brought, by the model's name for them.

    Those a ``tool_search_output`` loaded, and the function, custom and namespace tools of an
    ``additional_tools`` item (the input's join the request's tools when it is made; these are
    for the later responses of a chain).
    """
    found: dict[str, ToolDefinition] = {}
    for item in items:
        if item.get("type") in ("tool_search_output", "additional_tools"):
            for tool in item["tools"]:
                found.update(_loaded(tool))
    return found


def _loaded(tool: Item) -> dict[str, ToolDefinition]:
    kind = tool.get("type")
    if kind == "namespace":
        return namespace_tools([tool], (), {})
    if kind == "custom":
        return {tool["name"]: custom_definition(tool)}
    if kind == "function":
        return {tool["name"]: function_definition(tool)}
    return {}  # an additional_tools item's others are the request's own, when it is made


def loaded_text(item: Item) -> str:
    """What the model reads of a ``tool_search_output``: the names it may call now."""
    names = []
    for tool in item["tools"]:
        if tool["type"] == "namespace":
            names += [namespaced(tool["name"], member["name"]) for member in tool["tools"]]
        else:
            names.append(tool["name"])
    if not names:
        return "No tools found."
    return json.dumps({"loaded_tools": names})


TOOL_SEARCH_CALL = CallShape(
    kind=TOOL_SEARCH,
    tool_types=("tool_search",),
    description=_DESCRIPTION,
    parameters=_PARAMETERS,
    item_type="tool_search_call",
    output_type="tool_search_output",
    id_prefix="tsc",
    fields=lambda args: {"arguments": args},
    arguments=lambda item: item["arguments"],
    output_text=loaded_text,
    static={"execution": "client"},
)

TOOL_SEARCH_KIND = replace(
    kind_of(TOOL_SEARCH_CALL),
    accepts=is_client_tool_search,
    define=tool_search_definition,
    model_tool=lambda tool: {**tool_search_definition(tool).chat_tool(), "strict": None},
    listed_tools=searched_tools,
)
"""Client-executed: the response pauses on a ``tool_search_call``. Listed before the hosted
kind, which takes the ``tool_search`` tools this one does not accept."""
