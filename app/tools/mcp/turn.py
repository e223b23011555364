"""What a model turn does for MCP before the model is called: list servers, run approved calls.

Listing happens on the turn's worker, once per response and server (never again in a
continuation whose chain listed it); the listings are cached per worker (see
:mod:`app.tools.mcp.client`). A server that cannot be listed gets an ``mcp_list_tools`` item with
``error`` and the response goes on without its tools.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.errors import UpstreamError
from app.protocol import events as ev
from app.protocol.items import item_id
from app.protocol.response import ResponseObject
from app.tools.kinds import EventOut, StepInput
from app.tools.mcp.catalog import (
    APPROVAL_REQUEST_ITEM,
    APPROVAL_RESPONSE_ITEM,
    CALL_ITEM,
    LIST_ITEM,
    is_tool_allowed,
    unlisted_servers,
)
from app.tools.mcp.client import ListedTool
from app.tools.mcp.executor import McpExecutor
from app.tools.mcp.presenter import (
    approved_call_id,
    arguments_events,
    call_item,
    call_started_events,
)

logger = logging.getLogger(__name__)

Item = dict[str, Any]

SEALED_EXTRA = "mcp_sealed"
"""The key of the response's extra that keeps its MCP headers, sealed, by server label."""


def list_servers(mcp: McpExecutor | None, step: StepInput, sink: EventOut) -> ResponseObject:
    """The response with an ``mcp_list_tools`` item for every server not listed yet.

    ``mcp``: this worker's MCP client; None: every listing carries an error.
    """
    response, turn, sealed = step.response, step.turn, step.extra.get(SEALED_EXTRA)
    servers = unlisted_servers(response.tools, step.history, response.output)
    if not servers:
        return response
    first = len(response.output)
    items = []
    for offset, server in enumerate(servers):
        iid = item_id("mcpl", response.id, turn, first + offset)
        item = {"id": iid, "type": LIST_ITEM, "server_label": server["server_label"], "tools": []}
        sink.emit(ev.output_item_added(first + offset, item))
        sink.emit(ev.mcp_event("response.mcp_list_tools.in_progress", iid, first + offset))
        items.append(item)
    sink.flush()
    with ThreadPoolExecutor(max_workers=len(servers), thread_name_prefix="mcp-list") as pool:
        listed = list(pool.map(lambda server: _list(mcp, server, sealed), servers))
    for offset, (item, found) in enumerate(zip(items, listed, strict=True)):
        if isinstance(found, str):
            item["error"] = found
            done = "response.mcp_list_tools.failed"
        else:
            item["tools"] = found  # no ``error`` key, as OpenAI's
            done = "response.mcp_list_tools.completed"
        sink.emit(ev.mcp_event(done, item["id"], first + offset))
        sink.emit(ev.output_item_done(first + offset, item))
    return response.model_copy(update={"output": [*response.output, *items]})


def _list(
    mcp: McpExecutor | None, server: Mapping[str, Any], sealed: Mapping[str, str] | None
) -> list[Item] | str:
    """The server's allowed tools as the listing shows them, or the error that stopped it."""
    label = server["server_label"]
    if mcp is None:
        return "MCP is not available on this worker."
    try:
        target = mcp.servers.target_of(label, server.get("server_url"), (sealed or {}).get(label))
        tools = mcp.client.list_tools(target)
    except UpstreamError as exc:
        logger.info("listing MCP server %s failed: %s", label, exc.message)
        return exc.message
    allowed = server.get("allowed_tools")
    return [wire for wire in map(_wire, tools) if is_tool_allowed(allowed, wire)]


def _wire(tool: ListedTool) -> Item:
    """A listed tool as OpenAI's listing has it.

    A ``description`` or ``annotations`` the server gave none of is left out, not null (the AI
    SDK refuses a null one: "Invalid JSON response").
    """
    wire: Item = {"name": tool.name, "input_schema": tool.input_schema}
    if tool.description is not None:
        wire["description"] = tool.description
    if tool.annotations is not None:
        wire["annotations"] = tool.annotations
    return wire


def start_approved_calls(
    mcp: McpExecutor | None, step: StepInput, sink: EventOut
) -> ResponseObject:
    """The response with an ``mcp_call`` item for every approval in its input (once each).

    The calls run on ``tools.mcp`` workers. Servers not listed yet are listed first (with
    ``mcp``): an approval sent with the whole history, not on a chain, finds no listing there.
    """
    response, inputs = step.response, step.inputs
    if not any(i.get("type") == APPROVAL_RESPONSE_ITEM and i.get("approve") for i in inputs):
        return response  # the chain is not read
    response = list_servers(mcp, step, sink)
    requests = {  # the chain's, or the input's own (a stateless client's history)
        i["id"]: i for i in [*step.history, *inputs] if i.get("type") == APPROVAL_REQUEST_ITEM
    }
    started = {i.get("approval_request_id") for i in response.output if i["type"] == CALL_ITEM}
    output = list(response.output)
    for answer in inputs:
        if answer.get("type") != APPROVAL_RESPONSE_ITEM or not answer.get("approve"):
            continue
        request = requests.get(answer["approval_request_id"])
        if request is None or request["id"] in started:
            continue
        item = call_item(
            approved_call_id(response.id, request["id"]),
            server_label=request["server_label"],
            name=request["name"],
            arguments=request["arguments"],
            approval_request_id=request["id"],
        )
        index = len(output)
        for event in [*call_started_events(item, index), *arguments_events(item, index)]:
            sink.emit(event)
        output.append(item)
    if len(output) == len(response.output):
        return response
    return response.model_copy(update={"output": output})
