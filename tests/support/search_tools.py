"""An operator's web search plugin for the tests (``ANTWORT_INTERNAL_TOOL_MODULES``)."""

from __future__ import annotations

from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.internal import Registry


class Searcher:
    """Backs ``web_search`` (declares the tool type); finds one page per query."""

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name="test_search",
            kind=ToolKind.INTERNAL,
            description="Search a made-up web.",
            parameters={"type": "object", "properties": {"query": {"type": "string"}}},
            options={"tool_type": "web_search"},
        )

    def initialize(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def execute(self, call: ToolCall) -> ToolResult:
        query = str(call.parsed_arguments().get("query"))
        return ToolResult(
            call_id=call.id, output=f"1 page for {query}: https://example.com/{query}"
        )


def register(registry: Registry) -> None:
    registry.register(Searcher())
