"""What the model sees: the ``previous_response_id`` chain or the conversation, then the input."""

from __future__ import annotations

from typing import Any

from app.errors import NotFoundError, PreviousResponseNotFoundError
from app.store import ResponseStore, StoredResponse

MAX_CHAIN_LENGTH = 1000


def load_history(store: ResponseStore, previous_response_id: str | None) -> list[dict[str, Any]]:
    """Input and output items of every response in the chain, oldest first.

    ``instructions`` do not carry over (OpenAI's rule): only items do. A response created with
    its own ``context`` ends the walk: that context stands for the rest of the chain. Every
    response that continues another has one (the chain as it stood when the response was
    created, or what a WebSocket connection held of its unstored predecessor), so the walk reads
    one response, however long the conversation.

    Raises:
        PreviousResponseNotFoundError: a response in the chain is unknown, expired, deleted or
            was created with ``store: false``.
    """
    segments: list[list[dict[str, Any]]] = []
    current = previous_response_id
    while current is not None and len(segments) < MAX_CHAIN_LENGTH:
        stored = store.load(current)
        if stored is None or not stored.response.store:
            raise PreviousResponseNotFoundError(
                f"Previous response with id '{current}' not found.", param="previous_response_id"
            )
        segments.append(store.inputs(current) + stored.response.output)
        if "context" in stored.extra:
            segments.append(stored.extra["context"])
            break
        current = stored.response.previous_response_id
    history: list[dict[str, Any]] = []
    for segment in reversed(segments):
        history.extend(segment)
    return history


def history_of(store: ResponseStore, stored: StoredResponse) -> list[dict[str, Any]]:
    """What comes before a response's own input: its ``context`` if it has one, else its chain."""
    if "context" in stored.extra:
        context: list[dict[str, Any]] = stored.extra["context"]
        return context
    return load_history(store, stored.response.previous_response_id)


def load_conversation(store: ResponseStore, conversation_id: str) -> list[dict[str, Any]]:
    """Every item of a conversation, oldest first: one round trip, however long it is.

    Raises:
        NotFoundError: the conversation is unknown, expired or deleted.
    """
    page = store.conversation_items(conversation_id)
    if page is None:
        raise conversation_not_found(conversation_id, param="conversation")
    return page.items


def conversation_not_found(conversation_id: str, *, param: str) -> NotFoundError:
    """OpenAI's 404 for a conversation id that names nothing."""
    return NotFoundError(f"Conversation with id '{conversation_id}' not found.", param=param)
