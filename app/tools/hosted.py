"""Hosted tools the fleet cannot run (``web_search``, ``file_search`` …): dropped or refused.

OpenAI runs these on its side. Here, by ``ANTWORT_UNAVAILABLE_HOSTED_TOOLS``: ``drop`` (the
default) leaves them out (the model is never offered them, the response's ``tools`` does not
list them), so a client that always sends them (Codex CLI sends ``web_search``) works;
``reject`` refuses the request.
"""

from __future__ import annotations

from typing import Any

from app.errors import InvalidRequestError
from app.protocol.client_tools import HOSTED_TOOL_TYPES, WEB_SEARCH_TYPES, tool_tag
from app.tools.base import ToolKind
from app.tools.kinds import PreparedTools, RequestContext, ToolKindSpec

Item = dict[str, Any]

HOSTED = ToolKind.HOSTED
"""The kind's name."""

UNAVAILABLE_TYPES = tuple(t for t in HOSTED_TOOL_TYPES if t not in WEB_SEARCH_TYPES)
"""The hosted tools of this kind (web search is a kind of its own: a plugin may back it)."""


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


HOSTED_KIND = ToolKindSpec(
    name=HOSTED,
    tool_types=UNAVAILABLE_TYPES,
    model_tool=_not_offered,
    prepare=check_hosted_tools,
)
"""No definitions and no queue: the model never sees these tools, so never calls them."""
# ``drop`` leaves them out of the response's ``tools`` too: the echo says what the model had.
