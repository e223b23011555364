"""The response object: the spec's 31 fields and the options OpenAI echoes, always present."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ResponseStatus(StrEnum):
    """Where a response is in its life; ``app.store.status`` holds the allowed moves."""

    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUIRES_ACTION = "requires_action"


TERMINAL_STATUSES = frozenset(
    {
        ResponseStatus.COMPLETED,
        ResponseStatus.INCOMPLETE,
        ResponseStatus.FAILED,
        ResponseStatus.CANCELLED,
        ResponseStatus.REQUIRES_ACTION,
    }
)
ACTIVE_STATUSES = frozenset({ResponseStatus.QUEUED, ResponseStatus.IN_PROGRESS})


class InputTokensDetails(BaseModel):
    """``usage.input_tokens_details``."""

    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    """``usage.output_tokens_details``."""

    reasoning_tokens: int = 0


class Usage(BaseModel):
    """Token counts summed over every turn of the response."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)

    def plus(self, other: Usage) -> Usage:
        """The sum of two usages."""
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            input_tokens_details=InputTokensDetails(
                cached_tokens=self.input_tokens_details.cached_tokens
                + other.input_tokens_details.cached_tokens
            ),
            output_tokens_details=OutputTokensDetails(
                reasoning_tokens=self.output_tokens_details.reasoning_tokens
                + other.output_tokens_details.reasoning_tokens
            ),
        )


class ResponseError(BaseModel):
    """``error`` of a failed response.

    OpenAI's ``code`` and ``message``, with ``type`` and ``param`` as its HTTP errors and the
    ``error`` event carry them: the Vercel AI SDK refuses a failed response without ``type``.
    """

    code: str
    message: str
    type: str = "server_error"
    param: str | None = None


class IncompleteDetails(BaseModel):
    """``incomplete_details`` of an incomplete response."""

    reason: str


class ResponseConversation(BaseModel):
    """``conversation`` of a response: the conversation its items were added to."""

    id: str


class ResponseObject(BaseModel):
    """The response as clients read it (``GET /v1/responses/{id}`` and event snapshots)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    object: str = "response"
    created_at: int
    completed_at: int | None = None
    status: ResponseStatus
    incomplete_details: IncompleteDetails | None = None
    model: str
    previous_response_id: str | None = None
    instructions: str | None = None
    output: list[dict[str, Any]] = Field(default_factory=list)
    error: ResponseError | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: Any = "auto"
    truncation: str = "disabled"
    parallel_tool_calls: bool = True
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_logprobs: int = 0
    temperature: float = 1.0
    reasoning: dict[str, Any] | None = None
    usage: Usage | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    store: bool = True
    background: bool = False
    service_tier: str = "default"
    metadata: dict[str, str] = Field(default_factory=dict)
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    conversation: ResponseConversation | None = None
    # Create options echoed as OpenAI's ``Response`` shows them (app/protocol/options.py).
    prompt_cache_retention: str | None = None
    access_programs: dict[str, Any] | None = None
    user: str | None = None

    def wire(self) -> dict[str, Any]:
        """The JSON-able dict clients receive."""
        return self.model_dump(mode="json")
