"""The tool vocabulary shared by the loop and every executor.

``ToolCall``/``ToolResult`` are the loop's view of every kind's call items; the presenters of
:mod:`app.tools.presenters` are the one boundary between the two.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class ToolKind(StrEnum):
    """The names of the kinds this build ships (``ToolDefinition.kind``).

    A kind is what its spec in :mod:`app.tools.registry` says (who executes it, its queue, its
    presenter); this enum only names the built-in ones. A new kind needs no member here.
    """

    FUNCTION = "function"
    """The client: the response pauses with the call."""
    MCP = "mcp"
    SANDBOX = "sandbox"
    INTERNAL = "internal"
    CUSTOM = "custom"
    """The client, with a free-form string input."""
    NAMESPACE = "namespace"
    """A group of function and custom tools (their definitions are of those kinds)."""
    HOSTED = "hosted"
    """OpenAI's hosted tools the fleet cannot run: never offered to the model."""
    APPLY_PATCH = "apply_patch"
    SHELL = "shell"
    LOCAL_SHELL = "local_shell"
    COMPUTER = "computer"
    """The client's fixed tools (``app/tools/client_calls.py``)."""
    TOOL_SEARCH = "tool_search"
    """The client's search over tools it holds back (``execution: "client"``)."""
    HOSTED_TOOL_SEARCH = "hosted_tool_search"
    """The fleet's search over the request's deferred tools (OpenAI's hosted ``tool_search``)."""
    WEB_SEARCH = "web_search"
    """OpenAI's web search, run by an operator's internal plugin (presents its calls)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class McpToolRef:
    """Where an MCP tool lives (``ToolDefinition.mcp``)."""

    server_label: str
    tool_name: str
    """The tool's name on its server (the model may know it by another)."""
    server_url: str | None = None
    """None: a server of the fleet's configuration."""
    sealed_headers: str | None = field(default=None, repr=False)
    """The request's ``headers``/``authorization``, sealed (``app.tools.mcp.security``)."""
    needs_approval: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDefinition:
    """A tool the model may call."""

    name: str
    kind: str
    """The name of the tool's kind (a :class:`ToolKind` for the built-in ones)."""
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    timeout_seconds: float | None = None
    """Overrides the fleet's default per-call timeout."""
    mcp: McpToolRef | None = None
    """Set for MCP tools: which server and tool."""
    options: dict[str, Any] = field(default_factory=dict)
    """Kind-specific settings from the request (a code interpreter's ``container_id``)."""

    def chat_tool(self) -> dict[str, Any]:
        """The definition as the model server sees it."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One call the model made."""

    id: str
    """The ``call_id``."""
    name: str
    arguments: str
    """JSON text, as the model wrote it."""
    idempotency_key: str = ""
    """The same for every run of this call, and only of it (:func:`idempotency_key`): a tool
    that must not act twice can look it up, for a call may run again after a worker died (the
    README's "When a tool can run twice"). Empty outside a tool worker."""

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as an object; ``ValueError`` when they are not one."""
        value = json.loads(self.arguments or "{}")
        if not isinstance(value, dict):
            raise ValueError("arguments must be a JSON object")
        return value


def idempotency_key(response_id: str, call_id: str) -> str:
    """The key of every run of a response's call (internal tools: ``ToolCall``; MCP: ``_meta``)."""
    return f"{response_id}:{call_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """What a call returned; a failure is data the model sees (``is_error``)."""

    call_id: str
    output: str
    """What the model reads."""
    is_error: bool = False
    data: dict[str, Any] | None = None
    """Kind-specific detail for the call's item (an MCP call's content parts, a sandbox's
    outputs); the model never sees it."""

    def to_json(self) -> str:
        """Serialised for the store."""
        return json.dumps(
            {
                "call_id": self.call_id,
                "output": self.output,
                "is_error": self.is_error,
                "data": self.data,
            }
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> ToolResult:
        """Inverse of :meth:`to_json`."""
        data = json.loads(raw)
        return cls(
            call_id=data["call_id"],
            output=data["output"],
            is_error=bool(data["is_error"]),
            data=data.get("data"),
        )


class ToolExecutor(Protocol):
    """Executes the calls of one kind."""

    @property
    def kind(self) -> str:
        """The name of the kind whose calls this executor runs."""

    def can_execute(self, tool: ToolDefinition) -> bool:
        """Whether this executor runs ``tool``."""

    def execute(self, call: ToolCall, tool: ToolDefinition) -> ToolResult:
        """Run one call; errors come back as ``is_error`` results, never as exceptions."""


@runtime_checkable
class SubmittingExecutor(ToolExecutor, Protocol):
    """An executor that starts a call without blocking (its own event loop, say).

    The task then waits on the future itself instead of handing the call to a runner thread,
    and cancels it when the response stops or the deadline passes.
    """

    def submit(self, call: ToolCall, tool: ToolDefinition) -> Future[ToolResult]:
        """Start one call; the future's result is what :meth:`execute` would return."""


class ExecutorRegistry:
    """The executors of one worker process, by kind."""

    def __init__(self, executors: list[ToolExecutor] | None = None):
        self._executors: dict[str, ToolExecutor] = {}
        for executor in executors or []:
            self.register(executor)

    def register(self, executor: ToolExecutor) -> None:
        """Add (or replace) the executor of a kind."""
        self._executors[executor.kind] = executor

    def of_kind(self, kind: str) -> ToolExecutor | None:
        """The executor of ``kind``, if this process has one."""
        return self._executors.get(kind)

    def for_tool(self, tool: ToolDefinition) -> ToolExecutor | None:
        """The executor that runs ``tool``, if this process has one."""
        executor = self._executors.get(tool.kind)
        return executor if executor is not None and executor.can_execute(tool) else None


def cap_output(output: str, limit: int) -> str:
    """Cut an over-long output, saying so in a marker the model can read."""
    if len(output) <= limit:
        return output
    return f"{output[:limit]}\n[output truncated: {limit} of {len(output)} characters shown]"
