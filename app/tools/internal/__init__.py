"""Internal tools: in-worker plugins, discovered from the ``antwort.tools`` entry-point group.

A plugin package exposes an entry point whose object is an :class:`InternalTool` class (or a
zero-argument factory returning an instance)::

    [project.entry-points."antwort.tools"]
    weather = "my_pkg.weather:WeatherTool"

Operators may also name modules in ``ANTWORT_INTERNAL_TOOL_MODULES``; each module's
``register(registry)`` function adds its tools.

A plugin may declare a tool type of the specs' extension point, ``"provider:tool_type"``, as
``definition().options["tool_type"]``: a request's ``{"type": "acme:weather", …}`` is then that
plugin (:meth:`Registry.by_type`).
"""

from __future__ import annotations

import builtins
import importlib
import logging
from importlib.metadata import entry_points
from typing import Any, Protocol

from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "antwort.tools"


class InternalTool(Protocol):
    """A tool that runs inside a ``tools.internal`` worker."""

    def definition(self) -> ToolDefinition:
        """Name, description, JSON schema, timeout."""

    def initialize(self) -> None:
        """Called once on worker start (open clients, load data)."""

    def shutdown(self) -> None:
        """Called once on worker stop."""

    def execute(self, call: ToolCall) -> ToolResult:
        """Run one call."""


class Registry:
    """The internal tools of one process, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, InternalTool] = {}

    def register(self, tool: InternalTool) -> None:
        """Add a tool (a later one with the same name replaces it)."""
        self._tools[tool.definition().name] = tool

    def get(self, name: str) -> InternalTool | None:
        """The tool called ``name``."""
        return self._tools.get(name)

    def by_type(self, tool_type: str) -> InternalTool | None:
        """The tool that declares the tool type ``tool_type`` (``options["tool_type"]``)."""
        for tool in self._tools.values():
            if tool.definition().options.get("tool_type") == tool_type:
                return tool
        return None

    def list(self) -> builtins.list[ToolDefinition]:
        """Every registered tool's definition."""
        return [tool.definition() for tool in self._tools.values()]

    def initialize_all(self) -> builtins.list[str]:
        """Initialize every tool; one that fails is reported and left out."""
        failed: builtins.list[str] = []
        for name, tool in list(self._tools.items()):
            try:
                tool.initialize()
            except Exception:  # a broken plugin must not stop the worker
                logger.exception("internal tool %s failed to initialize; left out", name)
                del self._tools[name]
                failed.append(name)
        return failed

    def shutdown_all(self) -> None:
        """Shut every tool down (worker stop)."""
        for name, tool in self._tools.items():
            try:
                tool.shutdown()
            except Exception:  # shutting down the rest matters more
                logger.exception("internal tool %s failed to shut down", name)


def load_registry(modules: list[str] | None = None) -> Registry:
    """Built-ins, entry-point plugins, then the named modules' tools."""
    from app.tools.internal.builtins import register_builtins

    registry = Registry()
    register_builtins(registry)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            registry.register(_instantiate(entry.load()))
        except Exception:  # one broken plugin must not hide the others
            logger.exception("could not load internal tool %s", entry.name)
    for module in modules or []:
        importlib.import_module(module).register(registry)
    return registry


def _instantiate(obj: Any) -> InternalTool:
    tool = obj() if callable(obj) else obj
    if not all(hasattr(tool, name) for name in ("definition", "initialize", "shutdown", "execute")):
        raise TypeError(f"{obj!r} is not an InternalTool")
    return tool  # type: ignore[no-any-return]


class InternalExecutor:
    """Runs internal tool calls (the ``internal`` kind's executor)."""

    kind = ToolKind.INTERNAL

    def __init__(self, registry: Registry):
        self.registry = registry

    def can_execute(self, tool: ToolDefinition) -> bool:
        """Registered here."""
        return tool.kind == ToolKind.INTERNAL and self._find(tool) is not None

    def execute(self, call: ToolCall, tool: ToolDefinition) -> ToolResult:
        """Run the call (deadlines are enforced by the caller)."""
        found = self._find(tool)
        if found is None:
            return ToolResult(
                call_id=call.id, output=f"Unknown internal tool '{tool.name}'.", is_error=True
            )
        return found.execute(call)

    def _find(self, tool: ToolDefinition) -> InternalTool | None:
        """The tool by name, else the one declaring the definition's tool type (web search)."""
        tool_type = tool.options.get("tool_type")
        found = self.registry.get(tool.name)
        return found if found is not None or not tool_type else self.registry.by_type(tool_type)
