"""The ``namespace`` kind: a named group of function and custom tools the client runs.

The model is offered each tool of a namespace as ``<namespace>__<name>`` (Chat Completions has no
namespaces); its calls are ``function_call`` / ``custom_tool_call`` items with the tool's own
``name`` and the ``namespace``, and the response pauses on them as on any client call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.tools.base import ToolDefinition, ToolKind
from app.tools.custom import custom_definition
from app.tools.kinds import ToolKindSpec
from app.tools.presenters import namespaced

Item = dict[str, Any]


def namespace_tools(
    declared: Sequence[Item], items: Sequence[Item], extra: Mapping[str, Any]
) -> dict[str, ToolDefinition]:
    """Every tool of the declared namespaces, by the name the model knows it by."""
    found: dict[str, ToolDefinition] = {}
    for group in declared:
        for tool in group["tools"]:
            name = namespaced(group["name"], tool["name"])
            options = {"namespace": group["name"], "name": tool["name"]}
            found[name] = _definition(tool, name, options)
    return found


def _definition(tool: Item, name: str, options: dict[str, Any]) -> ToolDefinition:
    if tool["type"] == "custom":
        return custom_definition(tool, name=name, options=options)
    return ToolDefinition(
        name=name,
        kind=ToolKind.FUNCTION,
        description=tool.get("description"),
        parameters=tool.get("parameters") or {"type": "object", "properties": {}},
        options=options,
    )


def _listed_only(tool: Item) -> None:
    return None  # the group itself is no tool; its members are offered as listed tools


NAMESPACE_KIND = ToolKindSpec(
    name=ToolKind.NAMESPACE,
    tool_types=("namespace",),
    model_tool=_listed_only,
    listed_tools=namespace_tools,
)
"""Client-executed (no queue): its tools' definitions are of the function and custom kinds."""
