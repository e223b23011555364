import contextlib
import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from programs.simulator import SimConfig, make_server
from programs.simulator import server as server_module
from programs.simulator.behaviour import AnswerPlan, ErrorPlan, generate_arguments, plan_answer
from tests.support.serving import serving

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


@pytest.fixture
def start_simulator() -> Iterator[Callable[[SimConfig], str]]:
    """Factory: start a simulator with a config, return its base URL; all stop at teardown."""
    with contextlib.ExitStack() as running:

        def start(config: SimConfig) -> str:
            server = make_server("127.0.0.1", 0, config)
            running.enter_context(serving(server))
            return f"http://127.0.0.1:{server.server_address[1]}/v1"

        yield start


@pytest.fixture
def client(start_simulator: Callable[[SimConfig], str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=start_simulator(SimConfig()), timeout=10) as http:
        yield http


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _stream(client: httpx.Client, **body: Any) -> list[dict[str, Any]]:
    """POST a streaming request; return the decoded chunks, checking the [DONE] terminator."""
    body.setdefault("model", "m")
    with client.stream("POST", "/chat/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    assert all(event.startswith("data: ") for event in events)
    return [json.loads(event.removeprefix("data: ")) for event in events[:-1]]


def _deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]


def _text(chunks: list[dict[str, Any]], key: str = "content") -> str:
    return "".join(delta.get(key) or "" for delta in _deltas(chunks))


def _tool_calls(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reassemble streamed tool-call fragments by index."""
    calls: dict[int, dict[str, Any]] = {}
    for delta in _deltas(chunks):
        for fragment in delta.get("tool_calls", []):
            call = calls.setdefault(fragment["index"], {"arguments": ""})
            if "id" in fragment:
                call.update(id=fragment["id"], name=fragment["function"]["name"])
            call["arguments"] += fragment["function"]["arguments"]
    return [calls[index] for index in sorted(calls)]


def _plan(**request: Any) -> AnswerPlan:
    plan = plan_answer(request, SimConfig())
    assert isinstance(plan, AnswerPlan)
    return plan


def test_stream_text_layout(client: httpx.Client) -> None:
    chunks = _stream(client, model="my-model", messages=[_user("hello there [tokens=6]")])

    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = [delta["content"] for delta in _deltas(chunks)[1:-1]]
    assert tokens == ["Simulated", " answer", " to:", " hello", " there", " lorem"]
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert {chunk["id"] for chunk in chunks} == {chunks[0]["id"]}
    assert chunks[0]["id"].startswith("chatcmpl-sim-")
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert {chunk["model"] for chunk in chunks} == {"my-model"}
    assert all(isinstance(chunk["created"], int) for chunk in chunks)
    assert all("usage" not in chunk for chunk in chunks)


def test_token_chunks_are_the_bytes_of_the_whole_chunk_encoded() -> None:
    """Text tokens are spliced into a template: the result must equal encoding each chunk."""
    plan = _plan(
        model="m",
        messages=[_user('say "quoted" \\ back\nslash, ünïcode ✓ and tabs\t [reason] [tokens=40]')],
    )
    completion = server_module._Completion(id="chatcmpl-x", created=1, model='m"odel')

    def chunk(delta: dict[str, Any]) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
                "model": 'm"odel', "choices": [choice]}  # fmt: skip

    encoded = [
        data for _, data in server_module.stream_chunks(plan, completion, include_usage=True)
    ]
    deltas = list(server_module._token_deltas(plan))
    assert {key for delta in deltas for key in delta} >= {"content", "reasoning_content"}
    for delta, data in zip(deltas, encoded[1:], strict=False):
        assert data == json.dumps(chunk(delta), separators=(",", ":")).encode()
    assert [json.loads(data) for data in encoded[1 : len(deltas) + 1]] == [
        chunk(delta) for delta in deltas
    ]


def test_stream_usage_chunk_comes_last(client: httpx.Client) -> None:
    messages = [{"role": "system", "content": "be brief"}, _user("hi [tokens=3]")]
    chunks = _stream(client, messages=messages, stream_options={"include_usage": True})

    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 6, "completion_tokens": 3, "total_tokens": 9}
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


def test_stream_default_length_is_default_tokens(
    start_simulator: Callable[[SimConfig], str],
) -> None:
    with httpx.Client(base_url=start_simulator(SimConfig(default_tokens=7))) as http:
        chunks = _stream(http, messages=[_user("hi")])
    assert _text(chunks) == "Simulated answer to: hi lorem ipsum dolor"


def test_tokens_directive_sets_exact_length(client: httpx.Client) -> None:
    chunks = _stream(client, messages=[_user("hello [tokens=100]")])
    assert len(_deltas(chunks)) == 102
    assert len(_text(chunks).split()) == 100


def test_tokens_directive_truncates_prefix(client: httpx.Client) -> None:
    chunks = _stream(client, messages=[_user("hello [tokens=2]")])
    assert _text(chunks) == "Simulated answer"


def test_max_tokens_stops_with_length(client: httpx.Client) -> None:
    chunks = _stream(
        client,
        messages=[_user("hello [tokens=50]")],
        max_tokens=4,
        stream_options={"include_usage": True},
    )
    assert _text(chunks) == "Simulated answer to: hello"
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_max_completion_tokens_stops_with_length() -> None:
    plan = _plan(messages=[_user("hello")], max_completion_tokens=1)
    assert (plan.content, plan.finish_reason) == (("Simulated",), "length")


EVENT_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "day": {"type": "string", "enum": ["mon", "tue"]},
        "guests": {"type": "array", "items": {"$ref": "#/$defs/guest"}},
    },
    "required": ["title", "day", "guests"],
    "$defs": {"guest": {"type": "object", "properties": {"name": {"type": "string"}}}},
}


CALLING_C = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}


def test_a_json_schema_response_format_answers_an_instance_of_it(client: httpx.Client) -> None:
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "event", "schema": EVENT_SCHEMA, "strict": True},
    }
    chunks = _stream(
        client,
        messages=[_user('plan it title="Team lunch" [tokens=3]')],
        response_format=response_format,
    )

    assert json.loads(_text(chunks)) == {
        "title": "Team lunch",
        "day": "mon",
        "guests": [{"name": "sim"}],
    }
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    after_tools = _plan(
        messages=[_user("go"), CALLING_C, {"role": "tool", "tool_call_id": "c", "content": "42"}],
        response_format=response_format,
    )
    assert json.loads("".join(after_tools.content))["title"] == "sim"  # every text answer


def test_a_json_object_response_format_wraps_the_answer() -> None:
    plan = _plan(messages=[_user("hi [tokens=4]")], response_format={"type": "json_object"})

    assert json.loads("".join(plan.content)) == {"answer": "Simulated answer to: hi"}


def test_tool_calls_follow_order_of_mention(client: httpx.Client) -> None:
    chunks = _stream(
        client,
        messages=[_user("use search, then get_weather for city=Paris")],
        tools=[WEATHER, SEARCH],
    )

    calls = _tool_calls(chunks)
    assert [call["name"] for call in calls] == ["search", "get_weather"]
    assert json.loads(calls[1]["arguments"]) == {"city": "Paris", "unit": "celsius", "days": 1}
    assert json.loads(calls[0]["arguments"]) == {"query": "sim"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert _text(chunks) == ""


def test_tool_call_fragments_reassemble_to_valid_json(client: httpx.Client) -> None:
    chunks = _stream(client, messages=[_user("get_weather days=3")], tools=[WEATHER])

    fragments = [delta["tool_calls"][0] for delta in _deltas(chunks) if "tool_calls" in delta]
    first, rest = fragments[0], fragments[1:]
    assert first["index"] == 0
    assert first["type"] == "function"
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    assert len(rest) == 3
    assert all(set(piece) == {"index", "function"} for piece in rest)
    assert all(set(piece["function"]) == {"arguments"} for piece in rest)
    arguments = "".join(piece["function"]["arguments"] for piece in rest)
    assert json.loads(arguments) == {"city": "sim", "unit": "celsius", "days": 3}


def test_tool_call_ids_are_deterministic() -> None:
    request = {"messages": [_user("search and get_weather")], "tools": [WEATHER, SEARCH]}
    first, second = _plan(**request), _plan(**request)
    ids = [call.id for call in first.tool_calls]
    assert ids == [call.id for call in second.tool_calls]
    assert len(set(ids)) == 2
    assert all(len(i) == 13 and i.startswith("call_") and int(i[5:], 16) >= 0 for i in ids)
    other = _plan(messages=[_user("search and get_weather!")], tools=[WEATHER, SEARCH])
    assert other.tool_calls[0].id != ids[0]


def test_tool_choice_forces_named_function() -> None:
    plan = _plan(
        messages=[_user("search please")],
        tools=[WEATHER, SEARCH],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert [call.name for call in plan.tool_calls] == ["get_weather"]


def test_tool_choice_required_falls_back_to_first_tool() -> None:
    plan = _plan(messages=[_user("nothing named")], tools=[SEARCH, WEATHER], tool_choice="required")
    assert [call.name for call in plan.tool_calls] == ["search"]


def test_tool_choice_auto_without_mention_answers_text() -> None:
    plan = _plan(messages=[_user("nothing named")], tools=[SEARCH, WEATHER])
    assert plan.tool_calls == ()
    assert plan.finish_reason == "stop"


def test_tool_choice_none_answers_text() -> None:
    plan = _plan(messages=[_user("search")], tools=[SEARCH], tool_choice="none")
    assert plan.tool_calls == ()


def test_tool_name_must_match_whole_word() -> None:
    plan = _plan(messages=[_user("do some research")], tools=[SEARCH])
    assert plan.tool_calls == ()


def test_parallel_tool_calls_false_keeps_first() -> None:
    plan = _plan(
        messages=[_user("get_weather then search")],
        tools=[SEARCH, WEATHER],
        parallel_tool_calls=False,
    )
    assert [call.name for call in plan.tool_calls] == ["get_weather"]


def test_call_directive_makes_exactly_the_calls_it_names() -> None:
    text = (
        'first [call search {"query": "a ] b", "extra": [1, {"x": 2}]}] then '
        '[call get_weather {"city": "Oslo"}] and [call unknown {}] [call search not-json]'
    )

    plan = _plan(messages=[_user(text)], tools=[WEATHER, SEARCH])

    assert [(call.name, json.loads(call.arguments)) for call in plan.tool_calls] == [
        ("search", {"query": "a ] b", "extra": [1, {"x": 2}]}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert plan.finish_reason == "tool_calls"


def test_call_directive_respects_tool_choice_none_and_parallel_false() -> None:
    text = '[call search {"query": "q"}] [call get_weather {}]'

    none = _plan(messages=[_user(text)], tools=[WEATHER, SEARCH], tool_choice="none")
    single = _plan(messages=[_user(text)], tools=[WEATHER, SEARCH], parallel_tool_calls=False)

    assert none.tool_calls == ()
    assert [call.name for call in single.tool_calls] == ["search"]


def test_tool_calls_need_user_message_last() -> None:
    messages = [_user("search"), {"role": "assistant", "content": "ok"}]
    assert _plan(messages=messages, tools=[SEARCH]).tool_calls == ()


def test_tool_choice_unknown_function_is_400(client: httpx.Client) -> None:
    response = client.post(
        "/chat/completions",
        json={
            "model": "m",
            "messages": [_user("x")],
            "tools": [SEARCH],
            "tool_choice": {"type": "function", "function": {"name": "nope"}},
        },
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_generate_arguments_covers_schema_types() -> None:
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "e": {"type": "string", "enum": ["b", "a"]},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "b": {"type": "boolean"},
            "a": {"type": "array", "items": {"type": "integer"}},
            "o": {"type": "object", "properties": {"inner": {"type": ["null", "string"]}}},
            "nothing": {"type": "null"},
            "c": {"const": 7},
            "any": {"anyOf": [{"type": "null"}, {"type": "number"}]},
            "ref": {"$ref": "#/$defs/Point"},
            "untyped": {},
        },
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    }
    assert generate_arguments(schema) == {
        "s": "sim",
        "e": "b",
        "i": 1,
        "n": 1.5,
        "b": True,
        "a": [1],
        "o": {"inner": "sim"},
        "nothing": None,
        "c": 7,
        "any": 1.5,
        "ref": {"x": 1},
        "untyped": "sim",
    }


def test_generate_arguments_without_schema_is_empty_object() -> None:
    assert generate_arguments({}) == {}
    assert (
        _plan(messages=[_user("ping")], tools=[{"type": "function", "function": {"name": "ping"}}])
        .tool_calls[0]
        .arguments
        == "{}"
    )


def test_generate_arguments_coerces_overrides() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "integer"}},
            "extra": {"type": "object"},
            "bad": {"type": "integer"},
        },
    }
    overrides = {
        "city": "New York",
        "days": "4",
        "ratio": "0.25",
        "flag": "false",
        "tags": "1, 2,3",
        "extra": '{"k":1}',
        "bad": "many",
    }
    assert generate_arguments(schema, overrides=overrides) == {
        "city": "New York",
        "days": 4,
        "ratio": 0.25,
        "flag": False,
        "tags": [1, 2, 3],
        "extra": {"k": 1},
        "bad": 1,
    }


def test_tool_call_reads_quoted_and_trailing_punctuated_values() -> None:
    plan = _plan(messages=[_user('get_weather city="New York" days=2.')], tools=[WEATHER])
    assert json.loads(plan.tool_calls[0].arguments) == {
        "city": "New York",
        "unit": "celsius",
        "days": 2,
    }


def test_generate_arguments_stops_recursive_schemas() -> None:
    node = {
        "type": "object",
        "properties": {"left": {"$ref": "#"}, "right": {"$ref": "#"}, "v": {"type": "integer"}},
        "required": ["v"],
    }
    arguments = generate_arguments(node)
    assert len(json.dumps(arguments)) < 2000


def test_tool_call_usage_counts_argument_words() -> None:
    plan = _plan(messages=[_user("get_weather")], tools=[WEATHER])
    assert plan.tool_calls[0].arguments == '{"city": "sim", "unit": "celsius", "days": 1}'
    assert plan.completion_tokens == 6
    assert plan.prompt_tokens == 2


def test_tool_results_answer(client: httpx.Client) -> None:
    messages = [
        _user("search and get_weather [tokens=2]"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "search", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "weather", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "found it"},
        {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "sunny"}]},
    ]
    chunks = _stream(client, messages=messages, tools=[SEARCH, WEATHER])
    assert _text(chunks) == "Tool results: found it; sunny"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_tool_results_answer_takes_the_results_images_after_them(client: httpx.Client) -> None:
    # The fleet's way with a result's images: a user message after the turn's tool messages.
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}
    messages = [
        _user("look at it [reason]"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "view_image", "arguments": ""},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "[image returned]"},
        {"role": "user", "content": [{"type": "text", "text": "view_image (a):"}, image]},
    ]
    chunks = _stream(
        client, messages=messages, tools=[{**SEARCH, "function": {"name": "view_image"}}]
    )
    assert _text(chunks) == "Tool results: [image returned]"
    assert _text(chunks, "reasoning_content") == "Thinking about: look at it"


def test_reason_directive_streams_reasoning_first(client: httpx.Client) -> None:
    chunks = _stream(client, messages=[_user("why is the sky blue [reason] [tokens=3]")])
    deltas = _deltas(chunks)[1:-1]
    assert _text(chunks, "reasoning_content") == "Thinking about: why is the sky blue"
    kinds = [next(iter(delta)) for delta in deltas]
    assert kinds == ["reasoning_content"] * 7 + ["content"] * 3


@pytest.mark.parametrize(("status", "retry_after"), [(429, "0"), (500, None), (401, None)])
def test_error_directive_returns_openai_error(
    client: httpx.Client, status: int, retry_after: str | None
) -> None:
    response = client.post(
        "/chat/completions",
        json={"model": "m", "messages": [_user(f"hi [error={status}]")], "stream": True},
    )
    assert response.status_code == status
    assert response.headers.get("retry-after") == retry_after
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "simulated_error"


def test_error_directive_outside_4xx_5xx_is_ignored() -> None:
    assert isinstance(_plan(messages=[_user("hi [error=200]")]), AnswerPlan)
    assert isinstance(plan_answer({"messages": [_user("[error=503]")]}, SimConfig()), ErrorPlan)


def test_delay_directives_slow_the_stream(client: httpx.Client) -> None:
    started = time.monotonic()
    _stream(client, messages=[_user("hi [ttft_ms=40] [delay_ms=10] [tokens=3]")])
    assert time.monotonic() - started >= 0.06


def test_config_delays_apply_without_directives() -> None:
    plan = plan_answer({"messages": [_user("hi")]}, SimConfig(ttft_ms=5, token_delay_ms=2))
    assert isinstance(plan, AnswerPlan)
    assert (plan.ttft_ms, plan.token_delay_ms) == (5, 2)


def test_models_lists_configured_models(start_simulator: Callable[[SimConfig], str]) -> None:
    with httpx.Client(base_url=start_simulator(SimConfig(models=("a", "b")))) as http:
        body = http.get("/models").json()
    assert body["object"] == "list"
    assert [model["id"] for model in body["data"]] == ["a", "b"]
    assert body["data"][0]["object"] == "model"
    assert body["data"][0]["owned_by"] == "antwort-simulator"
    assert isinstance(body["data"][0]["created"], int)


def test_non_streaming_text_completion(client: httpx.Client) -> None:
    parts = [{"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {"url": "x"}}]
    response = client.post(
        "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": parts}], "max_tokens": 5},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-sim-")
    assert body["model"] == "m"
    choice = body["choices"][0]
    assert choice["message"]["content"] == "Simulated answer to: hello lorem"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["tool_calls"] == []
    assert choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}


def test_non_streaming_tool_calls(client: httpx.Client) -> None:
    response = client.post(
        "/chat/completions",
        json={"messages": [_user("search [reason]")], "tools": [SEARCH]},
    )
    body = response.json()
    message = body["choices"][0]["message"]
    assert body["model"] == "antwort-sim"
    assert message["content"] is None
    assert message["reasoning_content"] == "Thinking about: search"
    assert message["tool_calls"][0]["function"] == {
        "name": "search",
        "arguments": '{"query": "sim"}',
    }
    assert message["tool_calls"][0]["id"].startswith("call_")
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_unknown_route_is_404_json(client: httpx.Client) -> None:
    for response in (client.get("/nope"), client.post("/completions", json={})):
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found_error"


def test_bad_json_is_400_json(client: httpx.Client) -> None:
    for content in (b"{not json", b"[1, 2]"):
        response = client.post(
            "/chat/completions", content=content, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": []},
        {"messages": ["hi"]},
        {"messages": [_user("x")], "tools": {}},
        {"messages": [_user("x")], "reasoning_effort": "xhigh"},  # vLLM takes low/medium/high
    ],
)
def test_malformed_request_is_400(client: httpx.Client, body: dict[str, Any]) -> None:
    response = client.post("/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_health_is_ok(client: httpx.Client) -> None:
    response = client.get(client.base_url.copy_with(path="/health"))
    assert response.json() == {"status": "ok"}


def test_connection_is_kept_alive(start_simulator: Callable[[SimConfig], str]) -> None:
    port = int(start_simulator(SimConfig()).split(":")[2].split("/")[0])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for _ in range(2):
            body = json.dumps({"messages": [_user("hi")], "stream": True})
            connection.request("POST", "/v1/chat/completions", body=body)
            response = connection.getresponse()
            assert response.getheader("Transfer-Encoding") == "chunked"
            assert response.read().endswith(b"data: [DONE]\n\n")
            connection.request("GET", "/v1/models")
            assert json.loads(connection.getresponse().read())["object"] == "list"
        assert connection.sock is not None
    finally:
        connection.close()


def test_chunked_request_body_is_refused(start_simulator: Callable[[SimConfig], str]) -> None:
    port = int(start_simulator(SimConfig()).split(":")[2].split("/")[0])
    # The whole request in one write: sent piece by piece, a piece that follows the server's
    # refusal (it answers and closes without reading the body) breaks the client's pipe.
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 411
        assert response.getheader("Connection") == "close"
        response.read()


def test_client_leaving_mid_stream_is_harmless(client: httpx.Client) -> None:
    body = {"messages": [_user("hi [tokens=200] [delay_ms=1]")], "stream": True}
    with client.stream("POST", "/chat/completions", json=body) as response:
        next(response.iter_lines())
    assert client.get("/models").status_code == 200


def test_serve_logs_address_and_stops(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    servers: list[Any] = []

    def recording_make_server(host: str, port: int, config: SimConfig) -> Any:
        servers.append(make_server(host, port, config))
        return servers[-1]

    monkeypatch.setattr(server_module, "make_server", recording_make_server)
    caplog.set_level(logging.INFO, logger="programs.simulator.server")
    thread = threading.Thread(target=server_module.serve, args=("127.0.0.1", 0, SimConfig()))
    thread.start()
    while not servers:
        time.sleep(0.01)
    port = servers[0].server_address[1]
    with httpx.Client() as http:
        assert http.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200
    servers[0].shutdown()
    thread.join()
    assert (
        f"model simulator (not a real model) listening on http://127.0.0.1:{port}/v1"
        in caplog.messages
    )


CALLING = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    ],
}


@pytest.mark.parametrize(
    ("messages", "refused"),
    [
        ([CALLING, {"role": "tool", "tool_call_id": "c1", "content": "a"}], "c2"),
        ([CALLING, {"role": "user", "content": "and?"}], "c1, c2"),
        ([{"role": "tool", "tool_call_id": "c1", "content": "a"}], "role 'tool'"),
        (
            [CALLING, *[{"role": "tool", "tool_call_id": i, "content": "a"} for i in ("c1", "c3")]],
            "'tool'",
        ),
    ],
)
def test_calls_without_their_results_are_a_400_as_on_openai(
    messages: list[dict[str, Any]], refused: str
) -> None:
    plan = plan_answer({"messages": [{"role": "user", "content": "go"}, *messages]}, SimConfig())

    assert isinstance(plan, ErrorPlan) and plan.status == 400
    assert refused in plan.message


def test_calls_each_answered_before_the_next_message_are_taken() -> None:
    answers = [{"role": "tool", "tool_call_id": i, "content": "a"} for i in ("c2", "c1")]
    messages = [
        {"role": "user", "content": "go"},
        CALLING,
        *answers,
        {"role": "user", "content": "ok"},
    ]

    assert isinstance(plan_answer({"messages": messages}, SimConfig()), AnswerPlan)
