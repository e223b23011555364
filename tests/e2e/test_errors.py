"""Every error is OpenAI's ``{"error": {message, type, param, code}}`` with the right status."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import (
    assert_error_body,
    check_sequence,
    raw_events,
    validate_event,
    validate_response,
    wait_for_status,
)


def _post(fleet: Fleet, content: bytes, content_type: str = "application/json") -> httpx.Response:
    return httpx.post(
        f"{fleet.base_url}/v1/responses",
        content=content,
        headers={"Content-Type": content_type},
        timeout=30,
    )


def _post_json(fleet: Fleet, body: dict[str, Any]) -> httpx.Response:
    return _post(fleet, json.dumps(body).encode())


def test_errors_malformed_json_is_400(fleet: Fleet) -> None:
    error = assert_error_body(_post(fleet, b'{"model": "antwort-sim", "input": '), 400)
    assert error["type"] == "invalid_request_error"


def test_errors_non_object_body_is_400(fleet: Fleet) -> None:
    error = assert_error_body(_post(fleet, b'["model", "antwort-sim"]'), 400)
    assert error["type"] == "invalid_request_error"


def test_errors_wrong_content_type_is_415(fleet: Fleet) -> None:
    body = json.dumps({"model": "antwort-sim", "input": "hi"}).encode()
    error = assert_error_body(_post(fleet, body, content_type="text/plain"), 415)
    assert error["code"] == "unsupported_media_type"


def test_a_gzip_body_sent_chunked_is_decoded_and_streamed(fleet: Fleet) -> None:
    body = gzip.compress(
        json.dumps({"model": "antwort-sim", "input": "hi", "stream": True}).encode()
    )
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}

    with httpx.stream(
        "POST",
        f"{fleet.base_url}/v1/responses",
        content=iter([body[:20], body[20:]]),  # no Content-Length: chunked
        headers=headers,
        timeout=30,
    ) as answer:
        assert answer.status_code == 200
        events = [
            json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: {")
        ]

    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"]


def test_errors_a_zstd_body_is_415_naming_the_encoding(fleet: Fleet) -> None:
    body = json.dumps({"model": "antwort-sim", "input": "hi"}).encode()
    answer = httpx.post(
        f"{fleet.base_url}/v1/responses",
        content=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "zstd"},
        timeout=30,
    )

    error = assert_error_body(answer, 415)
    assert error["code"] == "unsupported_content_encoding"
    assert "'zstd'" in error["message"]


def test_errors_body_over_limit_is_413(fleet: Fleet) -> None:
    huge = "x" * (17 * 1024 * 1024)
    body = json.dumps({"model": "antwort-sim", "input": huge}).encode()
    error = assert_error_body(_post(fleet, body), 413)
    assert error["code"] == "payload_too_large"


def test_errors_unknown_field_is_400_naming_it(fleet: Fleet) -> None:
    response = _post_json(fleet, {"model": "antwort-sim", "input": "hi", "bogus_field": 1})
    error = assert_error_body(response, 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "bogus_field"
    assert "bogus_field" in error["message"]


def test_errors_wrong_type_is_400_naming_the_field(fleet: Fleet, client: openai.OpenAI) -> None:
    response = _post_json(fleet, {"model": "antwort-sim", "input": "hi", "temperature": "hot"})
    error = assert_error_body(response, 400)
    assert error["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="antwort-sim", input=42)  # type: ignore[call-overload]
    assert caught.value.param is not None and caught.value.param.startswith("input")


def test_errors_unknown_response_id_is_404(fleet: Fleet, client: openai.OpenAI) -> None:
    for path in ("", "/input_items"):
        response = httpx.get(f"{fleet.base_url}/v1/responses/resp_unknown{path}", timeout=10)
        error = assert_error_body(response, 404)
        assert error["type"] == "not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_unknown")


def test_errors_wrong_method_is_405(fleet: Fleet) -> None:
    response = httpx.put(f"{fleet.base_url}/v1/responses", json={}, timeout=10)
    assert_error_body(response, 405)


def test_errors_unknown_route_is_404(fleet: Fleet) -> None:
    response = httpx.get(f"{fleet.base_url}/v1/nowhere", timeout=10)
    error = assert_error_body(response, 404)
    assert error["type"] == "not_found"


@pytest.mark.parametrize("code", [500, 503])
def test_errors_model_server_failure_fails_the_response(client: openai.OpenAI, code: int) -> None:
    response = client.responses.create(model="antwort-sim", input=f"boom [error={code}]")
    assert response.status == "failed"
    assert response.error is not None
    assert response.error.message
    assert response.output == []
    validate_response(response.to_dict(), sdk_error_code=False)
    assert client.responses.retrieve(response.id).status == "failed"


def test_errors_model_server_failure_in_background(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model="antwort-sim", input="unreachable [error=503]", background=True
    )
    failed = wait_for_status(client, created.id, {"completed", "failed"})
    assert failed.status == "failed"
    assert failed.error is not None and failed.error.message


def test_errors_model_server_failure_in_stream_raises_in_sdk(client: openai.OpenAI) -> None:
    seen: list[str] = []
    with (
        pytest.raises(openai.APIError) as caught,
        client.responses.create(
            model="antwort-sim", input="boom [error=500]", stream=True
        ) as stream,
    ):
        for event in stream:
            seen.append(event.type)
    # The SDK turns the `error` event (nested `error` object) into an exception.
    assert seen[:2] == ["response.created", "response.in_progress"]
    assert "response.failed" not in seen
    assert isinstance(caught.value.body, dict)
    assert caught.value.message == caught.value.body["message"]


def test_errors_model_server_failure_stream_ends_with_response_failed(fleet: Fleet) -> None:
    response = httpx.post(
        f"{fleet.base_url}/v1/responses",
        json={"model": "antwort-sim", "input": "boom [error=500]", "stream": True},
        timeout=30,
    )
    assert response.status_code == 200
    events = raw_events(response)
    check_sequence(events)
    for event in events:
        validate_event(event, sdk_error_code=False)
    types = [event["type"] for event in events]
    assert types[-2:] == ["error", "response.failed"]
    error_event = events[-2]
    assert error_event["error"]["message"]
    assert error_event["message"] == error_event["error"]["message"]  # OpenAI's flat copy
    final = events[-1]["response"]
    assert final["status"] == "failed"
    assert final["error"]["message"]


FAILURES = [
    (502, "server_error", "server_error"),
    (429, "rate_limit_exceeded", "requests"),
    (400, "invalid_prompt", "invalid_request_error"),
]
"""A model server's answer, and the ``code`` and ``type`` of the failed response's error."""


@pytest.mark.parametrize(("status", "code", "error_type"), FAILURES)
def test_errors_failed_response_error_code_is_known_to_openai_sdk(
    client: openai.OpenAI, status: int, code: str, error_type: str
) -> None:
    """A model server that still refuses for its rate after every retry fails the response
    with ``rate_limit_exceeded`` (Codex CLI then waits as long as its message says); one that
    refuses the request as it was, with ``invalid_prompt`` (no retry can help: Codex does not
    ask again); other failures with ``server_error``. The ``type`` is the one the failure's
    HTTP error would have."""
    response = client.responses.create(model="antwort-sim", input=f"boom [error={status}]")
    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == code
    assert response.to_dict()["error"]["type"] == error_type
    Response.model_validate(response.to_dict())


@pytest.mark.parametrize(("status", "code", "error_type"), FAILURES)
def test_errors_failed_stream_s_error_event_has_the_type_of_its_code(
    fleet: Fleet, status: int, code: str, error_type: str
) -> None:
    response = httpx.post(
        f"{fleet.base_url}/v1/responses",
        json={"model": "antwort-sim", "input": f"boom [error={status}]", "stream": True},
        timeout=30,
    )
    *_, error, failed = raw_events(response)
    assert (error["type"], error["code"]) == ("error", code)
    assert error["error"]["type"] == error_type
    assert failed["response"]["error"]["type"] == error_type
