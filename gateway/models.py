"""``GET /v1/models``: the model server's list (cached briefly, :mod:`app.model_list`)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from gateway.context import gateway

blueprint = Blueprint("models", __name__)


@blueprint.get("/v1/models")
def list_models() -> Response:
    """The models the fleet can call."""
    return jsonify({"object": "list", "data": gateway().models.list()})
