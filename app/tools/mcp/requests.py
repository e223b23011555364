"""What the gateway checks and keeps of a request's MCP tools and approval answers.

Each ``mcp`` tool is checked (unique label; a ``server_url`` that passes the allowlist, or a
label of a configured server), its ``headers``/``authorization`` are sealed for the workers and
blanked in the echoed tool, and a configured server's defaults fill what the request left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.config import Settings
from app.errors import InvalidRequestError
from app.tools.mcp.catalog import APPROVAL_REQUEST_ITEM, APPROVAL_RESPONSE_ITEM
from app.tools.mcp.security import (
    Resolver,
    Sealer,
    ServerUrlRefusedError,
    check_server_url,
    resolve_host,
)
from app.tools.mcp.servers import ConfiguredServer, load_configured, secret_headers

Item = dict[str, Any]


def prepare_mcp_tools(
    settings: Settings,
    declared: Sequence[Item],
    *,
    sealer: Callable[[], Sealer],
    resolve: Resolver = resolve_host,
) -> tuple[list[Item], dict[str, str]]:
    """The declared tools with MCP secrets blanked, and the sealed secrets by server label.

    Raises:
        InvalidRequestError: a duplicate label, an unknown configured label, a refused URL.
    """
    configured = load_configured(settings.mcp_servers_file)
    prepared: list[Item] = []
    sealed: dict[str, str] = {}
    for index, tool in enumerate(declared):
        if tool.get("type") != "mcp":
            prepared.append(tool)
            continue
        label = tool["server_label"]
        param = f"tools.{index}"
        if any(t.get("server_label") == label for t in prepared if t.get("type") == "mcp"):
            raise InvalidRequestError(
                f"Duplicate MCP server_label '{label}'.",
                param=f"{param}.server_label",
                code="invalid_value",
            )
        if tool.get("server_url") is None:
            prepared.append(_configured(configured, tool, param))
            continue
        if label in configured:
            raise InvalidRequestError(
                f"'{label}' is a configured MCP server; omit server_url to use it.",
                param=f"{param}.server_url",
                code="invalid_value",
            )
        try:
            check_server_url(tool["server_url"], settings.mcp_allowed_hosts, resolve=resolve)
        except ServerUrlRefusedError as exc:
            raise ServerUrlRefusedError(exc.message, param=f"{param}.server_url") from None
        secret = secret_headers(tool)
        if secret:
            sealed[label] = sealer().seal(label, secret)
        prepared.append({**tool, "headers": None, "authorization": None})
    return prepared, sealed


def _configured(configured: Mapping[str, ConfiguredServer], tool: Item, param: str) -> Item:
    label = tool["server_label"]
    server = configured.get(label)
    if server is None:
        raise InvalidRequestError(
            f"MCP server '{label}' needs a server_url (no configured server has this label).",
            param=f"{param}.server_url",
            code="missing_required_parameter",
        )
    if tool.get("headers") or tool.get("authorization"):
        raise InvalidRequestError(
            f"'{label}' is a configured MCP server; its headers come from the configuration.",
            param=f"{param}.headers",
            code="invalid_value",
        )
    allowed = tool.get("allowed_tools")
    if allowed is None and server.allowed_tools is not None:
        allowed = list(server.allowed_tools)
    return {
        **tool,
        "allowed_tools": allowed,
        "require_approval": tool.get("require_approval") or server.require_approval,
        "server_description": tool.get("server_description") or server.description,
        "headers": None,
        "authorization": None,
    }


def check_approval_responses(history: Sequence[Item], inputs: Sequence[Item]) -> None:
    """Every ``mcp_approval_response`` answers an open approval request.

    The request is the chain's, or one the input carries before it (a stateless client's
    history).

    Raises:
        InvalidRequestError: an answer to no request, or to one answered already.
    """
    if not any(item.get("type") == APPROVAL_RESPONSE_ITEM for item in inputs):
        return  # nothing to check (and the chain need not be read)
    requests = {i["id"] for i in history if i.get("type") == APPROVAL_REQUEST_ITEM}
    answered = {
        i["approval_request_id"] for i in history if i.get("type") == APPROVAL_RESPONSE_ITEM
    }
    for index, item in enumerate(inputs):
        if item.get("type") == APPROVAL_REQUEST_ITEM:
            requests.add(item["id"])
            continue
        if item.get("type") != APPROVAL_RESPONSE_ITEM:
            continue
        request_id = item["approval_request_id"]
        if request_id not in requests or request_id in answered:
            problem = "was answered already" if request_id in answered else "does not exist"
            raise InvalidRequestError(
                f"MCP approval request '{request_id}' {problem}.",
                param=f"input.{index}.approval_request_id",
                code="invalid_value",
            )
        answered.add(request_id)
