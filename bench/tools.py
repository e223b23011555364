"""Internal tools of the agentic benchmarks: ``ANTWORT_INTERNAL_TOOL_MODULES=bench.tools``.

``instant`` answers at once; ``par_1`` … ``par_8`` wait 200 ms and ``io_1`` … ``io_8`` wait
500 ms (I/O-bound: they sleep, as a tool waiting on a network call does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.internal import Registry

PARALLEL = tuple(f"par_{i}" for i in range(1, 9))
IO_BOUND = tuple(f"io_{i}" for i in range(1, 9))
PARALLEL_SECONDS = 0.2
IO_SECONDS = 0.5


@dataclass(frozen=True)
class Wait:
    """Waits ``seconds``, then answers ``ok``."""

    name: str
    seconds: float

    def definition(self) -> ToolDefinition:
        return ToolDefinition(name=self.name, kind=ToolKind.INTERNAL, description="benchmark tool")

    def initialize(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def execute(self, call: ToolCall) -> ToolResult:
        if self.seconds:
            time.sleep(self.seconds)
        return ToolResult(call_id=call.id, output="ok")


def register(registry: Registry) -> None:
    registry.register(Wait("instant", 0.0))
    for name in PARALLEL:
        registry.register(Wait(name, PARALLEL_SECONDS))
    for name in IO_BOUND:
        registry.register(Wait(name, IO_SECONDS))
