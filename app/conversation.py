"""What the model sees: the ``previous_response_id`` chain, then this response's input."""

from __future__ import annotations

from typing import Any

from app.errors import PreviousResponseNotFoundError
from app.store import ResponseStore

MAX_CHAIN_LENGTH = 1000


def load_history(store: ResponseStore, previous_response_id: str | None) -> list[dict[str, Any]]:
    """Input and output items of every response in the chain, oldest first.

    ``instructions`` do not carry over (OpenAI's rule): only items do.

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
        current = stored.response.previous_response_id
    history: list[dict[str, Any]] = []
    for segment in reversed(segments):
        history.extend(segment)
    return history
