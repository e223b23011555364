"""``item_reference`` input items: each replaced by the stored item it names.

A client that keeps its transcript may name a stored response's item instead of sending it
again: the Vercel AI SDK does so for every earlier assistant message, reasoning item and tool
call while ``store`` is on (its default). An item the fleet made names its response (its id
ends with the response id's digits, :func:`app.protocol.items.response_of_item`), so a
reference is read from that response's record: one round trip for all of a request's
references, no index to keep. An input item the client sent without an id was given one that
names its response and its place in that response's input
(:func:`app.protocol.items.input_of_item`): a reference to it is read there, one more round
trip for all such. An item added to a conversation without an id was given one that names the
conversation (:func:`app.protocol.items.conversation_of_item`): a reference to it is read from
the conversation's items, one more round trip for all such. The item then takes the
reference's place as if the client had sent it, checked as such.

An item is found only in a response or a conversation its tenant could read (owned, stored, not
expired or deleted) and while it is still there: otherwise the request is a 404 in OpenAI's
words, the same whatever the reason.
"""

from __future__ import annotations

from typing import Any

from app import cooperation, validation
from app.conversation import owns_conversation
from app.errors import InvalidRequestError, NotFoundError, quoted
from app.ownership import require_owned
from app.protocol.items import (
    ItemReference,
    conversation_of_item,
    input_of_item,
    response_of_item,
)
from app.store import ResponseStore, StoredResponse

UNSTORED_HINT = (
    " Items are not persisted when `store` is set to false. Try again with `store` set to "
    "true, or remove this item from your input."
)
"""OpenAI's words after the message when the item's response was made with ``store: false``."""


def resolved(store: ResponseStore, items: list[Any], *, owner: str, param: str) -> list[Any]:
    """``items`` (validated input items), each reference replaced by the item it names.

    ``items`` itself when it holds no reference.

    Raises:
        NotFoundError: a reference names no item ``owner`` can read (``param``: the list).
        InvalidRequestError: it names an item that is not an input item.
    """
    places = [
        index
        for index, item in enumerate(cooperation.each(items))
        if isinstance(item, ItemReference)
    ]
    if not places:
        return items
    ids = [items[index].id for index in places]
    inputs = {item_id: place for item_id in ids if (place := input_of_item(item_id)) is not None}
    conversations = {
        item_id: conversation
        for item_id in ids
        if (conversation := conversation_of_item(item_id)) is not None
    }
    responses = [
        inputs[item_id][0] if item_id in inputs else response_of_item(item_id) for item_id in ids
    ]
    wanted = sorted({response_id for response_id in responses if response_id is not None})
    records = dict(zip(wanted, store.load_many(wanted), strict=True))
    found = [
        None
        if item_id in conversations
        else _stored_item(
            None if response_id is None else records[response_id],
            item_id,
            owner=owner,
            param=param,
            is_input=item_id in inputs,
        )
        for item_id, response_id in zip(ids, responses, strict=True)
    ]
    _with_input_items(store, found, ids, inputs, param=param)
    _with_conversation_items(store, found, ids, conversations, owner=owner, param=param)
    try:
        checked = validation.validated_items(found, param=param)
    except validation.BadItems as exc:
        item_id = ids[int(exc.errors[0]["loc"][1])]
        raise InvalidRequestError(
            f"Item with id {quoted(item_id, limit=256)} cannot be given as input.", param=param
        ) from None
    replaced = list(items)
    for index, item in zip(places, checked, strict=True):
        replaced[index] = item
    return replaced


def _stored_item(
    record: StoredResponse | None, item_id: str, *, owner: str, param: str, is_input: bool
) -> dict[str, Any] | None:
    """The output item ``item_id`` of ``record``, its response's, if ``owner`` may read it.

    None for an input item's id (``is_input``: read by :func:`_with_input_items`) once the
    response is found readable.

    Raises:
        NotFoundError: there is none.
    """
    stored = require_owned(record, owner, missing=lambda: item_not_found(item_id, param=param))
    if not stored.response.store:
        raise item_not_found(item_id, param=param, hint=UNSTORED_HINT)
    if is_input:
        return None
    for item in stored.response.output:
        if item.get("id") == item_id:
            return item
    raise item_not_found(item_id, param=param)


def _with_input_items(
    store: ResponseStore,
    found: list[dict[str, Any] | None],
    ids: list[str],
    inputs: dict[str, tuple[str, int]],
    *,
    param: str,
) -> None:
    """Fill ``found``'s gaps (input items' references) with the items at their ``inputs`` places.

    Raises:
        NotFoundError: no item of that id is there.
    """
    gaps = [index for index, item_id in enumerate(ids) if item_id in inputs]
    if not gaps:
        return
    read = store.input_items([inputs[ids[index]] for index in gaps])
    for index, item in zip(gaps, read, strict=True):
        if item is None or item.get("id") != ids[index]:
            raise item_not_found(ids[index], param=param)
        found[index] = item


def _with_conversation_items(
    store: ResponseStore,
    found: list[dict[str, Any] | None],
    ids: list[str],
    conversations: dict[str, str],
    *,
    owner: str,
    param: str,
) -> None:
    """Fill ``found``'s places of conversation items' references with the items named.

    Raises:
        NotFoundError: the conversation is not one ``owner`` can read, or holds no such item.
    """
    gaps = [index for index, item_id in enumerate(ids) if item_id in conversations]
    if not gaps:
        return
    read = store.conversation_items_named([(conversations[ids[i]], ids[i]) for i in gaps])
    for index, (conversation, item) in zip(gaps, read, strict=True):
        if not owns_conversation(conversation, owner) or item is None:
            raise item_not_found(ids[index], param=param)
        found[index] = item


def item_not_found(item_id: str, *, param: str, hint: str = "") -> NotFoundError:
    """OpenAI's 404 for a reference to no item the caller can read."""
    return NotFoundError(f"Item with id {quoted(item_id, limit=256)} not found.{hint}", param=param)
