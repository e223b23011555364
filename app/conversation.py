"""What the model sees: the ``previous_response_id`` chain or the conversation, then the input."""

from __future__ import annotations

from typing import Any

from app.errors import NotFoundError, PreviousResponseNotFoundError, quoted
from app.ids import is_response_id
from app.store import ResponseStore, StoredResponse

MAX_CHAIN_LENGTH = 1000


def load_history(
    store: ResponseStore, previous_response_id: str | None, *, owner: str | None = None
) -> list[dict[str, Any]]:
    """Input and output items of every response in the chain, oldest first.

    ``owner``: the tenant continuing the chain, which must own every response in it (None: a
    worker's read of a chain that was checked when its response was created).

    ``instructions`` do not carry over (OpenAI's rule): only items do. A response created with
    its own ``context`` ends the walk: that context stands for the rest of the chain. Every
    response that continues another has one (the chain as it stood when the response was
    created, or what a WebSocket connection held of its unstored predecessor), so the walk reads
    one response, however long the conversation.

    Raises:
        PreviousResponseNotFoundError: a response in the chain is unknown, expired, deleted or
            was created with ``store: false``, another tenant's (the same answer), or the id is
            not of the fleet's format (it is never made into a key).
    """
    segments: list[list[dict[str, Any]]] = []
    current = previous_response_id
    while current is not None and len(segments) < MAX_CHAIN_LENGTH:
        stored = store.load(current) if is_response_id(current) else None
        if stored is None or not stored.response.store or not _is_owner(stored, owner):
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


OWNER_FIELD = "owner"
"""Where a stored conversation object keeps its owner (:mod:`app.ownership`); never served."""


def load_conversation(
    store: ResponseStore, conversation_id: str, *, owner: str
) -> list[dict[str, Any]]:
    """Every item of a conversation ``owner`` owns, oldest first: one round trip, however long.

    Raises:
        NotFoundError: the conversation is unknown, expired, deleted or another tenant's.
    """
    page = store.conversation_items(conversation_id)
    owned_conversation(
        page.conversation if page else None, conversation_id, owner, param="conversation"
    )
    assert page is not None
    return page.items


def owned_conversation(
    stored: dict[str, Any] | None,
    conversation_id: str,
    tenant: str,
    *,
    param: str = "conversation_id",
) -> dict[str, Any]:
    """The conversation object as clients see it, when ``tenant`` owns ``stored``.

    Raises:
        NotFoundError: no such conversation, or another tenant's (the same answer).
    """
    if stored is None or stored.get(OWNER_FIELD, "") != tenant:
        raise conversation_not_found(conversation_id, param=param)
    return {key: value for key, value in stored.items() if key != OWNER_FIELD}


def conversation_not_found(conversation_id: str, *, param: str) -> NotFoundError:
    """OpenAI's 404 for a conversation id that names nothing."""
    return NotFoundError(f"Conversation with id '{conversation_id}' not found.", param=param)


def _is_owner(stored: StoredResponse, owner: str | None) -> bool:
    return owner is None or stored.owner == owner
