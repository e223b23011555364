"""Hosted tools the fleet cannot run (``file_search``, ``image_generation`` …): dropped or refused.

OpenAI runs these on its side. Here, by ``ANTWORT_UNAVAILABLE_HOSTED_TOOLS``: ``drop`` (the
default) leaves them out (the model is never offered them, the response's ``tools`` does not
list them), so a client that always sends them (Codex CLI sends ``web_search``) works;
``reject`` refuses the request.

A history made at OpenAI may hold their calls (``file_search_call``, ``image_generation_call``,
sent back as input): the model is shown each as a call and its result, in words.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.errors import InvalidRequestError
from app.protocol.client_tools import HOSTED_TOOL_TYPES, WEB_SEARCH_TYPES, tool_tag
from app.tools.base import ToolCall, ToolKind
from app.tools.kinds import PreparedTools, RequestContext, ToolKindSpec
from app.tools.presenters import call_view, result_view

Item = dict[str, Any]

HOSTED = ToolKind.HOSTED
"""The kind's name."""

UNAVAILABLE_TYPES = tuple(
    t for t in HOSTED_TOOL_TYPES if t not in WEB_SEARCH_TYPES and t != "tool_search"
)
"""The hosted tools of this kind (web search is a kind of its own: a plugin may back it; the
fleet runs ``tool_search`` itself: app/tools/tool_search.py)."""


def unavailable_tool_error(tool_type: str, param: str) -> InvalidRequestError:
    """The 400 for a hosted tool this fleet does not run."""
    return InvalidRequestError(
        f"The hosted tool '{tool_type}' is not available on this server.",
        param=param,
        code="unsupported_tool",
    )


def check_hosted_tools(context: RequestContext, declared: list[Item]) -> PreparedTools:
    """The declared tools without the hosted ones (``drop``), or a 400 for one (``reject``).

    Raises:
        InvalidRequestError: a hosted tool, when the fleet's policy refuses them.
    """
    kept = []
    for index, tool in enumerate(declared):
        if tool["type"] not in UNAVAILABLE_TYPES or tool_tag(tool) != "hosted":
            kept.append(tool)  # not hosted, or a kind of the same type (the client's search)
        elif context.settings.unavailable_hosted_tools == "reject":
            raise unavailable_tool_error(tool["type"], f"tools.{index}")
    return PreparedTools(tools=kept)


def _not_offered(tool: Item) -> None:
    return None


def view_file_search(item: Item, items: Sequence[Item]) -> list[Item]:
    """A file search as a ``file_search`` call with its queries, and the passages it found."""
    arguments = json.dumps({"queries": item["queries"]}, ensure_ascii=False)
    call = call_view(ToolCall(id=item["id"], name="file_search", arguments=arguments))
    if item["status"] != "completed":
        ended = f"The file search did not complete (status: {item['status']})."
        return [call, result_view(item["id"], ended)]
    found = [_passage(result) for result in item.get("results") or ()]
    return [call, result_view(item["id"], "\n\n".join(found) or "No results.")]


def _passage(result: Item) -> str:
    source = result.get("filename") or result.get("file_id") or "a file"
    return f"From {source}:\n{result.get('text') or ''}".rstrip()


def view_image_generation(item: Item, items: Sequence[Item]) -> list[Item]:
    """An image generation as an ``image_generation`` call, and what it made (in words)."""
    prompt = {"prompt": item["revised_prompt"]} if item.get("revised_prompt") else {}
    arguments = json.dumps(prompt, ensure_ascii=False)
    call = call_view(ToolCall(id=item["id"], name="image_generation", arguments=arguments))
    if item["status"] == "completed" and item.get("result"):
        details = ", ".join(filter(None, [item.get("size"), item.get("output_format")]))
        made = f"An image was generated ({details})." if details else "An image was generated."
        return [call, result_view(item["id"], made)]
    error = (item.get("error") or {}).get("message")
    ended = f"No image was generated (status: {item['status']})" + (f": {error}" if error else ".")
    return [call, result_view(item["id"], ended)]


HOSTED_KIND = ToolKindSpec(
    name=HOSTED,
    tool_types=UNAVAILABLE_TYPES,
    model_tool=_not_offered,
    prepare=check_hosted_tools,
    views={"file_search_call": view_file_search, "image_generation_call": view_image_generation},
)
"""No definitions and no queue: the model never sees these tools, so never calls them."""
# ``drop`` leaves them out of the response's ``tools`` too: the echo says what the model had.
