"""The bodies of the Conversations API (``/v1/conversations``), as the official SDK sends them."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.protocol.items import InputItem

MAX_ITEMS_PER_REQUEST = 20
"""OpenAI's limit on the items one create adds."""

Metadata = dict[
    Annotated[str, StringConstraints(max_length=64)],
    Annotated[str, StringConstraints(max_length=512)],
]
"""Up to 16 pairs (the length of the dict is checked where it is a field)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateConversationRequest(_Strict):
    """``POST /v1/conversations``."""

    items: list[InputItem] | None = Field(default=None, max_length=MAX_ITEMS_PER_REQUEST)
    metadata: Metadata | None = Field(default=None, max_length=16)
    safety_identifier: str | None = Field(default=None, max_length=64)
    """Taken as a response's create takes it (openai 3.60 sends it); a conversation has no
    field to show it in, and the fleet no safety monitoring to give it to."""


class UpdateConversationRequest(_Strict):
    """``POST /v1/conversations/{id}``: the metadata replaces the conversation's."""

    metadata: Metadata | None = Field(max_length=16)


class AddItemsRequest(_Strict):
    """``POST /v1/conversations/{id}/items``."""

    items: list[InputItem] = Field(min_length=1, max_length=MAX_ITEMS_PER_REQUEST)


class ConversationRef(_Strict):
    """``conversation: {"id": …}`` on ``POST /v1/responses``."""

    id: str = Field(min_length=1)
