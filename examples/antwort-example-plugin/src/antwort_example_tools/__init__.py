"""``text_stats``: counts of a text's characters, words, lines and most frequent words.

An example of an Antwort internal tool: a class with ``definition``, ``initialize``,
``shutdown`` and ``execute``, registered by the ``antwort.tools`` entry point in
``pyproject.toml``.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult

_WORD = re.compile(r"[\w']+")


def text_stats(text: str, *, top: int = 3) -> dict[str, object]:
    """Characters, words, lines and the ``top`` most frequent words of ``text``."""
    words = [word.lower() for word in _WORD.findall(text)]
    return {
        "characters": len(text),
        "words": len(words),
        "lines": len(text.splitlines()) or (1 if text else 0),
        "top_words": Counter(words).most_common(top),
    }


class TextStats:
    """The ``text_stats`` internal tool."""

    def definition(self) -> ToolDefinition:
        """What the model sees."""
        return ToolDefinition(
            name="text_stats",
            kind=ToolKind.INTERNAL,
            description="Count characters, words and lines of a text, and its top words.",
            parameters={
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The text."}},
                "required": ["text"],
            },
            timeout_seconds=5.0,
        )

    def initialize(self) -> None:
        """Nothing to open."""

    def shutdown(self) -> None:
        """Nothing to close."""

    def execute(self, call: ToolCall) -> ToolResult:
        """Answer one call with the stats as JSON."""
        try:
            text = call.parsed_arguments()["text"]
            if not isinstance(text, str):
                raise TypeError("'text' must be a string")
        except (ValueError, KeyError, TypeError) as exc:
            return ToolResult(call_id=call.id, output=f"Error: {exc}", is_error=True)
        return ToolResult(call_id=call.id, output=json.dumps(text_stats(text)))
