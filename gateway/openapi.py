"""``GET /openapi.json``: the gateway's routes, their bodies described by the models it validates.

The request schemas are the pydantic models the views validate with (``CreateResponseRequest``
for create and compact, and the part of it the token count takes; ``ResponseObject`` for what
comes back; the Conversations API's bodies), so the document cannot drift from what the
gateway accepts. Every error is OpenAI's
``{"error": {...}}``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel

from app.protocol.conversations import (
    AddItemsRequest,
    CreateConversationRequest,
    UpdateConversationRequest,
)
from app.protocol.request import CreateResponseRequest
from app.protocol.response import ResponseObject
from app.token_count import COUNT_FIELDS

blueprint = Blueprint("openapi", __name__)

_REF = "#/components/schemas/{model}"

_ERROR = {
    "type": "object",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


def _answers(ok: dict[str, Any]) -> dict[str, Any]:
    return {"200": ok, "default": _json(_ref("Error"), "An error, in OpenAI's shape")}


def _path(name: str, pattern: str) -> dict[str, Any]:
    schema = {"type": "string", "pattern": pattern}
    return {"name": name, "in": "path", "required": True, "schema": schema}


_INPUT_TOKENS = {
    "type": "object",
    "required": ["object", "input_tokens"],
    "properties": {
        "object": {"const": "response.input_tokens"},
        "input_tokens": {"type": "integer", "minimum": 0},
    },
}

_RESPONSE_ID = _path("response_id", "^resp_[A-Za-z0-9]{1,64}$")
_CONVERSATION_ID = _path("conversation_id", "^conv_[A-Za-z0-9]{1,64}$")
_ITEM_ID = _path("item_id", "^[a-z]+_[A-Za-z0-9]{1,64}$")


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _body(model: str, *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(model)}}}


_PAGE = [
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
    _query("order", {"type": "string", "enum": ["asc", "desc"]}),
    _query("after", {"type": "string"}),
]
_INCLUDE = _query("include", {"type": "string"})


def _conversation_paths() -> dict[str, Any]:
    """``/v1/conversations``: the conversation object and its items."""
    conversation = items = _json({"type": "object"})
    return {
        "/v1/conversations": {
            "post": {
                "operationId": "createConversation",
                "requestBody": _body("CreateConversation", required=False),
                "responses": _answers(conversation),
            }
        },
        "/v1/conversations/{conversation_id}": {
            "parameters": [_CONVERSATION_ID],
            "get": {"operationId": "getConversation", "responses": _answers(conversation)},
            "post": {
                "operationId": "updateConversation",
                "requestBody": _body("UpdateConversation"),
                "responses": _answers(conversation),
            },
            "delete": {"operationId": "deleteConversation", "responses": _answers(conversation)},
        },
        "/v1/conversations/{conversation_id}/items": {
            "parameters": [_CONVERSATION_ID],
            "get": {
                "operationId": "listConversationItems",
                "parameters": [*_PAGE, _INCLUDE],
                "responses": _answers(items),
            },
            "post": {
                "operationId": "addConversationItems",
                "parameters": [_INCLUDE],
                "requestBody": _body("AddConversationItems"),
                "responses": _answers(items),
            },
        },
        "/v1/conversations/{conversation_id}/items/{item_id}": {
            "parameters": [_CONVERSATION_ID, _ITEM_ID],
            "get": {
                "operationId": "getConversationItem",
                "parameters": [_INCLUDE],
                "responses": _answers(items),
            },
            "delete": {
                "operationId": "deleteConversationItem",
                "responses": _answers(conversation),
            },
        },
    }


def _paths() -> dict[str, Any]:
    response = _json(_ref("Response"))
    status = _json({"type": "object", "properties": {"status": {"type": "string"}}})
    return {
        "/v1/responses": {
            "post": {
                "operationId": "createResponse",
                "requestBody": _body("CreateResponse"),
                "responses": _answers(response),
            }
        },
        "/v1/responses/{response_id}": {
            "parameters": [_RESPONSE_ID],
            "get": {
                "operationId": "getResponse",
                "parameters": [
                    _query("stream", {"type": "boolean"}),
                    _query("starting_after", {"type": "integer", "minimum": -1}),
                ],
                "responses": _answers(response),
            },
            "delete": {
                "operationId": "deleteResponse",
                "responses": _answers(_json({"type": "object"})),
            },
        },
        "/v1/responses/{response_id}/cancel": {
            "parameters": [_RESPONSE_ID],
            "post": {"operationId": "cancelResponse", "responses": _answers(response)},
        },
        "/v1/responses/{response_id}/input_items": {
            "parameters": [_RESPONSE_ID],
            "get": {
                "operationId": "listInputItems",
                "parameters": _PAGE,
                "responses": _answers(_json({"type": "object"})),
            },
        },
        "/v1/responses/compact": {
            "post": {
                "operationId": "compactResponse",
                "requestBody": _body("CreateResponse"),
                "responses": _answers(_json({"type": "object"})),
            }
        },
        "/v1/responses/input_tokens": {
            "post": {
                "operationId": "countInputTokens",
                "requestBody": _body("CountInputTokens"),
                "responses": _answers(_json(_INPUT_TOKENS)),
            }
        },
        "/v1/models": {"get": {"operationId": "listModels", "responses": _answers(status)}},
        "/v1/models/{model_id}": {
            "parameters": [_path("model_id", "^[A-Za-z0-9._:-]{1,64}$")],
            "get": {
                "operationId": "retrieveModel",
                "responses": _answers(_json({"type": "object"})),
            },
        },
        "/healthz": {"get": {"operationId": "healthz", "responses": _answers(status)}},
        "/readyz": {"get": {"operationId": "readyz", "responses": _answers(status)}},
        "/v1/console/fleet": {
            "get": {"operationId": "consoleFleet", "responses": _answers(_json({"type": "object"}))}
        },
        "/v1/console/responses/{response_id}/timeline": {
            "parameters": [_RESPONSE_ID],
            "get": {
                "operationId": "consoleTimeline",
                "responses": _answers(_json({"type": "object"})),
            },
        },
        **_conversation_paths(),
    }


def _with_count_body(schemas: dict[str, Any]) -> dict[str, Any]:
    """Add the token count's body: the create body's fields it takes, and ``personality``."""
    create = schemas["CreateResponse"]
    properties = {
        name: schema for name, schema in create["properties"].items() if name in COUNT_FIELDS
    }
    properties["personality"] = {"type": "string", "maxLength": 64}
    schemas["CountInputTokens"] = {
        **create,
        "title": "CountInputTokens",
        "description": "``POST /v1/responses/input_tokens``. Unknown fields are refused.",
        "properties": properties,
    }
    return schemas


def _schemas(models: dict[str, type[BaseModel]]) -> dict[str, Any]:
    schemas: dict[str, Any] = {"Error": _ERROR}
    for name, model in models.items():
        schema = model.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    return schemas


_MODELS: dict[str, type[BaseModel]] = {
    "CreateResponse": CreateResponseRequest,
    "Response": ResponseObject,
    "CreateConversation": CreateConversationRequest,
    "UpdateConversation": UpdateConversationRequest,
    "AddConversationItems": AddItemsRequest,
}


@cache
def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the gateway."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "Antwort Fleet", "version": "1"},
        "paths": _paths(),
        "components": {"schemas": _with_count_body(_schemas(_MODELS))},
    }


@blueprint.get("/openapi.json")
def openapi() -> Response:
    """The document (behind the bearer key when keys are configured, like every route)."""
    return jsonify(document())
