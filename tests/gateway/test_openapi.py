"""``GET /openapi.json``: DESIGN.md's contract lists it; generated from the validating models."""

from __future__ import annotations

import re
from collections.abc import Callable

import schemathesis
from flask import Flask
from flask.testing import FlaskClient


def test_openapi_document_describes_the_responses_routes(web: FlaskClient) -> None:
    answer = web.get("/openapi.json")

    assert answer.status_code == 200
    document = answer.json
    assert document is not None and document["openapi"].startswith("3.")
    for path in ("/v1/responses", "/v1/responses/{response_id}", "/v1/models"):
        assert path in document["paths"]


def test_openapi_document_is_valid_openapi_that_schemathesis_loads(web: FlaskClient) -> None:
    document = web.get("/openapi.json").json
    assert document is not None

    schema = schemathesis.openapi.from_dict(document)

    operations = {op.ok().label for op in schema.get_all_operations()}
    assert "POST /v1/responses" in operations
    assert "GET /v1/responses/{response_id}/input_items" in operations


def test_openapi_create_body_is_the_validating_model(web: FlaskClient) -> None:
    document = web.get("/openapi.json").json
    assert document is not None
    schemas = document["components"]["schemas"]

    assert schemas["CreateResponse"]["additionalProperties"] is False
    assert schemas["CreateResponse"]["properties"]["metadata"]["anyOf"][0]["maxProperties"] == 16


def test_openapi_document_describes_every_route_a_client_calls(
    make_app: Callable[..., Flask],
) -> None:
    """The bad-input suite fuzzes what the document lists: a route left out is never fuzzed."""
    app = make_app()
    document = app.test_client().get("/openapi.json").json
    assert document is not None
    described = {
        (path, method.upper())
        for path, operations in document["paths"].items()
        for method in operations
        if method != "parameters"
    }
    served = {
        (re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule), method)
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
        and (rule.rule, method) not in _NOT_DESCRIBED
        and not rule.rule.startswith(("/static", "/console"))  # the console's page and assets
    }

    assert served - described == set()


_NOT_DESCRIBED = frozenset(
    {("/openapi.json", "GET"), ("/metrics", "GET"), ("/v1/responses", "GET")}
)
"""The document itself, Prometheus's text format, and WebSocket mode (fuzzed on its own)."""
