"""``GET /v1/models`` and ``GET /v1/models/{id}``: the model server's models.

Its list is cached briefly (:mod:`app.model_list`).
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from app.errors import NotFoundError, quoted
from gateway.context import gateway

blueprint = Blueprint("models", __name__)


@blueprint.get("/v1/models")
def list_models() -> Response:
    """The models the fleet can call."""
    return jsonify({"object": "list", "data": gateway().models.list()})


@blueprint.get("/v1/models/<path:model_id>")  # a path: ids such as "org/model" hold slashes
def retrieve_model(model_id: str) -> Response:
    """One of the models the fleet can call, as OpenAI's SDK retrieves it."""
    for model in gateway().models.list():
        if model["id"] == model_id:
            return jsonify(model)
    raise NotFoundError(
        f"The model {quoted(model_id)} does not exist.", param="model", code="model_not_found"
    )
