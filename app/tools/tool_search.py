"""``tool_search``: the client's search over tools it holds back, or the fleet's over deferred ones.

The client's (``execution: "client"``): Codex CLI declares it with its own ``parameters`` and
defers its MCP tools behind it. The model is offered it as a function of the client's schema;
its call becomes a ``tool_search_call`` item (``arguments``: an object) and the response pauses
for the client, which answers with a ``tool_search_output`` listing the tools it loaded
(function, custom and namespace tools).

The fleet's (OpenAI's hosted one: no ``execution``, or ``"server"``): the request's own tools
marked ``defer_loading: true`` (a namespace's members, top-level functions and custom tools)
are held back. The model is offered a ``tool_search`` function instead, whose description names
what it can load (each namespace, or deferred tool, with its description) and whose ``paths``
pick them. Its call is answered at once, in the model's step (:attr:`ToolKindSpec.answer`): a
``tool_search_call`` and a ``tool_search_output`` item (``execution: "server"``, no call id,
as OpenAI's), the output listing the tools found.

Either way, while an output is in the context the model is offered the tools it loaded too (a
namespace's as ``<namespace>__<name>``), and their calls are the client's, as any function's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.protocol import events as ev
from app.protocol.client_tools import is_client_tool_search
from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.client_calls import CallShape, FixedCallPresenter, arguments_object, kind_of
from app.tools.custom import custom_definition
from app.tools.function import function_definition
from app.tools.kinds import ToolKindSpec
from app.tools.namespace import namespace_tools
from app.tools.presenters import call_view, namespaced, result_item_id, result_view

Item = dict[str, Any]

TOOL_SEARCH = ToolKind.TOOL_SEARCH
"""The client's kind's name, also the tool's name for the model (the fleet's kind's too)."""
HOSTED_SEARCH = ToolKind.HOSTED_TOOL_SEARCH
SERVER = "server"
"""The ``execution`` of the fleet's search items."""

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


def model_names(tools: Iterable[Item]) -> list[str]:
    """The names the model knows loaded ``tools`` by (each member of a namespace)."""
    names = []
    for tool in tools:
        if tool["type"] == "namespace":
            names += [namespaced(tool["name"], member["name"]) for member in tool["tools"]]
        else:
            names.append(tool["name"])
    return names


def loaded_text(item: Item) -> str:
    """What the model reads of a ``tool_search_output``: the names it may call now."""
    names = model_names(item["tools"])
    if not names:
        return "No tools found."
    return json.dumps({"loaded_tools": names})


def _is_server(item: Item) -> bool:
    return item.get("execution") == SERVER


class ToolSearchPresenter(FixedCallPresenter):
    """``tool_search_call`` items of both kinds (one item type, told apart by ``execution``).

    The fleet's has no call id, as OpenAI's: its call is known by its item's id, it is answered
    in the step that made it (so never waits), and its ``tool_search_output`` follows it. The
    model sees the two as one call and its result.
    """

    def call_item(self, item_id: str, call: ToolCall, tool: ToolDefinition | None) -> Item:
        if tool is None or tool.kind != HOSTED_SEARCH:
            return super().call_item(item_id, call, tool)
        return {
            "id": item_id,
            "type": "tool_search_call",
            "status": "completed",
            "call_id": None,
            "execution": SERVER,
            "arguments": arguments_object(call.arguments),
        }

    def call_of(self, item: Item) -> ToolCall:
        if not _is_server(item):
            return super().call_of(item)
        arguments = json.dumps(item.get("arguments") or {})
        return ToolCall(id=item.get("id") or TOOL_SEARCH, name=TOOL_SEARCH, arguments=arguments)

    def is_answered(self, item: Item, answered: frozenset[str]) -> bool:
        return _is_server(item) or super().is_answered(item, answered)

    def answered(
        self, response_id: str, output: Sequence[Item], index: int, result: ToolResult
    ) -> tuple[list[Item], list[ev.Event]]:
        if not _is_server(output[index]):
            return super().answered(response_id, output, index, result)
        item = {
            "id": result_item_id(response_id, result.call_id, prefix="tso"),
            "type": "tool_search_output",
            "status": "completed",
            "call_id": None,
            "execution": SERVER,
            "tools": (result.data or {}).get("tools", []),
        }
        at = len(output)
        return [*output, item], [ev.output_item_added(at, item), ev.output_item_done(at, item)]

    def model_view(self, item: Item, output: Sequence[Item]) -> list[Item]:
        if not _is_server(item):
            return super().model_view(item, output)
        call = self.call_of(item)
        found = _output_after(item, output)
        said = loaded_text(found) if found is not None else "The search found nothing."
        return [call_view(call), result_view(call.id, said)]


def _output_after(call: Item, items: Sequence[Item]) -> Item | None:
    """The server's ``tool_search_output`` that answers ``call`` (the first one after it)."""
    seen = False
    for item in items:
        if item is call:
            seen = True
        elif seen and item.get("type") == "tool_search_output" and _is_server(item):
            return item
    return None


def _view_output(item: Item, items: Sequence[Item]) -> list[Item]:
    """A client's output as its call's result; the server's is shown with its call."""
    if _is_server(item):
        return []
    return [result_view(item["call_id"], loaded_text(item))]


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
TOOL_SEARCH_PRESENTER = ToolSearchPresenter(TOOL_SEARCH_CALL)

TOOL_SEARCH_KIND = replace(
    kind_of(TOOL_SEARCH_CALL, TOOL_SEARCH_PRESENTER),
    accepts=is_client_tool_search,
    define=tool_search_definition,
    model_tool=lambda tool: {**tool_search_definition(tool).chat_tool(), "strict": None},
    listed_tools=searched_tools,
    views={"tool_search_output": _view_output},
)
"""Client-executed: the response pauses on a ``tool_search_call``. Listed before the fleet's
kind, which takes the ``tool_search`` tools this one does not accept."""


# -- the fleet's search (OpenAI's hosted one) ---------------------------------------------------

_HOSTED_DESCRIPTION = (
    "Load tools that are held back until needed; once loaded, they can be called. "
    "Name the paths of the tools to load (all that the task may need at once)."
)


def searchable(tools: Sequence[Item]) -> dict[str, Item]:
    """What the fleet's search can load, by path, as its output lists it.

    Each namespace with deferred members (the namespace with those alone), and each deferred
    top-level function or custom tool.
    """
    found: dict[str, Item] = {}
    for tool in tools:
        kind = tool.get("type")
        if kind == "namespace":
            members = [member for member in tool["tools"] if member.get("defer_loading")]
            if members:
                found[tool["name"]] = {**tool, "tools": members}
        elif kind in ("function", "custom") and tool.get("defer_loading"):
            found[tool["name"]] = tool
    return found


def hosted_search_definition(tool: Item | None = None) -> ToolDefinition:
    """The fleet's ``tool_search`` (what it can load is named where it is offered)."""
    return _search_definition({})


def _search_definition(found: Mapping[str, Item]) -> ToolDefinition:
    """The fleet's search as the model is offered it: the paths of ``found``, described."""
    paths = [f"- {path}: {tool.get('description') or ''}" for path, tool in found.items()]
    listed = "\n".join(path.rstrip(": ") for path in paths)
    return ToolDefinition(
        name=TOOL_SEARCH,
        kind=HOSTED_SEARCH,
        description=f"{_HOSTED_DESCRIPTION}\nPaths:\n{listed}" if found else _HOSTED_DESCRIPTION,
        parameters={
            "type": "object",
            "properties": {
                "paths": {
                    "type": "array",
                    "items": {"type": "string", **({"enum": list(found)} if found else {})},
                },
            },
            "required": ["paths"],
            "additionalProperties": False,
        },
    )


def offer_search(
    declared: Sequence[Item], items: Sequence[Item], offered: list[Item]
) -> list[Item]:
    """The tools offered, without the deferred ones no search loaded yet, and the search.

    The search's description names each path with its description (what OpenAI shows the model
    of a deferred tool before it is loaded); its ``paths`` take those names. With nothing to
    load, the search is not offered.
    """
    found = searchable(declared)
    if not found:
        return offered
    loaded = [
        tool
        for item in items
        if item.get("type") == "tool_search_output"
        for tool in item.get("tools", ())
    ]
    held = set(model_names(found.values())) - set(model_names(loaded))
    kept = [tool for tool in offered if tool.get("name") not in held]
    return [*kept, {**_search_definition(found).chat_tool(), "strict": None}]


def answer_search(call: ToolCall, declared: Sequence[Item]) -> ToolResult:
    """The fleet's search: the tools at the paths the model named (unknown ones: none)."""
    found = searchable(declared)
    paths = arguments_object(call.arguments).get("paths")
    if isinstance(paths, str):
        paths = [paths]
    named = dict.fromkeys(p for p in paths if isinstance(p, str)) if isinstance(paths, list) else {}
    tools = [found[path] for path in named if path in found]
    return ToolResult(call_id=call.id, output=loaded_text({"tools": tools}), data={"tools": tools})


HOSTED_TOOL_SEARCH_KIND = ToolKindSpec(
    name=HOSTED_SEARCH,
    tool_types=("tool_search",),
    presenter=TOOL_SEARCH_PRESENTER,
    define=hosted_search_definition,
    model_tool=lambda tool: None,  # offered by ``offer``, with what it can load
    choice_name=lambda ref: TOOL_SEARCH,
    offer=offer_search,
    answer=answer_search,
)
"""Answered by the fleet at once: no queue, no pause. Takes the ``tool_search`` tools the
client's kind does not (no ``execution``, or ``"server"``)."""
