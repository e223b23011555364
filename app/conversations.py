"""The Conversations API: what the gateway's ``/v1/conversations`` views call.

A conversation is an object (``conv_…``, its ``metadata``) and a list of items. Clients add
items themselves (at create, or ``POST …/items``), and a response created with
``conversation`` reads every item as its history and adds its input and output items when it
ends (:mod:`app.store.conversations` holds the rule for responses that end together).
"""

from __future__ import annotations

import secrets
import time
from typing import Any, get_args

from app import cooperation, references
from app.conversation import (
    OWNER_FIELD,
    check_conversation_id,
    check_item_ids,
    conversation_not_found,
    duplicate_item,
    owned_conversation,
)
from app.errors import InvalidRequestError, NotFoundError
from app.protocol.conversations import (
    AddItemsRequest,
    CreateConversationRequest,
    UpdateConversationRequest,
)
from app.protocol.items import InputItem
from app.protocol.request import Includable
from app.responses import normalise_items, parse_body, parse_with_items
from app.store import ResponseStore
from app.tenancy import OPEN_TENANT

INCLUDABLE = frozenset(get_args(Includable))


def new_conversation_id() -> str:
    """A fresh ``conv_…`` id."""
    return "conv_" + secrets.token_hex(24)


def create_conversation(
    store: ResponseStore, body: Any, *, tenant: str = OPEN_TENANT
) -> dict[str, Any]:
    """``POST /v1/conversations``: a new conversation with its first items, owned by ``tenant``."""
    request = parse_with_items(CreateConversationRequest, body)
    conversation_id = new_conversation_id()
    items = _stored_items(store, request.items or [], conversation_id, tenant=tenant)
    check_item_ids(items, param="items")
    conversation = {
        "id": conversation_id,
        "object": "conversation",
        "created_at": int(time.time()),
        "metadata": request.metadata or {},
    }
    stored = {**conversation, OWNER_FIELD: tenant}
    store.create_conversation(stored, items=items)
    return conversation


def retrieve_conversation(
    store: ResponseStore, conversation_id: str, *, tenant: str = OPEN_TENANT
) -> dict[str, Any]:
    """``GET /v1/conversations/{id}`` (and the check of every path that changes it)."""
    check_conversation_id(conversation_id)
    return owned_conversation(store.conversation(conversation_id), conversation_id, tenant)


def update_conversation(
    store: ResponseStore, conversation_id: str, body: Any, *, tenant: str = OPEN_TENANT
) -> dict[str, Any]:
    """``POST /v1/conversations/{id}``: replace its metadata."""
    request = parse_body(UpdateConversationRequest, body)
    conversation = retrieve_conversation(store, conversation_id, tenant=tenant)
    conversation["metadata"] = request.metadata or {}
    if not store.update_conversation({**conversation, OWNER_FIELD: tenant}):  # deleted meanwhile
        raise conversation_not_found(conversation_id, param="conversation_id")
    return conversation


def delete_conversation(
    store: ResponseStore, conversation_id: str, *, tenant: str = OPEN_TENANT
) -> dict[str, Any]:
    """``DELETE /v1/conversations/{id}``: the conversation and its items."""
    retrieve_conversation(store, conversation_id, tenant=tenant)
    if not store.delete_conversation(conversation_id):
        raise conversation_not_found(conversation_id, param="conversation_id")
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


def add_items(
    store: ResponseStore, conversation_id: str, body: Any, *, tenant: str = OPEN_TENANT
) -> dict[str, Any]:
    """``POST /v1/conversations/{id}/items``: append items, as one block; the items added.

    All or nothing: an item whose id the conversation holds, or repeats another's, is refused
    (:func:`app.conversation.check_item_ids`) with the whole block, in the step that appends.
    """
    request = parse_with_items(AddItemsRequest, body)
    retrieve_conversation(store, conversation_id, tenant=tenant)
    items = _stored_items(store, request.items, conversation_id, tenant=tenant)
    check_item_ids(items, param="items")
    appended = store.append_to_conversation(conversation_id, items)
    if appended.conversation is None:
        raise conversation_not_found(conversation_id, param="conversation_id")
    if appended.held is not None:
        raise duplicate_item(items[appended.held]["id"], param=f"items.{appended.held}.id")
    return item_list(items, has_more=False)


def list_items(
    store: ResponseStore,
    conversation_id: str,
    *,
    limit: int,
    order: str,
    after: str | None,
    tenant: str = OPEN_TENANT,
) -> dict[str, Any]:
    """``GET /v1/conversations/{id}/items``: a page of items (one round trip)."""
    check_conversation_id(conversation_id)
    page = store.conversation_items(
        conversation_id, after=after, is_descending=order == "desc", limit=limit
    )
    owned_conversation(page.conversation if page else None, conversation_id, tenant)
    assert page is not None
    if not page.is_after_known:
        raise InvalidRequestError(
            f"No item with id '{after}' in conversation '{conversation_id}'.",
            param="after",
            code="invalid_value",
        )
    return item_list(page.items, has_more=page.has_more)


def retrieve_item(
    store: ResponseStore, conversation_id: str, item_id: str, *, tenant: str = OPEN_TENANT
) -> dict[str, Any]:
    """``GET /v1/conversations/{id}/items/{item_id}``."""
    check_conversation_id(conversation_id)
    conversation, item = store.conversation_item(conversation_id, item_id)
    owned_conversation(conversation, conversation_id, tenant)
    if item is None:
        raise _item_not_found(conversation_id, item_id)
    return item


def delete_item(
    store: ResponseStore, conversation_id: str, item_id: str, *, tenant: str = OPEN_TENANT
) -> dict[str, Any]:
    """``DELETE /v1/conversations/{id}/items/{item_id}``: the conversation it was removed from."""
    retrieve_conversation(store, conversation_id, tenant=tenant)
    conversation, removed = store.delete_conversation_item(conversation_id, item_id)
    public = owned_conversation(conversation, conversation_id, tenant)
    if not removed:
        raise _item_not_found(conversation_id, item_id)
    return public


def check_include(values: list[str]) -> None:
    """Validate ``include`` of the item endpoints (accepted: the items carry everything)."""
    for value in values:
        if value not in INCLUDABLE:
            raise InvalidRequestError(
                f"Invalid value for 'include': '{value}' is not one of {sorted(INCLUDABLE)}.",
                param="include",
                code="invalid_value",
            )


def item_list(items: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    """OpenAI's list object of conversation items."""
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }


def _stored_items(
    store: ResponseStore, items: list[InputItem], conversation_id: str, *, tenant: str
) -> list[dict[str, Any]]:
    """``items`` as ``conversation_id`` keeps them, each ``item_reference`` the item it names.

    An item without an id gets one that names the conversation, by which a reference finds it.
    """
    items = references.resolved(store, items, owner=tenant, param="items")
    dumped = [item.model_dump(mode="json", exclude_none=True) for item in cooperation.each(items)]
    return normalise_items(dumped, conversation_id=conversation_id)


def _item_not_found(conversation_id: str, item_id: str) -> NotFoundError:
    return NotFoundError(
        f"Item with id '{item_id}' not found in conversation '{conversation_id}'.",
        param="item_id",
    )
