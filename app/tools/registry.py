"""Every tool kind this build ships, registered here and nowhere else.

A kind is one :class:`~app.tools.kinds.ToolKindSpec`; adding one (issue 17's client-executed
``custom``, ``apply_patch``, ``shell`` …) is writing its spec and listing it below. The order
is the order in which kinds check a new request's tools and run their hooks.
"""

from __future__ import annotations

from app.tools.client_calls import CLIENT_CALL_KINDS
from app.tools.custom import CUSTOM_KIND
from app.tools.function import FUNCTION_KIND
from app.tools.hosted import HOSTED_KIND
from app.tools.internal.kind import INTERNAL_KIND
from app.tools.kinds import ToolKinds
from app.tools.mcp.kind import MCP_KIND
from app.tools.namespace import NAMESPACE_KIND
from app.tools.sandbox.kind import SANDBOX_KIND
from app.tools.tool_search import HOSTED_TOOL_SEARCH_KIND, TOOL_SEARCH_KIND
from app.tools.web_search import WEB_SEARCH_KIND

BUILTIN_KINDS = (
    FUNCTION_KIND,
    MCP_KIND,
    SANDBOX_KIND,
    INTERNAL_KIND,
    CUSTOM_KIND,
    NAMESPACE_KIND,
    *CLIENT_CALL_KINDS,
    TOOL_SEARCH_KIND,
    HOSTED_TOOL_SEARCH_KIND,
    WEB_SEARCH_KIND,
    HOSTED_KIND,
)

KINDS = ToolKinds(BUILTIN_KINDS)
"""The engine's tool kinds (``RunDeps.kinds``, ``ToolDeps.kinds`` and the gateway default to it)."""
