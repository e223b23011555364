"""Every error the gateway answers is OpenAI's ``{"error": {...}}`` with the status of its kind."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from app import errors
from tests.gateway.conftest import error_of
from tests.support.dispatch import RecordingDispatcher

ROUTES_AND_WRONG_METHODS = [
    ("/v1/responses", "PUT"),
    ("/v1/responses", "DELETE"),
    ("/v1/responses/resp_x", "POST"),
    ("/v1/responses/resp_x", "PUT"),
    ("/v1/responses/resp_x/cancel", "GET"),
    ("/v1/responses/resp_x/input_items", "POST"),
    ("/v1/responses/compact", "PUT"),
    ("/v1/models", "POST"),
    ("/healthz", "POST"),
    ("/readyz", "POST"),
]


@pytest.mark.parametrize(
    ("error_class", "status", "error_type", "code"),
    [
        (errors.InvalidRequestError, 400, "invalid_request_error", None),
        (
            errors.PreviousResponseNotFoundError,
            400,
            "invalid_request_error",
            "previous_response_not_found",
        ),
        (errors.UnsupportedMediaTypeError, 415, "invalid_request_error", "unsupported_media_type"),
        (errors.PayloadTooLargeError, 413, "invalid_request_error", "payload_too_large"),
        (errors.AuthenticationError, 401, "authentication_error", "invalid_api_key"),
        (errors.NotFoundError, 404, "not_found", "not_found"),
        (errors.MethodNotAllowedError, 405, "invalid_request_error", "method_not_allowed"),
        (errors.UpstreamError, 502, "model_error", "upstream_error"),
        (errors.ModelBehaviorError, 500, "model_error", "model_behavior_error"),
        (errors.ServerError, 500, "server_error", "server_error"),
        (errors.ServiceUnavailableError, 503, "server_error", "service_unavailable"),
    ],
)
def test_errors_app_error_tree_maps_to_status_and_openai_shape(
    make_app: Callable[..., Flask],
    error_class: type[errors.AppError],
    status: int,
    error_type: str,
    code: str | None,
) -> None:
    app = make_app()

    @app.get("/raises")
    def raises() -> str:
        raise error_class("It went wrong.", param="some_param")

    error = error_of(app.test_client().get("/raises"), status)

    assert (error.message, error.type, error.param, error.code) == (
        "It went wrong.",
        error_type,
        "some_param",
        code,
    )


def test_errors_explicit_code_wins_over_the_default(make_app: Callable[..., Flask]) -> None:
    app = make_app()

    @app.get("/raises")
    def raises() -> str:
        raise errors.NotFoundError("Gone.", code="conversation_not_found")

    assert error_of(app.test_client().get("/raises"), 404).code == "conversation_not_found"


def test_errors_unexpected_exception_is_500_without_its_details(
    make_app: Callable[..., Flask], caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app()

    @app.get("/raises")
    def raises() -> str:
        raise RuntimeError("secret internals")

    error = error_of(app.test_client().get("/raises"), 500)

    assert (error.type, error.code) == ("server_error", "server_error")
    assert "secret" not in error.message
    assert "secret internals" in caplog.text  # logged for the operator instead


def test_errors_a_request_that_gets_no_pooled_connection_in_time_is_503_to_retry(
    make_app: Callable[..., Flask], redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every pooled Redis connection busy past the pool's wait: 503 and ``Retry-After``.

    It was a 500 with a traceback logged per request: 1,082 of them when 19,000 clients opened
    their connections to one gateway at once (bench/results/streams-scale.md).
    """
    pool = redis.BlockingConnectionPool.from_url(redis_url, max_connections=4, timeout=0.05)
    web = make_app(client=redis.Redis.from_pool(pool)).test_client()
    held = []
    with contextlib.suppress(redis.ConnectionError):
        while True:  # what the app's hub left of the pool
            held.append(pool.get_connection())
    try:
        answer = web.get("/v1/responses/resp_x")
    finally:
        for connection in held:
            pool.release(connection)

    error = error_of(answer, 503)
    assert (error.type, error.code) == ("server_error", "service_unavailable")
    assert answer.headers["Retry-After"] == "1"
    assert "Traceback" not in caplog.text
    assert "ConnectionError: No connection available" in caplog.text  # the cause, not its kind
    assert web.get("/v1/responses/resp_x").status_code == 404  # served again once freed


def test_errors_missing_model_without_default_is_400(
    make_app: Callable[..., Flask], dispatcher: RecordingDispatcher
) -> None:
    web = make_app(default_model=None).test_client()

    missing = web.post("/v1/responses", json={"input": "hi", "background": True})

    assert missing.status_code == 400
    body = missing.get_json()
    assert isinstance(body, dict)
    assert body == {
        "error": {
            "message": body["error"]["message"],
            "type": "invalid_request_error",
            "param": "model",
            "code": "missing_required_parameter",
        }
    }
    assert dispatcher.turns == []
    named = web.post("/v1/responses", json={"model": "m", "input": "hi", "background": True})
    assert named.status_code == 200
    queued = named.get_json()
    assert isinstance(queued, dict)
    assert queued["status"] == "queued"
    assert dispatcher.turns == [(queued["id"], 0)]


def test_errors_unknown_route_is_404(web: FlaskClient) -> None:
    error = error_of(web.get("/v1/nowhere"), 404)
    assert (error.type, error.code) == ("not_found", "not_found")


@pytest.mark.parametrize(("path", "method"), ROUTES_AND_WRONG_METHODS)
def test_errors_wrong_method_is_405(web: FlaskClient, path: str, method: str) -> None:
    answer = web.open(path, method=method)
    error = error_of(answer, 405)
    assert (error.type, error.code) == ("invalid_request_error", "method_not_allowed")
    assert method not in answer.headers["Allow"].split(", ")
    assert answer.headers["Allow"]


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact"])
def test_errors_body_over_the_limit_is_413(make_app: Callable[..., Flask], path: str) -> None:
    web = make_app(max_body_bytes=2048).test_client()
    body = json.dumps({"model": "m", "input": "x" * 4096})

    error = error_of(web.post(path, data=body, content_type="application/json"), 413)

    assert (error.type, error.code) == ("invalid_request_error", "payload_too_large")


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_errors_body_not_json_content_type_is_415(
    web: FlaskClient, path: str, content_type: str | None
) -> None:
    body = json.dumps({"model": "m", "input": "hi"})

    error = error_of(web.post(path, data=body, content_type=content_type), 415)

    assert (error.type, error.code) == ("invalid_request_error", "unsupported_media_type")


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact"])
@pytest.mark.parametrize("body", [b'{"model": "m", "input": ', b"", b"\xff\xfe"])
def test_errors_invalid_json_is_400(web: FlaskClient, path: str, body: bytes) -> None:
    error = error_of(web.post(path, data=body, content_type="application/json"), 400)
    assert (error.type, error.code) == ("invalid_request_error", "invalid_json")


def test_errors_unknown_parameter_is_400_naming_it(
    web: FlaskClient, dispatcher: RecordingDispatcher
) -> None:
    body = {"model": "m", "input": "hi", "background": True, "bogus_field": 1}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert (error.type, error.param) == ("invalid_request_error", "bogus_field")
    assert "bogus_field" in error.message
    assert dispatcher.turns == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", "hot"), ("background", "yes please"), ("max_output_tokens", [1])],
)
def test_errors_wrong_type_is_400_naming_the_field(
    web: FlaskClient, dispatcher: RecordingDispatcher, field: str, value: object
) -> None:
    body = {"model": "m", "input": "hi", "background": True, field: value}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert (error.type, error.param) == ("invalid_request_error", field)
    assert dispatcher.turns == []


@pytest.mark.parametrize("body", [["model", "m"], "hi", 42])
def test_errors_body_not_an_object_is_400(web: FlaskClient, body: object) -> None:
    error = error_of(web.post("/v1/responses", json=body), 400)
    assert error.type == "invalid_request_error"
