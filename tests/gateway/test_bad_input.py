"""Client mistakes an outside security run found answered with 500s (issue 18 §3): each a 4xx."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient
from gunicorn.http.body import Body, ChunkedReader
from gunicorn.http.unreader import IterUnreader

from app.store import ResponseStore
from tests.gateway.conftest import error_of
from tests.gateway.test_responses import create_in_background
from tests.support.dispatch import RecordingDispatcher

JSON = {"Content-Type": "application/json"}


def nested(depth: int) -> str:
    return '{"model": "m", "input": "hi", "metadata": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact"])
@pytest.mark.parametrize("depth", [100, 10_000, 100_000])
def test_bad_input_json_nested_deeply_is_400(web: FlaskClient, path: str, depth: int) -> None:
    error = error_of(web.post(path, data=nested(depth), headers=JSON), 400)
    assert error.type == "invalid_request_error"
    assert error.code in ("invalid_json", "invalid_value")


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact"])
@pytest.mark.parametrize("text", ['"\\ud800"', '"a\\udfff b"', '"\\udc00\\ud800"'])
def test_bad_input_lone_surrogates_are_400(web: FlaskClient, path: str, text: str) -> None:
    body = '{"model": "m", "input": [{"role": "user", "content": ' + text + "}]}"

    error = error_of(web.post(path, data=body, headers=JSON), 400)

    assert (error.type, error.code) == ("invalid_request_error", "invalid_value")
    assert "surrogate" in error.message


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact"])
def test_bad_input_nan_and_infinity_are_not_json(web: FlaskClient, path: str) -> None:
    # they were taken: a tool's schema echoed them as null, and a text format's reached the
    # worker, whose model call refused to encode them
    schema = '{"type": "object", "properties": {"x": {"type": "number", "maximum": NaN}}}'
    body = (
        '{"model": "m", "input": "hi", "background": true, '
        '"tools": [{"type": "function", "name": "f", "parameters": ' + schema + "}]}"
    )

    error = error_of(web.post(path, data=body, headers=JSON), 400)

    assert (error.type, error.code) == ("invalid_request_error", "invalid_json")


def test_bad_input_a_paired_surrogate_is_text(
    web: FlaskClient, dispatcher: RecordingDispatcher
) -> None:
    body = '{"model": "m", "input": "\\ud83d\\ude00", "background": true}'
    assert web.post("/v1/responses", data=body, headers=JSON).status_code == 200


@pytest.mark.parametrize("suffix", [":ev", ":in", ":seq", ":lease", ":results", ":t0:starts"])
@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("GET", "/v1/responses/{id}"),
        ("GET", "/v1/responses/{id}?stream=true"),
        ("DELETE", "/v1/responses/{id}"),
        ("POST", "/v1/responses/{id}/cancel"),
        ("GET", "/v1/responses/{id}/input_items"),
    ],
)
def test_bad_input_id_with_a_suffix_of_another_id_is_400_and_touches_nothing(
    web: FlaskClient, store: ResponseStore, method: str, template: str, suffix: str
) -> None:
    created = create_in_background(web)
    keys_before = sorted(store.redis.keys(f"{store.keys.prefix}*"))

    answer = web.open(template.format(id=created.id + suffix), method=method)

    error = error_of(answer, 400)
    assert (error.param, error.code) == ("response_id", "invalid_value")
    assert sorted(store.redis.keys(f"{store.keys.prefix}*")) == keys_before
    assert len(store.inputs(created.id)) == 1


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/responses/compact"])
def test_bad_input_previous_response_id_of_a_foreign_format_is_400(
    web: FlaskClient, path: str
) -> None:
    created = create_in_background(web)
    body = {"model": "m", "input": "hi", "previous_response_id": created.id + ":in"}

    error = error_of(web.post(path, json=body), 400)

    assert (error.param, error.code) == ("previous_response_id", "previous_response_not_found")


def test_bad_input_huge_id_is_not_echoed_whole(web: FlaskClient) -> None:
    answer = web.get("/v1/responses/resp_" + "a" * 1_000_000)

    error = error_of(answer, 400)
    assert len(answer.get_data()) < 1000
    assert "aaaa…" in error.message


def test_bad_input_huge_unknown_field_is_not_echoed_whole(web: FlaskClient) -> None:
    answer = web.post("/v1/responses", json={"model": "m", "input": "hi", "x" * 100_000: 1})

    error_of(answer, 400)
    assert len(answer.get_data()) < 1000


@pytest.mark.parametrize("after", [str(2**63), str(2**64), "9" * 40, "-5"])
def test_bad_input_starting_after_out_of_range_is_400(web: FlaskClient, after: str) -> None:
    created = create_in_background(web)

    answer = web.get(f"/v1/responses/{created.id}?stream=true&starting_after={after}")

    error = error_of(answer, 400)
    assert (error.param, error.code) == ("starting_after", "invalid_value")


@pytest.mark.parametrize("url", ["http://[::1/", "http://[::1]:99999/", "http://[64:ff9b::zz]/"])
def test_bad_input_malformed_mcp_server_url_is_400(web: FlaskClient, url: str) -> None:
    body = {"model": "m", "input": "hi", "tools": [mcp_tool(url)]}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert error.type == "invalid_request_error"


def test_bad_input_mcp_server_url_embedding_a_link_local_ipv4_is_400(web: FlaskClient) -> None:
    body = {"model": "m", "input": "hi", "tools": [mcp_tool("http://[64:ff9b::a9fe:a9fe]/")]}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert "private, loopback or link-local" in error.message


def mcp_tool(url: str) -> dict[str, str]:
    return {"type": "mcp", "server_label": "s", "server_url": url}


def test_bad_input_chunked_body_over_the_limit_is_413(make_app: Callable[..., Flask]) -> None:
    web = make_app(max_body_bytes=4096).test_client()
    body = b'{"model": "m", "input": "' + b"x" * 20_000 + b'"}'

    answer = web.post(
        "/v1/responses",
        input_stream=io.BytesIO(body),
        headers={**JSON, "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},  # what gunicorn sets for chunked
    )

    assert error_of(answer, 413).code == "payload_too_large"


def gunicorns_chunked_body(raw: bytes) -> Body:
    """``wsgi.input`` as gunicorn makes it for a chunked request whose body is ``raw``."""
    return Body(ChunkedReader(object(), IterUnreader([raw])))


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/conversations", "/v1/responses/compact"])
@pytest.mark.parametrize(
    ("raw", "status", "words"),
    [
        pytest.param(b"zz\r\n{}\r\n0\r\n\r\n", 400, "malformed", id="size-not-hex"),
        pytest.param(b"1\r\n{}\r\n0\r\n\r\n", 400, "malformed", id="size-smaller-than-data"),
        pytest.param(b"2;=x\r\n{}\r\n0\r\n\r\n", 400, "malformed", id="bad-extension"),
        pytest.param(b"2\r\n{}\r\n", 400, "ended", id="no-last-chunk"),
        pytest.param(b"2\r\n{}\r\n0\r\nX: " + b"y" * 300_000, 431, "trailer", id="long-trailer"),
    ],
)
def test_bad_input_malformed_chunked_body_is_4xx(
    web: FlaskClient, path: str, raw: bytes, status: int, words: str
) -> None:
    """gunicorn decodes a chunked body in the app's read of it, and raises its own errors there."""
    answer = web.post(
        path,
        headers={**JSON, "Transfer-Encoding": "chunked"},
        environ_overrides={
            "wsgi.input": gunicorns_chunked_body(raw),
            "wsgi.input_terminated": True,
        },
    )

    error = error_of(answer, status)
    assert error.type == "invalid_request_error"
    assert words in error.message
    assert len(error.message) <= 200


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_output_tokens", 2**63),
        ("max_output_tokens", 10**30),
        ("max_tool_calls", 2**64),
        ("metadata", {f"k{i}": "v" for i in range(17)}),
        ("metadata", {"k" * 65: "v"}),
        ("metadata", {"k": "v" * 513}),
    ],
)
def test_bad_input_out_of_bounds_is_400(web: FlaskClient, field: str, value: object) -> None:
    body = {"model": "m", "input": "hi", field: value}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert error.param is not None and error.param.startswith(field)


def test_bad_input_metadata_at_openai_bounds_is_accepted(web: FlaskClient) -> None:
    metadata = {f"{i:02d}" + "k" * 62: "v" * 512 for i in range(16)}
    created = create_in_background(web, metadata=metadata)
    assert created.metadata == metadata


def test_bad_input_duplicate_tool_names_are_400(web: FlaskClient) -> None:
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    body = {"model": "m", "input": "hi", "tools": [tool, {**tool, "description": "again"}]}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert (error.param, error.code) == ("tools.1.name", "duplicate_tool_name")


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        (
            [{"type": "shell"}, {"type": "shell", "environment": {"type": "container_auto"}}],
            "tools.1",
        ),
        ([{"type": "function", "name": "shell"}, {"type": "shell"}], "tools.1"),
        ([{"type": "apply_patch"}, {"type": "apply_patch"}], "tools.1"),
        ([{"type": "local_shell"}, {"type": "function", "name": "local_shell"}], "tools.1.name"),
        (
            [
                {"type": "computer"},
                {
                    "type": "computer_use_preview",
                    "display_width": 8,
                    "display_height": 6,
                    "environment": "linux",
                },
            ],
            "tools.1",
        ),
    ],
)
def test_bad_input_two_tools_the_model_would_call_by_one_name_are_400(
    web: FlaskClient, tools: list[dict[str, object]], param: str
) -> None:
    # before: both offered to the model under one name, and only the last one run
    body = {"model": "m", "input": "hi", "tools": tools, "background": True}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert (error.param, error.code) == (param, "duplicate_tool_name")


@pytest.mark.parametrize(
    "tools",
    [
        [{"type": "web_search"}, {"type": "function", "name": "web_search", "parameters": {}}],
        [{"type": "web_search"}, {"type": "web_search_preview"}],
        [
            {"type": "tool_search", "execution": "client"},
            {"type": "function", "name": "tool_search"},
        ],
    ],
)
def test_bad_input_a_function_named_as_a_tool_a_kind_names_is_400(
    make_app: Callable[..., Flask], tools: list[dict[str, object]]
) -> None:
    # before: a plugin-backed web search and a function both offered as ``web_search``; the
    # model's call ran whichever came last
    web = make_app(internal_tool_modules="tests.support.search_tools").test_client()
    body = {"model": "m", "input": "hi", "tools": tools, "background": True}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert (error.param, error.code) == ("tools", "duplicate_tool_name")


def test_a_function_named_web_search_is_fine_when_no_plugin_backs_the_tool(
    make_app: Callable[..., Flask],
) -> None:
    # Codex CLI sends ``web_search``; unbacked, it is dropped and takes no name
    web = make_app().test_client()
    tools = [{"type": "web_search"}, {"type": "function", "name": "web_search", "parameters": {}}]
    body = {"model": "m", "input": "hi", "tools": tools, "background": True}

    response = web.post("/v1/responses", json=body)

    assert response.status_code == 200, response.get_data(as_text=True)
    assert [tool["type"] for tool in response.get_json()["tools"]] == ["function"]


def _functions(count: int) -> list[dict[str, object]]:
    return [{"type": "function", "name": f"f{n}", "parameters": {}} for n in range(count)]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": _functions(129)}, "tools"),
        ({"tools": _functions(250_000)}, "tools"),  # 14.6 MB: held its process 9.7 s before
        ({"input": [{"type": "additional_tools", "tools": _functions(129)}]}, "input.0.tools"),
    ],
)
def test_bad_input_more_tools_than_openai_takes_are_400_as_openai_says(
    web: FlaskClient, body: dict[str, object], param: str
) -> None:
    """OpenAI's limit, in its words. Each tool is echoed in every event of the response.

    Before, any number was taken.
    """
    count = len(body.get("tools") or body["input"][0]["tools"])  # type: ignore[index]
    # an item's error names the field in the item (``param``: its place in the request)

    error = error_of(web.post("/v1/responses", json={"model": "m", "input": "hi", **body}), 400)

    assert (error.param, error.code) == (param, "array_above_max_length")
    assert error.message == (
        "Invalid 'tools': array too long. Expected an array with maximum length 128, but got an "
        f"array with length {count} instead."
    )


def test_bad_input_tools_at_openai_bounds_are_accepted(web: FlaskClient) -> None:
    created = create_in_background(web, tools=_functions(128))
    assert len(created.tools) == 128


def _namespace(count: int, name: str = "ns") -> dict[str, object]:
    return {"type": "namespace", "name": name, "description": "d", "tools": _functions(count)}


@pytest.mark.parametrize(
    ("body", "param", "count"),
    [
        ({"tools": [_namespace(1025)]}, "tools", 1025),
        ({"tools": [_namespace(150_000)]}, "tools", 150_000),  # 16 MB: 3.2 s in one piece
        ({"tools": [_namespace(600), _namespace(600)]}, "tools", 1200),
        ({"tools": [_namespace(1024)] * 128}, "tools", 131_072),
        (
            {
                "tools": [_namespace(600)],
                "input": [{"type": "additional_tools", "tools": [_namespace(500)]}],
            },
            "input.0.tools",
            1100,
        ),
    ],
)
def test_bad_input_namespaces_hold_1024_tools_in_all(
    web: FlaskClient, body: dict[str, object], param: str, count: int
) -> None:
    """Each of a namespace's tools is offered to the model and echoed in every event.

    Before, any number was taken: 150,000 were validated in one piece.
    """
    body = {"model": "m", "input": "hi", "background": True, **body}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert (error.param, error.code) == (param, "array_above_max_length")
    assert str(count) in error.message


def test_bad_input_namespaces_at_the_bound_are_accepted(web: FlaskClient) -> None:
    added = {"type": "additional_tools", "tools": [_namespace(24, "more")]}
    body = {"model": "m", "input": [added, {"role": "user", "content": "hi"}], "background": True}

    response = web.post("/v1/responses", json={**body, "tools": [_namespace(1000)]})

    assert response.status_code == 200, response.get_data(as_text=True)
    assert [len(tool["tools"]) for tool in response.get_json()["tools"]] == [1000, 24]


@pytest.mark.parametrize(
    ("body", "param", "limit", "count"),
    [
        (
            {
                "tools": _functions(1),
                "tool_choice": {
                    "type": "allowed_tools",
                    "mode": "auto",
                    "tools": [{"type": "function", "name": "f0"}] * 400_000,  # 1.9 s before
                },
            },
            "tool_choice.tools",
            1152,
            400_000,
        ),
        (
            {"context_management": [{"type": "compaction", "compact_threshold": 9}] * 17},
            "context_management",
            16,
            17,
        ),
    ],
)
def test_bad_input_lists_echoed_in_every_event_are_bounded(
    web: FlaskClient, body: dict[str, object], param: str, limit: int, count: int
) -> None:
    """As many allowed tools as a request can declare; a few ``context_management`` entries.

    Before, any number was taken, validated in one piece and echoed in every event.
    """
    body = {"model": "m", "input": "hi", "background": True, **body}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert (error.param, error.code) == (param, "array_above_max_length")
    assert error.message == (
        f"Invalid '{param}': array too long. Expected an array with maximum length {limit}, but "
        f"got an array with length {count} instead."
    )


def test_bad_input_added_tools_count_with_the_request_s_own(web: FlaskClient) -> None:
    """The request's 100 tools and the 29 an ``additional_tools`` item adds are 129."""
    added = {"type": "additional_tools", "tools": _functions(129)[100:]}
    body = {"model": "m", "input": [added], "tools": _functions(100)}

    error = error_of(web.post("/v1/responses", json=body), 400)

    assert (error.param, error.code) == ("input.0.tools", "array_above_max_length")
    assert "but got an array with length 129 instead" in error.message
