"""Internal tools for the e2e suite, loaded the way operators load theirs:
``ANTWORT_INTERNAL_TOOL_MODULES=tests.support.tools``."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import redis

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


@dataclass
class Counted:
    """Sleeps like :class:`Sleeper`, counting in Redis how often each call started and finished.

    The counters are ``<ANTWORT_KEY_PREFIX>test:runs:<call_id>:started`` (and ``:finished``);
    without ``ANTWORT_REDIS_URL`` nothing is counted.
    """

    name: str
    seconds: float
    timeout: float | None = None
    client: redis.Redis | None = field(default=None, repr=False)

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name,
            kind=ToolKind.INTERNAL,
            description=f"counted test tool {self.name}",
            timeout_seconds=self.timeout,
        )

    def initialize(self) -> None:
        url = os.environ.get("ANTWORT_REDIS_URL")
        self.client = redis.Redis.from_url(url) if url else None

    def shutdown(self) -> None:
        if self.client is not None:
            self.client.close()

    def _count(self, call: ToolCall, what: str) -> None:
        if self.client is not None:
            prefix = os.environ.get("ANTWORT_KEY_PREFIX", "antwort:")
            self.client.incr(f"{prefix}test:runs:{call.id}:{what}")

    def execute(self, call: ToolCall) -> ToolResult:
        self._count(call, "started")
        time.sleep(self.seconds)
        self._count(call, "finished")
        return ToolResult(call_id=call.id, output=f"{self.name} done")


@dataclass
class Gated(Counted):
    """Counted like :class:`Counted`, but runs until the test opens its gate, not for a time.

    The gate is the key ``<ANTWORT_KEY_PREFIX>test:gate:<call_id>``; the call ends when it
    exists, or after ``seconds`` without it. A test that must act while the call runs (cancel
    it, say) does so between seeing it start and opening the gate, however slow the machine.
    """

    def execute(self, call: ToolCall) -> ToolResult:
        self._count(call, "started")
        deadline = time.monotonic() + self.seconds
        prefix = os.environ.get("ANTWORT_KEY_PREFIX", "antwort:")
        while self.client is not None and time.monotonic() < deadline:
            if self.client.exists(f"{prefix}test:gate:{call.id}"):
                break
            time.sleep(0.02)
        self._count(call, "finished")
        return ToolResult(call_id=call.id, output=f"{self.name} done")


class Shout:
    """Declares the extension tool type ``acme:shout``: answers its ``text`` upper-cased."""

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name="shout",
            kind=ToolKind.INTERNAL,
            description="Shout a text.",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
            options={"tool_type": "acme:shout"},
        )

    def initialize(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def execute(self, call: ToolCall) -> ToolResult:
        return ToolResult(call_id=call.id, output=str(call.parsed_arguments().get("text")).upper())


class GilHolder(Sleeper):
    """Adds up a long range in one C call: it never releases the GIL while it runs."""

    def execute(self, call: ToolCall) -> ToolResult:
        return ToolResult(call_id=call.id, output=str(sum(range(10**12))))


def register(registry: Registry) -> None:
    registry.register(Shout())
    registry.register(Sleeper("slow_echo", 0.8))
    registry.register(Sleeper("fast_echo", 0.05))
    registry.register(Sleeper("failing_tool", 0.0, raises=True))
    registry.register(Sleeper("hanging_tool", 30.0, timeout=1.0))
    registry.register(Sleeper("big_output", 0.0, output="x" * 5000))
    registry.register(Sleeper("long_tool", 5.0))
    registry.register(Counted("counted_slow", 3.0))  # the default deadline (a minute)
    registry.register(Gated("counted_gated", 50.0))  # within the default deadline (a minute)
    registry.register(GilHolder("gil_holder", 0.0, timeout=1.0))
