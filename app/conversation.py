"""What the model sees: the ``previous_response_id`` chain, then this response's input."""

from __future__ import annotations

from typing import Any

from app.errors import PreviousResponseNotFoundError, quoted
from app.ids import is_response_id
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
            was created with ``store: false``, or the id is not of the fleet's format (it is
            never made into a key).
    """
    segments: list[list[dict[str, Any]]] = []
    current = previous_response_id
    while current is not None and len(segments) < MAX_CHAIN_LENGTH:
        stored = store.load(current) if is_response_id(current) else None
        if stored is None or not stored.response.store:
            raise PreviousResponseNotFoundError(
                f"Previous response with id {quoted(current)} not found.",
                param="previous_response_id",
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
