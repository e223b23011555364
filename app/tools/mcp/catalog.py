"""Which MCP tools the model sees, under which names; pure functions of the response's items.

A server's tools come from the latest successful ``mcp_list_tools`` item for its label in the
chain (previous responses and this one), filtered by the request's ``allowed_tools``. A tool's
name for the model is its own name, or ``<label>__<name>`` when another listed server exports
the same name. Each MCP definition is also reachable under :func:`alias` (label and server-side
name), which is how a call item names its tool.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.tools.base import McpToolRef, ToolDefinition, ToolKind

Item = dict[str, Any]

LIST_ITEM = "mcp_list_tools"
CALL_ITEM = "mcp_call"
APPROVAL_REQUEST_ITEM = "mcp_approval_request"
APPROVAL_RESPONSE_ITEM = "mcp_approval_response"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def alias(server_label: str, tool_name: str) -> str:
    """The key a call item uses for its tool (never a name the model sees: it has ``:``)."""
    return f"mcp:{server_label}:{tool_name}"


def declared_servers(tools: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The ``mcp`` entries of a response's tools."""
    return [tool for tool in tools if tool.get("type") == "mcp"]


def latest_listings(items: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The last successful ``mcp_list_tools`` item of each server label."""
    found: dict[str, Mapping[str, Any]] = {}
    for item in items:
        if item.get("type") == LIST_ITEM and not item.get("error"):
            found[item["server_label"]] = item
    return found


def model_names(listings: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(label, tool name) → the name the model sees; names two servers share get the label."""
    counts = Counter(tool["name"] for item in listings.values() for tool in item["tools"])
    names = {}
    for label, item in listings.items():
        for tool in item["tools"]:
            name = tool["name"] if counts[tool["name"]] == 1 else f"{label}__{tool['name']}"
            names[(label, tool["name"])] = _UNSAFE.sub("_", name)[:64]
    return names


def model_name(items: Sequence[Mapping[str, Any]], server_label: str, tool_name: str) -> str:
    """The model's name of one tool, as :func:`model_names` gives it over ``items``."""
    return model_names(latest_listings(items)).get((server_label, tool_name), tool_name)


def allowed_tool_names(allowed_tools: Any) -> frozenset[str] | None:
    """``allowed_tools`` (a list or ``{"tool_names": [...]}``) as a set; None: every tool."""
    if allowed_tools is None:
        return None
    if isinstance(allowed_tools, Mapping):
        names = allowed_tools.get("tool_names")
        return None if names is None else frozenset(names)
    return frozenset(allowed_tools)


def is_tool_allowed(allowed_tools: Any, tool: Mapping[str, Any]) -> bool:
    """Whether ``allowed_tools`` lets the model see ``tool`` (by name, or as read-only)."""
    if allowed_tools is None:
        return True
    if isinstance(allowed_tools, Mapping) and allowed_tools.get("read_only"):
        return _filter_matches(allowed_tools, tool)
    names = allowed_tool_names(allowed_tools)
    return names is None or tool["name"] in names


def needs_approval(require_approval: Any, tool: Mapping[str, Any]) -> bool:
    """Whether a call of ``tool`` waits for the client's approval (OpenAI's default: always)."""
    if require_approval in (None, "always"):
        return True
    if require_approval == "never":
        return False
    if _filter_matches(require_approval.get("never"), tool):
        return False
    if _filter_matches(require_approval.get("always"), tool):
        return True
    return True


def _filter_matches(tool_filter: Any, tool: Mapping[str, Any]) -> bool:
    if not isinstance(tool_filter, Mapping):
        return False
    if tool["name"] in (tool_filter.get("tool_names") or ()):
        return True
    annotations = tool.get("annotations") or {}
    return bool(tool_filter.get("read_only")) and bool(annotations.get("readOnlyHint"))


def mcp_definitions(
    tools: Iterable[Mapping[str, Any]],
    items: Sequence[Mapping[str, Any]],
    sealed: Mapping[str, str] | None = None,
) -> dict[str, ToolDefinition]:
    """The listed MCP tools of the declared servers, by model name and by :func:`alias`."""
    declared = declared_servers(tools)
    if not declared:  # the chain is not read: a response without servers costs nothing more
        return {}
    listings = latest_listings(items)
    names = model_names(listings)
    found: dict[str, ToolDefinition] = {}
    for server in declared:
        label = server["server_label"]
        listing = listings.get(label)
        if listing is None:
            continue
        for tool in listing["tools"]:
            if not is_tool_allowed(server.get("allowed_tools"), tool):
                continue
            definition = ToolDefinition(
                name=names[(label, tool["name"])],
                kind=ToolKind.MCP,
                description=tool.get("description"),
                parameters=tool.get("input_schema") or {"type": "object", "properties": {}},
                mcp=McpToolRef(
                    server_label=label,
                    tool_name=tool["name"],
                    server_url=server.get("server_url"),
                    sealed_headers=(sealed or {}).get(label),
                    needs_approval=needs_approval(server.get("require_approval"), tool),
                ),
            )
            found[definition.name] = definition
            found[alias(label, tool["name"])] = definition
    return found


def unlisted_servers(
    tools: Iterable[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
    output: Sequence[Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    """Declared servers to list now: none of the chain lists them, none of this response tried."""
    declared = declared_servers(tools)
    if not declared:
        return []
    listed = latest_listings([*history, *output])
    tried = {item["server_label"] for item in output if item.get("type") == LIST_ITEM}
    return [
        server
        for server in declared
        if server["server_label"] not in listed and server["server_label"] not in tried
    ]
