"""A request leaves nothing in a reference cycle (see :mod:`tests.support.cycles`)."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from flask import Flask

from tests.support.cycles import errors_and_frames, left_in_cycles

UNKNOWN = "resp_0123456789abcdef"


def call(app: Flask, method: str, path: str, body: bytes = b"", key: str = "") -> str:
    """One request straight through the WSGI app, as gunicorn makes it; the status line."""
    environ = {
        "HTTP_AUTHORIZATION": f"Bearer {key}",
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8080",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
    }
    status: list[str] = []
    answer = app(environ, lambda line, headers, exc_info=None: status.append(line))
    b"".join(answer)
    answer.close()  # type: ignore[attr-defined]
    return status[0]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", f"/v1/responses/{UNKNOWN}", b"", "404 NOT FOUND"),
        ("GET", f"/v1/responses/{UNKNOWN}/input_items", b"", "404 NOT FOUND"),
        ("DELETE", f"/v1/responses/{UNKNOWN}", b"", "404 NOT FOUND"),
        ("POST", f"/v1/responses/{UNKNOWN}/cancel", b"", "404 NOT FOUND"),
        ("GET", "/v1/responses/nonsense", b"", "400 BAD REQUEST"),
        ("POST", "/v1/responses", b"{", "400 BAD REQUEST"),
        ("POST", "/v1/responses", b'{"model": "m", "input": 3}', "400 BAD REQUEST"),
        ("POST", "/v1/responses", b'{"model": "m", "input": "hi", "background": true}', "200 OK"),
        ("GET", "/v1/nowhere", b"", "404 NOT FOUND"),
        ("PUT", "/v1/responses", b"", "405 METHOD NOT ALLOWED"),
    ],
)
def test_a_request_leaves_no_error_or_frame_in_a_cycle(
    make_app: Callable[..., Flask], method: str, path: str, body: bytes, status: str
) -> None:
    """A 404 raised an error its own frame held: that frame, the request's whole stack (its
    context, its body) and the error sat in a cycle until a collection. So did werkzeug's 404
    for an unknown route and 405 for a method a route does not take."""
    app = make_app()
    assert call(app, method, path, body) == status  # connections made, caches filled
    statuses: list[str] = []
    garbage = left_in_cycles(lambda: statuses.append(call(app, method, path, body)))
    assert statuses == [status]
    assert errors_and_frames(garbage) == []


def test_another_tenants_response_or_container_leaves_no_error_or_frame_in_a_cycle(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app(api_keys="team-a:ka, team-b:kb")
    tool = b'"tools": [{"type": "code_interpreter", "container": "cntr_team_a"}]'
    create = b'{"model": "m", "input": "hi", "background": true, ' + tool + b"}"
    created = app.test_client().post(
        "/v1/responses",
        data=create,
        headers={"Authorization": "Bearer ka"},
        mimetype="application/json",
    )
    theirs = f"/v1/responses/{created.get_json()['id']}"
    assert call(app, "GET", theirs, key="ka") == "200 OK"
    for method, path, body in [("GET", theirs, b""), ("POST", "/v1/responses", create)]:
        assert call(app, method, path, body, key="kb") == "404 NOT FOUND"
        garbage = left_in_cycles(lambda: call(app, method, path, body, key="kb"))  # noqa: B023
        assert errors_and_frames(garbage) == [], path
