"""Internal tools for the e2e suite, loaded the way operators load theirs:
``ANTWORT_INTERNAL_TOOL_MODULES=tests.support.tools``."""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.internal import Registry


@dataclass
class Sleeper:
    """Sleeps, then answers its own name (or raises, for the error tests)."""

    name: str
    seconds: float
    timeout: float | None = None
    output: str | None = None
    raises: bool = False

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            kind=ToolKind.INTERNAL,
            description=f"test tool {self.name}",
            parameters={"type": "object", "properties": {"note": {"type": "string"}}},
            timeout_seconds=self.timeout,
        )

    def initialize(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def execute(self, call: ToolCall) -> ToolResult:
        time.sleep(self.seconds)
        if self.raises:
            raise RuntimeError(f"{self.name} exploded")
        return ToolResult(call_id=call.id, output=self.output or f"{self.name} done")


def register(registry: Registry) -> None:
    registry.register(Sleeper("slow_echo", 0.8))
    registry.register(Sleeper("fast_echo", 0.05))
    registry.register(Sleeper("failing_tool", 0.0, raises=True))
    registry.register(Sleeper("hanging_tool", 30.0, timeout=1.0))
    registry.register(Sleeper("big_output", 0.0, output="x" * 5000))
    registry.register(Sleeper("long_tool", 5.0))
