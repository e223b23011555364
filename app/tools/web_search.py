"""The ``web_search`` kind: OpenAI's hosted web search, backed by an operator's internal plugin.

An internal plugin whose definition declares ``options={"tool_type": "web_search"}`` runs the
searches (on ``tools.internal``, its ``query`` argument the search). A request's ``web_search``
(or ``web_search_preview``) tool is then offered to the model as a function ``web_search``, and
its calls are ``web_search_call`` items (``action: {"type": "search", "query"}``) with the
``response.web_search_call.in_progress`` / ``searching`` / ``completed`` events. The plugin's
answer is kept on the item as ``output`` (not in the SDK's type: the model reads it back on later
turns). Without such a plugin, the tool is one of the hosted tools the fleet cannot run
(:mod:`app.tools.hosted`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.protocol import events as ev
from app.protocol.client_tools import WEB_SEARCH_TYPES
from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.hosted import unavailable_tool_error
from app.tools.internal.kind import declared_registry
from app.tools.kinds import PreparedTools, RequestContext, ToolKindSpec
from app.tools.presenters import call_view, result_view

Item = dict[str, Any]

WEB_SEARCH = "web_search"
"""The tool type a backing plugin declares, and the function name the model knows."""


def web_search_definition(tool: Item) -> ToolDefinition:
    """The search as the model is offered it; run by the plugin that declares the type."""
    return ToolDefinition(
        name=WEB_SEARCH,
        kind=ToolKind.INTERNAL,  # the executor: the internal plugin, found by its tool type
        description="Search the web; the answer lists what was found.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to search for."}},
            "required": ["query"],
        },
        options={"tool_type": WEB_SEARCH, "presented_as": ToolKind.WEB_SEARCH},
    )


def prepare_web_search(context: RequestContext, declared: list[Item]) -> PreparedTools:
    """Web search tools kept when a plugin backs them; else dropped or refused as hosted tools.

    Raises:
        InvalidRequestError: no plugin backs it and the fleet's policy refuses hosted tools.
    """
    if not any(tool["type"] in WEB_SEARCH_TYPES for tool in declared):
        return PreparedTools(tools=declared)  # nothing to look up: most requests
    registry = declared_registry(tuple(context.settings.internal_tool_module_list))
    if registry.by_type(WEB_SEARCH) is not None:
        return PreparedTools(tools=declared)
    kept = []
    for index, tool in enumerate(declared):
        if tool["type"] not in WEB_SEARCH_TYPES:
            kept.append(tool)
        elif context.settings.unavailable_hosted_tools == "reject":
            raise unavailable_tool_error(tool["type"], f"tools.{index}")
    return PreparedTools(tools=kept)


class WebSearchCallPresenter:
    """``web_search_call`` items, updated in place with the search's answer."""

    item_type = "web_search_call"
    id_prefix = "ws"

    def started(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        item = _item(item_id, "in_progress", query="")
        return item, [_event("in_progress", item_id, output_index)]

    def arguments_delta(self, item_id: str, output_index: int, delta: str) -> list[ev.Event]:
        return []

    def finished(
        self, item_id: str, output_index: int, call: ToolCall, tool: ToolDefinition | None
    ) -> tuple[Item, list[ev.Event]]:
        query = _query(call.arguments)
        return _item(item_id, "searching", query=query), [
            _event("searching", item_id, output_index)
        ]

    def call_of(self, item: Item) -> ToolCall:
        arguments = json.dumps({"query": item["action"].get("query") or ""})
        return ToolCall(id=item["id"], name=WEB_SEARCH, arguments=arguments)

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        return item["status"] not in ("in_progress", "searching")

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        status = "failed" if result.is_error else "completed"
        item = {**output[index], "status": status, "output": result.output}
        updated = [*output[:index], item, *output[index + 1 :]]
        # The SDK knows no ``…failed`` event: a failed search ends ``completed``, its item says so.
        return updated, [_event("completed", item["id"], index), ev.output_item_done(index, item)]

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        call = self.call_of(item)
        viewed = [call_view(call)]
        if self.is_answered(item, frozenset()):
            viewed.append(result_view(call.id, str(item.get("output") or item["status"])))
        return viewed


def _item(item_id: str, status: str, *, query: str) -> Item:
    action = {"type": "search", "query": query}
    return {"id": item_id, "type": "web_search_call", "status": status, "action": action}


def _event(phase: str, item_id: str, output_index: int) -> ev.Event:
    kind = f"response.web_search_call.{phase}"
    return {"type": kind, "item_id": item_id, "output_index": output_index}


def _query(arguments: str) -> str:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    query = parsed.get("query") if isinstance(parsed, dict) else None
    return query if isinstance(query, str) else arguments


WEB_SEARCH_KIND = ToolKindSpec(
    name=ToolKind.WEB_SEARCH,
    tool_types=WEB_SEARCH_TYPES,
    presenter=WebSearchCallPresenter(),
    define=web_search_definition,
    model_tool=lambda tool: {**web_search_definition(tool).chat_tool(), "strict": None},
    prepare=prepare_web_search,
    choice_name=lambda ref: WEB_SEARCH,
)
"""Its calls run as internal tool calls (the definition's kind); this spec presents them."""
