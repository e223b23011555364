"""The example plugin: its tool, and its discovery through the entry point."""

from __future__ import annotations

import json

from antwort_example_tools import TextStats, text_stats

from app.tools.base import ToolCall
from app.tools.internal import load_registry


def test_text_stats_counts_words_and_top_words() -> None:
    stats = text_stats("to be or not to be\nthat is")
    assert stats["words"] == 8 and stats["lines"] == 2
    assert stats["top_words"] == [("to", 2), ("be", 2), ("or", 1)]


def test_tool_answers_calls_and_reports_bad_arguments() -> None:
    tool = TextStats()
    result = tool.execute(ToolCall(id="c1", name="text_stats", arguments='{"text": "a b"}'))
    assert json.loads(result.output)["words"] == 2 and not result.is_error
    bad = tool.execute(ToolCall(id="c2", name="text_stats", arguments='{"text": 3}'))
    assert bad.is_error


def test_plugin_is_discovered_through_the_entry_point() -> None:
    registry = load_registry()
    found = registry.get("text_stats")
    assert found is not None and isinstance(found, TextStats)
