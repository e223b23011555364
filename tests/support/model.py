"""A scripted model for tests of the loop without a model server: one script per model call."""

from __future__ import annotations

from collections.abc import Iterator

from app.protocol.response import Usage
from app.providers.chunks import Chunk, Finish, TextDelta, ToolCallDelta, UsageReport
from app.providers.translate import ModelRequest

USAGE = Usage(input_tokens=10, output_tokens=2, total_tokens=12)


def calls(*calls: tuple[str, str, str]) -> list[Chunk]:
    """A turn that calls tools: ``(call_id, name, arguments)`` each, arguments in two pieces."""
    chunks: list[Chunk] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        half = len(arguments) // 2
        chunks.append(
            ToolCallDelta(index=index, call_id=call_id, name=name, arguments=arguments[:half])
        )
        chunks.append(ToolCallDelta(index=index, arguments=arguments[half:]))
    return [*chunks, Finish(reason="tool_calls"), UsageReport(usage=USAGE)]


def text(answer: str) -> list[Chunk]:
    """A turn that answers ``answer``."""
    return [TextDelta(text=answer), Finish(reason="stop"), UsageReport(usage=USAGE)]


class ScriptedModel:
    """Answers the n-th model call with the n-th script; the last one repeats."""

    def __init__(self, *turns: list[Chunk]):
        self.turns = list(turns)
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        self.requests.append(request)
        yield from self.turns[min(len(self.requests), len(self.turns)) - 1]
