"""Create-body options the fleet accepts and echoes but does not act on (the README's field table).

Each model is the shape of the field in the pinned ``openai`` SDK's ``ResponseCreateParams``, so
a client's body validates as the SDK types it; the fleet shows the value on the response object
where OpenAI's ``Response`` has the field in the same shape (:data:`ECHOED_OPTIONS`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BackgroundOptions(_Strict):
    """``background_options``: when a background response must be done (not echoed).

    The fleet starts every response as soon as a worker is free, so it finishes each within
    any window; ``2h`` and ``8h`` (OpenAI's discounted windows) are checked as OpenAI states
    them (:func:`app.responses.check_background_options`), and ``continuation_id`` orders
    nothing here.
    """

    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = None


class ContextManagement(_Strict):
    """A ``context_management`` entry: compaction past a token threshold (not automatic here)."""

    type: Literal["compaction"]
    compact_threshold: int | None = Field(default=None, ge=1)


class PromptCacheOptions(_Strict):
    """``prompt_cache_options``: the provider's prompt cache (echoed; the fleet caches none)."""

    comparison_response_id: str | None = None
    mode: Literal["implicit", "explicit"] | None = None
    prewarm: bool | None = None
    ttl: Literal["30m", "12h"] | None = None


class ModerationMode(_Strict):
    """The moderation mode of the input or of the output."""

    mode: Literal["score", "block"]


class ModerationPolicy(_Strict):
    """``moderation.policy``."""

    input: ModerationMode | None = None
    output: ModerationMode | None = None


class Moderation(_Strict):
    """``moderation``: echoed; the fleet runs no moderation model."""

    model: str = Field(min_length=1)
    policy: ModerationPolicy | None = None


class AccessPrograms(_Strict):
    """``access_programs``: OpenAI's domain access tiers (echoed, meaningless here)."""

    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class ImageOptions(_Strict):
    """``image``: request-level image options (echoed; images go to the model as they are)."""

    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class PromptReference(_Strict):
    """``prompt``: a stored prompt template by id (the fleet stores none: refused at create)."""

    id: str = Field(min_length=1)
    version: str | None = None
    variables: dict[str, Any] | None = None


ECHOED_OPTIONS = ("access_programs", "prompt_cache_retention", "user")
"""Request fields copied as they are onto the response object, where ``Response`` has them in the
same shape. Its ``moderation``, ``image`` and ``prompt_cache_options`` are what the server applied
(moderation results, a resolved policy): absent here, for the fleet applies none of them."""
