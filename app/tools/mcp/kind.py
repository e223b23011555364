"""The ``mcp`` kind: tools of MCP servers, listed before the model is called, run on ``tools.mcp``.

A declared ``mcp`` tool is a server, not a tool: its tools come from the chain's
``mcp_list_tools`` items (:mod:`.catalog`), which the ``before_model`` hook adds (:mod:`.turn`).
The request's headers for a server are sealed into the response's extra at create time
(:mod:`.requests`) and opened by the workers that connect to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.tools.base import ToolDefinition, ToolKind
from app.tools.kinds import KindContext, PreparedTools, RequestContext, ToolKindSpec
from app.tools.mcp.catalog import (
    APPROVAL_REQUEST_ITEM,
    APPROVAL_RESPONSE_ITEM,
    LIST_ITEM,
    mcp_definitions,
)
from app.tools.mcp.client import McpClient
from app.tools.mcp.executor import McpExecutor
from app.tools.mcp.presenter import (
    APPROVAL_REQUESTS,
    MCP_CALLS,
    view_approval_response,
    view_list_tools,
)
from app.tools.mcp.requests import check_approval_responses, prepare_mcp_tools
from app.tools.mcp.security import Sealer, allowed_addresses
from app.tools.mcp.servers import McpServers, seal_key
from app.tools.mcp.turn import SEALED_EXTRA, list_servers, start_approved_calls

Item = dict[str, Any]


def listed_mcp_tools(
    declared: Sequence[Item], items: Sequence[Item], extra: Mapping[str, Any]
) -> dict[str, ToolDefinition]:
    """The listed tools of the declared servers (with their sealed headers, when kept)."""
    return mcp_definitions(declared, items, extra.get(SEALED_EXTRA))


def is_server_chosen(tool: ToolDefinition, ref: Item) -> bool:
    """A reference to a server picks its tools (or the one it names); without a label, any.

    ``{"type": "mcp"}``: the tools of every declared server.
    """
    return (
        tool.mcp is not None
        and ref.get("type") == "mcp"
        and ref.get("server_label") in (None, tool.mcp.server_label)
        and ref.get("name") in (None, tool.mcp.tool_name)
    )


def check_approvals(context: RequestContext) -> None:
    """Every ``mcp_approval_response`` of the input answers an open approval request."""
    check_approval_responses(context.history, context.inputs)


def prepare_servers(context: RequestContext, declared: list[Item]) -> PreparedTools:
    """Servers checked and their headers sealed into the response's extra, blanked in the echo."""
    settings = context.settings
    tools, sealed = prepare_mcp_tools(settings, declared, sealer=lambda: Sealer(seal_key(settings)))
    return PreparedTools(tools=tools, extra={SEALED_EXTRA: sealed} if sealed else {})


def make_mcp_executor(context: KindContext) -> McpExecutor:
    """The process's MCP client (its own event loop and session pool) behind the executor."""
    settings = context.settings

    def policy(host: str) -> list[str]:  # checked again on every connect: DNS may change
        return allowed_addresses(host, settings.mcp_allowed_hosts)

    client = McpClient(
        list_ttl_seconds=settings.mcp_list_cache_seconds,
        connect_timeout_seconds=settings.mcp_connect_timeout_seconds,
        address_policy=policy,
        max_sessions=settings.mcp_max_sessions,
        idle_seconds=settings.mcp_idle_seconds,
    )
    servers = McpServers(settings, sealer=lambda: Sealer(seal_key(settings)))
    return McpExecutor(servers, client)


MCP_KIND = ToolKindSpec(
    name=ToolKind.MCP,
    tool_types=("mcp",),
    presenter=MCP_CALLS,
    queue="tools.mcp",
    model_tool=lambda server: None,  # its tools are offered once listed
    listed_tools=listed_mcp_tools,
    is_chosen=is_server_chosen,
    item_presenters=(APPROVAL_REQUESTS,),
    awaiting_client=frozenset({APPROVAL_REQUEST_ITEM}),
    views={APPROVAL_RESPONSE_ITEM: view_approval_response, LIST_ITEM: view_list_tools},
    check_inputs=check_approvals,
    prepare=prepare_servers,
    make_executor=make_mcp_executor,
    make_turn_dep=make_mcp_executor,
    before_step=start_approved_calls,
    before_model=list_servers,
)
"""Server-side; calls are ``mcp_call`` items, or ``mcp_approval_request`` items to approve."""
