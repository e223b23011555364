"""What a provider yields while a model answers: a closed union of chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from app.protocol.response import Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of the answer's text, with its tokens' log probabilities when they were asked for.

    ``logprobs``: Chat Completions' ``logprobs.content`` entries of the piece's tokens, as the
    model server sent them (``token``, ``logprob``, ``bytes``, ``top_logprobs``).
    """

    type: Literal["text"] = "text"
    text: str
    logprobs: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta:
    """A piece of reasoning text (``reasoning_content`` of vLLM's reasoning parsers)."""

    type: Literal["reasoning"] = "reasoning"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """A fragment of a tool call; the first fragment of an ``index`` carries ``id`` and name."""

    type: Literal["tool_call"] = "tool_call"
    index: int
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""
    title: str | None = None
    """A human-readable step title (JSON tool protocol); None: derived from name and arguments."""


MODEL_CANCELLED = "cancelled"
"""``Finish.reason`` when the model gave up on the task (a JSON protocol ``cancel``): the run
ends ``cancelled``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """The model stopped: ``stop``, ``tool_calls``, ``length``, ``content_filter``, ``cancelled``.

    ``cancelled`` (:data:`MODEL_CANCELLED`): the model gave up on the task.
    """

    type: Literal["finish"] = "finish"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageReport:
    """Token counts of the call (the last chunk, with ``include_usage``)."""

    type: Literal["usage"] = "usage"
    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanUpdate:
    """The model's plan: the titles of the steps it means to take (JSON tool protocol)."""

    type: Literal["plan"] = "plan"
    steps: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    """What the model wrote in this turn, verbatim, with the notes it was answered with.

    The JSON tool protocol's directives (its plan, interim replies, the final directive) and the
    protocol's go-aheads between them, as chat messages: later turns replay them as they were.
    """

    type: Literal["exchange"] = "exchange"
    messages: tuple[dict[str, Any], ...]


Chunk = TextDelta | ReasoningDelta | ToolCallDelta | Finish | UsageReport | PlanUpdate | Exchange
