"""A request body sent gzip- or deflate-encoded is taken; another encoding is a clear 415."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient
from openai.types.responses import Response
from werkzeug.test import TestResponse

from app import cooperation
from tests.gateway.conftest import error_of

BODY = {"model": "m", "input": "Hello there", "background": True}


def post(web: FlaskClient, body: bytes, encoding: str, path: str = "/v1/responses") -> TestResponse:
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    return web.post(path, data=body, headers=headers)


def encoded(value: object, *encodings: str) -> bytes:
    """``value`` as JSON, encoded with each of ``encodings`` in turn (as the header lists them)."""
    data = json.dumps(value).encode()
    for encoding in encodings:
        data = gzip.compress(data) if encoding in ("gzip", "x-gzip") else zlib.compress(data)
    return data


@pytest.mark.parametrize(
    ("header", "encodings"),
    [
        ("gzip", ["gzip"]),
        ("x-gzip", ["x-gzip"]),
        ("deflate", ["deflate"]),
        ("GZIP", ["gzip"]),
        ("identity", []),
        ("deflate, gzip", ["deflate", "gzip"]),
        ("gzip, identity", ["gzip"]),
    ],
)
def test_an_encoded_body_is_decoded_and_taken(
    web: FlaskClient, header: str, encodings: list[str]
) -> None:
    answer = post(web, encoded(BODY, *encodings), header)

    assert answer.status_code == 200, answer.get_data(as_text=True)
    created = Response.model_validate(answer.json)
    items = web.get(f"/v1/responses/{created.id}/input_items").json
    assert items["data"][0]["content"][0]["text"] == "Hello there"


def test_a_gzip_body_of_several_members_is_taken_whole(web: FlaskClient) -> None:
    """gzip's members concatenated are one stream (``cat a.gz b.gz``): all of them are read."""
    text = json.dumps(BODY).encode()
    body = gzip.compress(text[:10]) + gzip.compress(text[10:])

    assert post(web, body, "gzip").status_code == 200


def test_a_conversation_is_made_from_an_encoded_body(web: FlaskClient) -> None:
    body = {"items": [{"type": "message", "role": "user", "content": "hi"}]}

    answer = post(web, encoded(body, "gzip"), "gzip", "/v1/conversations")

    assert answer.status_code == 200, answer.get_data(as_text=True)
    items = web.get(f"/v1/conversations/{answer.json['id']}/items").json
    assert items["data"][0]["content"][0]["text"] == "hi"


@pytest.mark.parametrize(
    "path", ["/v1/responses", "/v1/responses/compact", "/v1/responses/input_tokens"]
)
def test_an_encoded_body_is_checked_as_a_plain_one(web: FlaskClient, path: str) -> None:
    error = error_of(
        post(web, encoded({"model": "m", "input": "hi", "bogus": 1}, "deflate"), "deflate", path),
        400,
    )

    assert (error.code, error.param) == ("unknown_parameter", "bogus")


@pytest.mark.parametrize("encoding", ["zstd", "br", "compress", "gzip, br"])
def test_another_encoding_is_415_naming_it(web: FlaskClient, encoding: str) -> None:
    error = error_of(post(web, json.dumps(BODY).encode(), encoding), 415)

    assert (error.type, error.code) == ("invalid_request_error", "unsupported_content_encoding")
    assert f"'{encoding.split(', ')[-1]}'" in error.message


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        pytest.param("gzip", json.dumps(BODY).encode(), id="gzip-not-gzip"),
        pytest.param("gzip", encoded(BODY, "gzip")[:-12], id="gzip-cut-short"),
        pytest.param("gzip", encoded(BODY, "gzip") + b"trailing", id="gzip-then-junk"),
        pytest.param("deflate", json.dumps(BODY).encode(), id="deflate-not-deflate"),
        pytest.param("deflate", encoded(BODY, "deflate")[:-3], id="deflate-cut-short"),
        pytest.param("deflate", encoded(BODY, "deflate") + b"trailing", id="deflate-then-junk"),
    ],
)
def test_a_body_not_in_its_encoding_is_400(web: FlaskClient, encoding: str, body: bytes) -> None:
    error = error_of(post(web, body, encoding), 400)

    assert (error.type, error.code) == ("invalid_request_error", "invalid_content_encoding")
    assert encoding in error.message


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_small_body_that_inflates_past_the_limit_is_413(
    make_app: Callable[..., Flask], encoding: str
) -> None:
    web = make_app(max_body_bytes=4096).test_client()
    bomb = encoded({**BODY, "input": " " * 2_000_000}, encoding)
    assert len(bomb) < 4096

    error = error_of(post(web, bomb, encoding), 413)

    assert (error.type, error.code) == ("invalid_request_error", "payload_too_large")


def test_an_encoded_body_takes_a_large_body_s_turn_by_its_decoded_size(web: FlaskClient) -> None:
    """The place large bodies take one at a time weighs what the body decodes to."""
    large = encoded({**BODY, "input": "x" * cooperation.LARGE_BYTES}, "gzip")
    assert len(large) < cooperation.LARGE_BYTES
    answers: dict[str, TestResponse] = {}

    def post_large() -> None:
        answers["large"] = post(web, large, "gzip")

    with cooperation.one_large_at_a_time(cooperation.LARGE_BYTES, tenant="other"):
        thread = threading.Thread(target=post_large)
        thread.start()
        thread.join(0.5)  # time enough to be answered, were the place not taken
        assert "large" not in answers

    thread.join(30)
    assert answers["large"].status_code == 200
