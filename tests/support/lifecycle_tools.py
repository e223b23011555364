"""Internal tools that leave a file behind at each step of their lifecycle.

``ANTWORT_INTERNAL_TOOL_MODULES=tests.support.lifecycle_tools`` with ``LIFECYCLE_MARKER_DIR``
set: ``<name>.init.<pid>`` when initialized, ``<name>.shutdown.<pid>`` when shut down.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.internal import Registry


@dataclass
class Marked:
    """Marks its lifecycle; ``fails``: its initialize raises (after marking the attempt)."""

    name: str
    fails: bool = False

    def _mark(self, step: str) -> None:
        directory = Path(os.environ["LIFECYCLE_MARKER_DIR"])
        (directory / f"{self.name}.{step}.{os.getpid()}").write_text(step)

    def definition(self) -> ToolDefinition:
        return ToolDefinition(name=self.name, kind=ToolKind.INTERNAL, description="lifecycle")

    def initialize(self) -> None:
        self._mark("init")
        if self.fails:
            raise RuntimeError(f"{self.name} cannot start")

    def shutdown(self) -> None:
        self._mark("shutdown")

    def execute(self, call: ToolCall) -> ToolResult:
        return ToolResult(call_id=call.id, output=self.name)


def register(registry: Registry) -> None:
    registry.register(Marked("lifecycle_ok"))
    registry.register(Marked("lifecycle_broken", fails=True))
