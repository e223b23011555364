"""The tools of one response: what the request declared, resolved to definitions and kinds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.errors import InvalidRequestError
from app.tools.base import ToolDefinition, ToolKind
from app.tools.internal import Registry
from app.tools.mcp import presenter as _mcp_presenter  # noqa: F401 - registers MCP's items
from app.tools.mcp.catalog import declared_servers, mcp_definitions
from app.tools.sandbox.tools import (
    CODE_INTERPRETER,
    SandboxToolSpec,
    code_interpreter_definition,
    echo_sandbox_tool,
)


def echo_tools(
    declared: list[dict[str, Any]],
    registry: Registry,
    *,
    history: Sequence[Mapping[str, Any]] = (),
    sandbox_tools: Mapping[str, SandboxToolSpec] | None = None,
) -> list[dict[str, Any]]:
    """The ``tools`` of the response object: declared tools, internal ones filled in.

    ``history`` (the previous responses' items) tells a code interpreter which container the
    chain already uses; ``sandbox_tools`` are the operator's sandboxed function tools.

    Raises:
        InvalidRequestError: an internal or sandbox tool that no worker offers.
    """
    echoed = []
    for index, tool in enumerate(declared):
        if tool["type"] in (CODE_INTERPRETER, "sandbox"):
            tool = echo_sandbox_tool(tool, index, history=history, operator_tools=sandbox_tools)
        elif tool["type"] == "internal":
            found = registry.get(tool["name"])
            if found is None:
                known = ", ".join(sorted(d.name for d in registry.list())) or "none"
                raise InvalidRequestError(
                    f"Unknown internal tool '{tool['name']}' (available: {known}).",
                    param=f"tools.{index}.name",
                    code="invalid_value",
                )
            definition = found.definition()
            tool = {
                "type": "internal",
                "name": definition.name,
                "description": definition.description,
                "parameters": definition.parameters,
                "strict": None,
                "timeout_seconds": definition.timeout_seconds,
            }
        echoed.append(tool)
    return echoed


def definitions(
    tools: list[dict[str, Any]],
    items: Sequence[dict[str, Any]] = (),
    *,
    sealed: Mapping[str, str] | None = None,
) -> dict[str, ToolDefinition]:
    """The response's tools by name, with the MCP tools listed in ``items`` (the chain so far).

    ``sealed``: the response's sealed MCP headers by server label (tool workers need them).
    """
    found: dict[str, ToolDefinition] = {}
    for tool in tools:
        if tool["type"] == CODE_INTERPRETER:
            found[CODE_INTERPRETER] = code_interpreter_definition(tool)
            continue
        kind = ToolKind(tool["type"]) if tool["type"] in ToolKind.__members__.values() else None
        if kind is None or kind is ToolKind.MCP:
            continue
        found[tool["name"]] = ToolDefinition(
            name=tool["name"],
            kind=kind,
            description=tool.get("description"),
            parameters=tool.get("parameters") or {"type": "object", "properties": {}},
            timeout_seconds=tool.get("timeout_seconds"),
        )
    for name, definition in mcp_definitions(tools, items, sealed).items():
        found.setdefault(name, definition)  # a declared function keeps its name
    return found


def model_tools(
    tools: list[dict[str, Any]], items: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The tools as the model is offered them, all as functions.

    Declared tools first (hosted ones too), then the MCP tools listed in ``items``.
    """
    offered = [
        code_interpreter_definition(tool).chat_tool() if tool["type"] == CODE_INTERPRETER else tool
        for tool in tools
        if tool["type"] != "mcp"
    ]
    names = {tool.get("name") for tool in offered}
    for name, definition in mcp_definitions(tools, items).items():
        if name == definition.name and name not in names:
            offered.append({**definition.chat_tool(), "strict": None})
    return offered


def is_agentic(tools: list[dict[str, Any]]) -> bool:
    """Whether any declared tool is executed by the fleet (the agentic loop is engaged)."""
    return bool(declared_servers(tools)) or any(
        definition.kind.is_server_side for definition in definitions(tools).values()
    )


def allowed_names(tool_choice: Any) -> frozenset[str] | None:
    """Names an ``allowed_tools`` choice lets run (None: every declared tool)."""
    if not isinstance(tool_choice, dict) or tool_choice.get("type") != "allowed_tools":
        return None
    names = (
        ref.get("name") or (CODE_INTERPRETER if ref.get("type") == CODE_INTERPRETER else None)
        for ref in tool_choice.get("tools", [])
    )
    return frozenset(name for name in names if name)


def is_allowed(tool: ToolDefinition, allowed: frozenset[str], tool_choice: Any) -> bool:
    """Whether an ``allowed_tools`` choice lets ``tool`` run (by name, or by MCP server)."""
    if tool.name in allowed:
        return True
    if tool.mcp is None or not isinstance(tool_choice, dict):
        return False
    return any(
        ref.get("type") == "mcp"
        and ref.get("server_label") == tool.mcp.server_label
        and ref.get("name") in (None, tool.mcp.tool_name)
        for ref in tool_choice.get("tools", [])
    )
