"""``/v1/conversations``: conversations and their items (views over :mod:`app.conversations`)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from app import conversations as core
from app.responses import check_input_items_query
from gateway.auth import current_tenant
from gateway.context import gateway
from gateway.responses import in_turn

blueprint = Blueprint("conversations", __name__)


@blueprint.post("/v1/conversations")
def create() -> Response:
    """Create a conversation, with its first items (an empty body: an empty conversation)."""
    store, tenant = gateway().store, _tenant()
    return jsonify(
        in_turn(lambda body: core.create_conversation(store, body, tenant=tenant), empty={})
    )


@blueprint.get("/v1/conversations/<conversation_id>")
def retrieve(conversation_id: str) -> Response:
    """The conversation object."""
    return jsonify(core.retrieve_conversation(gateway().store, conversation_id, tenant=_tenant()))


@blueprint.post("/v1/conversations/<conversation_id>")
def update(conversation_id: str) -> Response:
    """Replace the conversation's metadata."""
    store, tenant = gateway().store, _tenant()
    return jsonify(
        in_turn(lambda body: core.update_conversation(store, conversation_id, body, tenant=tenant))
    )


@blueprint.delete("/v1/conversations/<conversation_id>")
def delete(conversation_id: str) -> Response:
    """Delete the conversation and its items."""
    return jsonify(core.delete_conversation(gateway().store, conversation_id, tenant=_tenant()))


@blueprint.post("/v1/conversations/<conversation_id>/items")
def add_items(conversation_id: str) -> Response:
    """Append items to the conversation (their body decoded in its turn, as a create's is)."""
    _check_include()
    store, tenant = gateway().store, _tenant()
    return jsonify(
        in_turn(lambda body: core.add_items(store, conversation_id, body, tenant=tenant))
    )


@blueprint.get("/v1/conversations/<conversation_id>/items")
def list_items(conversation_id: str) -> Response:
    """A page of the conversation's items."""
    _check_include()
    limit, order = check_input_items_query(request.args.get("limit"), request.args.get("order"))
    page = core.list_items(
        gateway().store,
        conversation_id,
        limit=limit,
        order=order,
        after=request.args.get("after"),
        tenant=_tenant(),
    )
    return jsonify(page)


@blueprint.get("/v1/conversations/<conversation_id>/items/<item_id>")
def retrieve_item(conversation_id: str, item_id: str) -> Response:
    """One item of the conversation."""
    _check_include()
    return jsonify(core.retrieve_item(gateway().store, conversation_id, item_id, tenant=_tenant()))


@blueprint.delete("/v1/conversations/<conversation_id>/items/<item_id>")
def delete_item(conversation_id: str, item_id: str) -> Response:
    """Remove one item; the conversation."""
    return jsonify(core.delete_item(gateway().store, conversation_id, item_id, tenant=_tenant()))


def _check_include() -> None:
    """``include`` as the SDK sends it (``include[]=…``) or plainly (``include=…``)."""
    core.check_include([*request.args.getlist("include[]"), *request.args.getlist("include")])


def _tenant() -> str:
    return current_tenant().name
