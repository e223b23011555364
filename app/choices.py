"""Checks of a create request's ``tool_choice`` against its tools, before and after preparation."""

from __future__ import annotations

from typing import Any

from app.errors import InvalidRequestError, quoted
from app.protocol.client_tools import HOSTED_TOOL_TYPES, WEB_SEARCH_TYPES, HostedTool
from app.protocol.request import (
    CreateResponseRequest,
    CustomChoice,
    FunctionChoice,
    HostedChoice,
    McpChoice,
    McpTool,
)
from app.tools.hosted import UNAVAILABLE_TYPES, unavailable_tool_error
from app.tools.kinds import duplicate_tool_name

FORCED_TYPES = {
    "computer": {"computer", "computer_use_preview"},
    "computer_use": {"computer", "computer_use_preview"},
    "computer_use_preview": {"computer", "computer_use_preview"},
    **{web: set(WEB_SEARCH_TYPES) for web in WEB_SEARCH_TYPES},  # one search here, by any name
}
"""The declared tool types a ``tool_choice`` by type may name (else: its own type)."""


def check_tool_choice(request: CreateResponseRequest) -> None:
    """The request's ``tool_choice`` names a declared tool, and nothing the fleet cannot run.

    Raises:
        InvalidRequestError: what is wrong with it (``param``: ``tool_choice``).
    """
    choice = request.tool_choice
    names = _tool_names(request)
    if isinstance(choice, FunctionChoice | CustomChoice) and choice.name not in names:
        raise InvalidRequestError(
            f"Tool choice {quoted(choice.name)} not found in 'tools' parameter.",
            param="tool_choice",
            code="invalid_value",
        )
    if isinstance(choice, HostedChoice):
        _check_forced_type(choice.type, request)
    if isinstance(choice, McpChoice):
        _check_forced_server(choice, request)
    if choice == "required" and not request.tools:
        raise InvalidRequestError(
            "tool_choice 'required' needs at least one tool.",
            param="tool_choice",
            code="invalid_value",
        )


def _tool_names(request: CreateResponseRequest) -> set[str]:
    """The names of the request's tools; a name declared twice is a 400."""
    names: set[str] = set()
    for index, tool in enumerate(request.tools):
        name = getattr(tool, "name", None)
        if name in names:
            named = "name" in type(tool).model_fields  # else: a fixed tool, named by its type
            raise duplicate_tool_name(
                name, param=f"tools.{index}.name" if named else f"tools.{index}"
            )
        if name is not None:
            names.add(name)
    return names


def _check_forced_type(forced: str, request: CreateResponseRequest) -> None:
    """A ``tool_choice`` forcing a tool by type: never a hosted one the fleet cannot run.

    A type both kinds share (``tool_search``) is forced fine when a tool of it is the client's
    (the fleet's own search is offered only while it has something to load).
    """
    declared = {tool.type for tool in request.tools}
    runnable = {tool.type for tool in request.tools if not isinstance(tool, HostedTool)}
    if forced in UNAVAILABLE_TYPES and forced not in runnable:
        raise unavailable_tool_error(forced, "tool_choice")
    if forced == "tool_search" and forced not in runnable:
        raise InvalidRequestError(
            "Tool choice 'tool_search' forces a tool_search the client runs "
            "('execution': 'client'); the hosted tool_search is not forced.",
            param="tool_choice",
            code="unsupported_tool",
        )
    accepted = FORCED_TYPES.get(forced, {forced})
    if not accepted & declared:
        raise InvalidRequestError(
            f"Tool choice '{forced}' needs a tool of that type in 'tools'.",
            param="tool_choice",
            code="invalid_value",
        )


def _check_forced_server(choice: McpChoice, request: CreateResponseRequest) -> None:
    """A ``tool_choice`` forcing an MCP tool names a declared server (any, without a label)."""
    labels = {tool.server_label for tool in request.tools if isinstance(tool, McpTool)}
    if choice.server_label is None and not labels:
        raise InvalidRequestError(
            "Tool choice 'mcp' needs an MCP server in 'tools'.",
            param="tool_choice",
            code="invalid_value",
        )
    if choice.server_label is not None and choice.server_label not in labels:
        raise InvalidRequestError(
            f"MCP server {quoted(choice.server_label)} of 'tool_choice' is not in 'tools'.",
            param="tool_choice.server_label",
            code="invalid_value",
        )


def check_forced_tool_kept(request: CreateResponseRequest, tools: list[dict[str, Any]]) -> None:
    """A forced web search needs a plugin behind it (else its tool was dropped).

    Raises:
        InvalidRequestError: the forced hosted tool is not among the prepared ``tools``.
    """
    choice = request.tool_choice
    if not isinstance(choice, HostedChoice) or choice.type not in HOSTED_TOOL_TYPES:
        return
    if not FORCED_TYPES.get(choice.type, {choice.type}) & {tool["type"] for tool in tools}:
        raise unavailable_tool_error(choice.type, "tool_choice")
