import dataclasses
import gzip
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from app.errors import UpstreamError
from app.protocol.response import InputTokensDetails, OutputTokensDetails, Usage
from app.providers.chunks import (
    Chunk,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from app.providers.openai_chat import ChatCompletionsProvider
from app.providers.translate import ModelRequest

BASE_URL = "http://model.test/v1"
REQUEST = ModelRequest(
    model="test-model", instructions="Be brief.", items=[{"role": "user", "content": "hi"}]
)
Handler = Callable[[httpx.Request], httpx.Response]


def sse(*payloads: dict[str, Any] | str) -> bytes:
    lines = [f"data: {p if isinstance(p, str) else json.dumps(p)}\n\n" for p in payloads]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def choice(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def stream_response(body: bytes) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


class Recorder:
    """A MockTransport handler that answers from a script and records every request."""

    def __init__(self, *answers: httpx.Response | Exception):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def received_before_error(provider: ChatCompletionsProvider, match: str | None) -> list[Chunk]:
    """The chunks ``provider`` streamed before the :class:`UpstreamError` (matching ``match``)
    that ended its answer."""
    received: list[Chunk] = []
    with pytest.raises(UpstreamError, match=match):
        for chunk in provider.stream(REQUEST):
            received.append(chunk)
    return received


@pytest.fixture
def make_provider() -> Iterator[Callable[..., ChatCompletionsProvider]]:
    clients: list[httpx.Client] = []

    def make(handler: Handler, **kwargs: Any) -> ChatCompletionsProvider:
        client = httpx.Client(transport=httpx.MockTransport(handler))
        clients.append(client)
        kwargs.setdefault("retry_max_wait", 0.0)
        return ChatCompletionsProvider(base_url=BASE_URL + "/", client=client, **kwargs)

    yield make
    for client in clients:
        client.close()


def test_provider_parses_a_vllm_stream_into_chunks(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    body = sse(
        choice({"role": "assistant", "content": ""}),
        choice({"reasoning_content": "Thinking"}),
        choice({"content": "Hel"}),
        choice({"content": "lo"}),
        choice(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        choice({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        choice({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}),
        choice(
            {
                "tool_calls": [
                    {"index": 1, "id": "call_2", "type": "function", "function": {"name": "noop"}}
                ]
            }
        ),
        choice({}, finish_reason="tool_calls"),
        {
            "id": "chatcmpl-1",
            "choices": [],
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": 5,
                "total_tokens": 17,
                "prompt_tokens_details": {"cached_tokens": 4},
                "completion_tokens_details": {"reasoning_tokens": 2},
            },
        },
    )
    recorder = Recorder(stream_response(body))
    provider = make_provider(recorder)

    chunks = list(provider.stream(REQUEST))

    assert chunks == [  # the body came in one piece: "Hel" and "lo" are one delta
        ReasoningDelta(text="Thinking"),
        TextDelta(text="Hello"),
        ToolCallDelta(index=0, call_id="call_1", name="get_weather", arguments=""),
        ToolCallDelta(index=0, arguments='{"city": '),
        ToolCallDelta(index=0, arguments='"Oslo"}'),
        ToolCallDelta(index=1, call_id="call_2", name="noop"),
        Finish(reason="tool_calls"),
        UsageReport(
            usage=Usage(
                input_tokens=12,
                output_tokens=5,
                total_tokens=17,
                input_tokens_details=InputTokensDetails(cached_tokens=4),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=2),
            )
        ),
    ]
    [request] = recorder.requests
    assert (request.method, str(request.url)) == ("POST", f"{BASE_URL}/chat/completions")
    sent = json.loads(request.content)
    assert sent["model"] == "test-model"
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_provider_ignores_comments_and_blank_lines_and_stops_at_done(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    body = (
        b": keepalive\n\n"
        + b"event: message\n"
        + sse(choice({"content": "ok"}), choice({}, finish_reason="stop"))
        + b'data: {"choices": [{"delta": {"content": "after done"}}]}\n\n'
    )
    provider = make_provider(Recorder(stream_response(body)))

    assert list(provider.stream(REQUEST)) == [TextDelta(text="ok"), Finish(reason="stop")]


def test_provider_decodes_a_compressed_stream(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    body = gzip.compress(sse(choice({"content": "packed"}), choice({}, finish_reason="stop")))
    headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    provider = make_provider(Recorder(httpx.Response(200, headers=headers, content=body)))

    assert list(provider.stream(REQUEST)) == [TextDelta(text="packed"), Finish(reason="stop")]


def test_provider_retries_a_429_after_its_retry_after(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    recorder = Recorder(
        httpx.Response(
            429, headers={"retry-after": "0.2"}, json={"error": {"message": "slow down"}}
        ),
        stream_response(sse(choice({"content": "hi"}), choice({}, finish_reason="stop"))),
    )
    provider = make_provider(recorder, max_retries=2, retry_max_wait=5.0)
    started = time.monotonic()

    chunks = list(provider.stream(REQUEST))

    assert time.monotonic() - started >= 0.2
    assert chunks == [TextDelta(text="hi"), Finish(reason="stop")]
    assert len(recorder.requests) == 2


def test_provider_caps_the_retry_after_wait(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    recorder = Recorder(
        httpx.Response(503, headers={"retry-after": "3600"}, text="overloaded"),
        stream_response(sse(choice({}, finish_reason="stop"))),
    )
    provider = make_provider(recorder, max_retries=1, retry_max_wait=0.01)
    started = time.monotonic()

    assert list(provider.stream(REQUEST)) == [Finish(reason="stop")]
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("status", "code"),
    [(500, "upstream_error"), (503, "upstream_error"), (429, "rate_limit_exceeded")],
)
def test_provider_gives_up_after_max_retries(
    make_provider: Callable[..., ChatCompletionsProvider], status: int, code: str
) -> None:
    recorder = Recorder(
        *[httpx.Response(status, json={"error": {"message": "boom"}}) for _ in range(3)]
    )
    provider = make_provider(recorder, max_retries=2)

    with pytest.raises(UpstreamError, match=f"{status}: boom") as caught:
        list(provider.stream(REQUEST))
    assert len(recorder.requests) == 3
    assert caught.value.code == code  # a rate limit is told as one


def test_provider_does_not_retry_a_400(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    recorder = Recorder(
        httpx.Response(400, json={"error": {"message": "max_tokens is too large"}}),
        stream_response(sse(choice({}, finish_reason="stop"))),
    )
    provider = make_provider(recorder, max_retries=2)

    with pytest.raises(UpstreamError) as caught:
        list(provider.stream(REQUEST))

    assert "400" in caught.value.message
    assert "max_tokens is too large" in caught.value.message
    assert caught.value.code == "invalid_prompt"
    assert len(recorder.requests) == 1


VLLM_OVERFLOW = (
    "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens "
    "(4096 in the messages, 1024 in the completion). Please reduce the length of the messages "
    "or completion."
)


@pytest.mark.parametrize(
    ("status", "body", "code", "detail"),
    [
        (  # vLLM before 0.10: the fields at the top
            400,
            {"object": "error", "message": VLLM_OVERFLOW, "type": "BadRequestError",
             "param": None, "code": 400},
            "context_length_exceeded",
            VLLM_OVERFLOW,
        ),
        (  # vLLM since, inside "error"
            400,
            {"error": {"message": VLLM_OVERFLOW, "type": "BadRequestError", "param": None,
                       "code": 400}},
            "context_length_exceeded",
            VLLM_OVERFLOW,
        ),
        (  # llama.cpp's server
            400,
            {"error": {"code": 400, "message": "the request exceeds the available context size, "
                       "try increasing it", "type": "exceed_context_size_error",
                       "n_prompt_tokens": 5000, "n_ctx": 4096}},
            "context_length_exceeded",
            "the request exceeds the available context size",
        ),
        (  # OpenAI's
            400,
            {"error": {"message": "Your input exceeds the limit.", "type":
                       "invalid_request_error", "param": "messages",
                       "code": "context_length_exceeded"}},
            "context_length_exceeded",
            "Your input exceeds the limit.",
        ),
        (  # vLLM's model that is not served
            404,
            {"object": "error", "message": "The model `llama` does not exist.",
             "type": "NotFoundError", "param": None, "code": 404},
            "model_not_found",
            "The model `llama` does not exist.",
        ),
        (  # Ollama's
            404,
            {"error": {"message": 'model "llama" not found, try pulling it first',
                       "type": "api_error", "param": None, "code": None}},
            "model_not_found",
            'model "llama" not found',
        ),
        (  # a server's own text error
            422,
            {"error": "Input validation error: `temperature` must be strictly positive"},
            "invalid_prompt",
            "Input validation error: `temperature` must be strictly positive",
        ),
    ],
    ids=["vllm-top", "vllm-error", "llama.cpp", "openai", "vllm-404", "ollama-404", "text"],
)  # fmt: skip
def test_provider_tells_why_a_model_server_refused_as_openai_codes_it(
    make_provider: Callable[..., ChatCompletionsProvider],
    status: int,
    body: dict[str, Any],
    code: str,
    detail: str,
) -> None:
    recorder = Recorder(httpx.Response(status, json=body))
    provider = make_provider(recorder, max_retries=2)

    with pytest.raises(UpstreamError) as caught:
        list(provider.stream(REQUEST))

    assert caught.value.code == code
    assert caught.value.message.startswith(f"Model server answered {status}: {detail}")
    assert len(recorder.requests) == 1


def test_provider_a_404_that_names_no_model_is_no_refusal(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    """A wrong base URL: the operator's fault, not the request's."""
    recorder = Recorder(httpx.Response(404, json={"detail": "Not Found"}))
    provider = make_provider(recorder, max_retries=2)

    with pytest.raises(UpstreamError) as caught:
        list(provider.stream(REQUEST))

    assert caught.value.code == "upstream_error"
    assert caught.value.message == 'Model server answered 404: {"detail":"Not Found"}'


def test_provider_connection_error_is_upstream_error_after_retries(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    recorder = Recorder(*[httpx.ConnectError("connection refused") for _ in range(3)])
    provider = make_provider(recorder, max_retries=2)

    with pytest.raises(UpstreamError, match="unreachable") as caught:
        list(provider.stream(REQUEST))

    assert isinstance(caught.value.__cause__, Exception)
    assert len(recorder.requests) == 3


def test_provider_malformed_json_is_upstream_error(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    recorder = Recorder(stream_response(sse(choice({"content": "ok"}), "{not json")))
    provider = make_provider(recorder, max_retries=2)
    received = received_before_error(provider, "malformed JSON")

    assert received == [TextDelta(text="ok")]
    assert len(recorder.requests) == 1


def test_provider_error_payload_in_stream_is_upstream_error(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    recorder = Recorder(stream_response(sse({"error": {"message": "engine died"}})))
    provider = make_provider(recorder)

    with pytest.raises(UpstreamError, match="engine died"):
        list(provider.stream(REQUEST))


class _BrokenStream(httpx.SyncByteStream):
    """Sends the first part of an answer, then the connection drops."""

    def __init__(self, first: bytes):
        self.first = first

    def __iter__(self) -> Iterator[bytes]:
        yield self.first
        raise httpx.ReadError("connection reset")


def test_provider_does_not_retry_once_the_answer_started(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    first = f"data: {json.dumps(choice({'content': 'Hel'}))}\n\n".encode()
    recorder = Recorder(
        httpx.Response(200, stream=_BrokenStream(first)),
        stream_response(sse(choice({"content": "Hello"}), choice({}, finish_reason="stop"))),
    )
    provider = make_provider(recorder, max_retries=2)
    received = received_before_error(provider, None)

    # A retry would repeat "Hel" to a client that already saw it.
    assert received == [TextDelta(text="Hel")]
    assert len(recorder.requests) == 1


def test_provider_list_models(make_provider: Callable[..., ChatCompletionsProvider]) -> None:
    recorder = Recorder(
        httpx.Response(200, json={"object": "list", "data": [{"id": "m1"}, "junk"]})
    )
    provider = make_provider(recorder)

    assert provider.list_models() == [{"id": "m1"}]
    assert str(recorder.requests[0].url) == f"{BASE_URL}/models"


def test_provider_list_models_failure_is_upstream_error(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    provider = make_provider(Recorder(httpx.Response(502, text="bad gateway")))

    with pytest.raises(UpstreamError, match="did not list models"):
        provider.list_models()


def test_provider_keeps_apart_what_arrived_apart_and_joins_what_arrived_together(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    """Tokens read one at a time leave one at a time; tokens read together leave as one delta.

    Runs of text and of reasoning join; tool-call deltas, finishes and usage stay as they came,
    in order.
    """
    pieces = [
        sse(choice({"reasoning_content": "Th"}), choice({"reasoning_content": "ink"}))[:-14],
        sse(choice({"content": "A"}))[:-14],
        sse(choice({"content": "b"}), choice({"content": "c"}), choice({"content": "d"}))[:-14],
        sse(
            choice({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f"}}]}),
            choice({"content": "e"}),
            choice({"content": "f"}, finish_reason="stop"),
        ),
    ]
    recorder = Recorder(
        httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(pieces))
    )
    provider = make_provider(recorder)

    chunks = list(provider.stream(REQUEST))

    assert chunks == [
        ReasoningDelta(text="Think"),
        TextDelta(text="A"),
        TextDelta(text="bcd"),
        ToolCallDelta(index=0, call_id="c1", name="f", arguments=""),
        TextDelta(text="ef"),
        Finish(reason="stop"),
    ]


def test_provider_joins_each_run_of_one_read_apart_from_the_next(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    """Reasoning, then text, then reasoning again, read at once: three deltas, in order."""
    body = sse(
        choice({"reasoning_content": "a"}),
        choice({"reasoning_content": "b", "content": "c"}),
        choice({"content": "d"}),
        choice({"reasoning": "e"}),
        {**choice({"content": "f"}, finish_reason="stop"), "usage": {"prompt_tokens": 1}},
    )
    provider = make_provider(Recorder(stream_response(body)))

    chunks = list(provider.stream(REQUEST))

    assert chunks[:5] == [
        ReasoningDelta(text="ab"),
        TextDelta(text="cd"),
        ReasoningDelta(text="e"),
        TextDelta(text="f"),
        Finish(reason="stop"),
    ]
    assert isinstance(chunks[5], UsageReport) and chunks[5].usage.input_tokens == 1


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ('{"choices": []} trailing', "malformed JSON"),
        ("[1, 2]", "not an object"),
        ('"text"', "not an object"),
        (b"\xff\xfe{}".decode("latin-1"), "malformed JSON"),
    ],
)
def test_provider_a_field_that_is_not_one_json_object_is_upstream_error(
    make_provider: Callable[..., ChatCompletionsProvider], field: str, message: str
) -> None:
    """Only a JSON object is a chunk: an array or a string was an ``AttributeError`` (a crash
    of the turn, not a model server's fault told as one), trailing text or bytes that are not
    UTF-8 are as malformed as bad JSON. What came before it is kept."""
    body = sse(choice({"content": "ok"})).replace(b"data: [DONE]", b"data: FIELD")
    body = body.replace(b"FIELD", field.encode("latin-1")) + b"data: [DONE]\n\n"
    provider = make_provider(Recorder(stream_response(body)))
    received = received_before_error(provider, message)

    assert received == [TextDelta(text="ok")]


def _call(call_id: str | None, name: str, arguments: Any, **numbered: Any) -> dict[str, Any]:
    call = {"function": {"name": name, "arguments": arguments}, **numbered}
    return {**call, "id": call_id} if call_id is not None else call


@pytest.mark.parametrize(
    "numbered",
    [{"index": 0}, {}, {"index": None}],
    ids=["every-call-0", "unnumbered", "null"],
)
def test_provider_tells_apart_calls_a_server_numbers_alike(
    make_provider: Callable[..., ChatCompletionsProvider], numbered: dict[str, Any]
) -> None:
    """Ollama numbers every parallel call 0 (ollama/ollama#15457, #15497), and sent no index
    before 0.4.7 (#7881): each call arrives whole with an id of its own. Read by number, two
    calls were one, named after the first, its arguments both objects run together."""
    body = sse(
        choice({"tool_calls": [_call("call_a", "add", '{"a": 1}', **numbered)]}),
        choice({"tool_calls": [_call("call_b", "mul", '{"b": 2}', **numbered)]}),
        choice({"tool_calls": [_call(None, "", ', "c": 3}', **numbered)]}),
        choice({}, finish_reason="tool_calls"),
    )
    provider = make_provider(Recorder(stream_response(body)))

    assert list(provider.stream(REQUEST)) == [
        ToolCallDelta(index=0, call_id="call_a", name="add", arguments='{"a": 1}'),
        ToolCallDelta(index=1, call_id="call_b", name="mul", arguments='{"b": 2}'),
        ToolCallDelta(index=1, name="", arguments=', "c": 3}'),
        Finish(reason="tool_calls"),
    ]


@pytest.mark.parametrize(
    "ids",
    [("call_a", "call_a", "call_a"), ("call_a", "call_b", "call_c"), ("call_a", "call_b", None)],
    ids=["repeated", "new-with-every-fragment", "opened-twice"],
)
def test_provider_keeps_one_call_until_its_arguments_are_whole(
    make_provider: Callable[..., ChatCompletionsProvider], ids: tuple[str | None, ...]
) -> None:
    """Servers that repeat a call's id on every fragment, send a new one with each (an unstable
    id), or open one call twice before its arguments: one call, as it was."""
    first, second, third = ids
    body = sse(
        choice({"tool_calls": [_call(first, "add", "", index=0)]}),
        choice({"tool_calls": [_call(second, "", '{"a": ', index=0)]}),
        choice({"tool_calls": [_call(third, "", "1}", index=0)]}),
    )
    provider = make_provider(Recorder(stream_response(body)))

    assert [chunk.index for chunk in provider.stream(REQUEST)] == [0, 0, 0]  # type: ignore[union-attr]


def test_provider_encodes_arguments_sent_as_an_object(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    body = sse(choice({"tool_calls": [_call("call_a", "add", {"a": 1}, index=0)]}))
    provider = make_provider(Recorder(stream_response(body)))

    assert list(provider.stream(REQUEST)) == [
        ToolCallDelta(index=0, call_id="call_a", name="add", arguments='{"a": 1}')
    ]


@pytest.mark.parametrize("index", ["0", 1.5, True])
def test_provider_a_tool_call_index_that_is_not_an_integer_is_upstream_error(
    make_provider: Callable[..., ChatCompletionsProvider], index: Any
) -> None:
    body = sse(choice({"tool_calls": [_call("call_a", "add", "{}", index=index)]}))
    provider = make_provider(Recorder(stream_response(body)))

    with pytest.raises(UpstreamError, match="tool call index that is not an integer"):
        list(provider.stream(REQUEST))


def test_provider_a_stream_that_ends_before_its_finish_is_upstream_error(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    """A whole HTTP body that stops before the model's finish (a proxy's timeout, a server that
    closed the stream early) was a complete answer: its text, cut, ended ``completed``."""
    body = sse(choice({"content": "The answer is"})).removesuffix(b"data: [DONE]\n\n")
    provider = make_provider(Recorder(stream_response(body)))
    received = received_before_error(provider, "ended its answer before it finished")

    assert received == [TextDelta(text="The answer is")]


def test_provider_a_finished_stream_without_done_is_whole(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    body = sse(choice({"content": "Hi"}, finish_reason="stop")).removesuffix(b"data: [DONE]\n\n")
    provider = make_provider(Recorder(stream_response(body)))

    assert list(provider.stream(REQUEST)) == [TextDelta(text="Hi"), Finish(reason="stop")]


def completion(message: dict[str, Any], finish_reason: str) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        },
    )


def test_provider_reads_a_whole_completion_from_a_server_that_does_not_stream(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    """Asked to stream, some servers answer with a whole ``chat.completion``: it was read as an
    event stream without a single field, an empty answer."""
    message = {
        "role": "assistant",
        "reasoning_content": "Two calls.",
        "content": "Looking.",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{}"}},
            {"type": "function", "function": {"name": "mul", "arguments": "{}"}},
        ],
    }
    provider = make_provider(Recorder(completion(message, "tool_calls")))

    assert list(provider.stream(REQUEST)) == [
        ReasoningDelta(text="Two calls."),
        TextDelta(text="Looking."),
        ToolCallDelta(index=0, call_id="call_a", name="add", arguments="{}"),
        ToolCallDelta(index=1, name="mul", arguments="{}"),
        Finish(reason="tool_calls"),
        UsageReport(usage=Usage(input_tokens=3, output_tokens=2, total_tokens=5)),
    ]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"error": {"message": "no such model"}}, "no such model"),
        ({"object": "list", "data": []}, "sent no completion"),
        ({"choices": ["text"]}, "sent no completion"),
    ],
)
def test_provider_a_whole_body_that_is_no_completion_is_upstream_error(
    make_provider: Callable[..., ChatCompletionsProvider], document: Any, message: str
) -> None:
    provider = make_provider(Recorder(httpx.Response(200, json=document)))

    with pytest.raises(UpstreamError, match=message):
        list(provider.stream(REQUEST))


def test_provider_reads_an_event_stream_labelled_json_as_a_stream(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    body = sse(choice({"content": "Hi"}, finish_reason="stop"))
    answer = httpx.Response(200, headers={"content-type": "application/json"}, content=body)
    provider = make_provider(Recorder(answer))

    assert list(provider.stream(REQUEST)) == [TextDelta(text="Hi"), Finish(reason="stop")]


@pytest.mark.parametrize("reason", ["abort", "error"])
@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_provider_an_answer_the_server_gave_up_on_is_upstream_error(
    make_provider: Callable[..., ChatCompletionsProvider], reason: str, streamed: bool
) -> None:
    """vLLM ends an aborted request, or one that failed in its engine, with the finish reason
    ``abort`` or ``error``: the text so far is not an answer, though it ended as one."""
    answer = (
        stream_response(sse(choice({"content": "The answer is"}), choice({}, reason)))
        if streamed
        else completion({"role": "assistant", "content": "The answer is"}, reason)
    )
    provider = make_provider(Recorder(answer))
    received = received_before_error(
        provider, f"gave up on its answer \\(finish_reason '{reason}'\\)"
    )

    assert received == [TextDelta(text="The answer is")]


def test_provider_follows_a_call_whose_opening_a_server_numbered_apart(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    """SGLang numbers a call's opening fragment by the tool's place in ``tools`` and the rest by
    the call's place in the answer (sgl-project/sglang#6310): the arguments made a call of their
    own, without a name, and the named call had none."""
    body = sse(
        choice({"tool_calls": [_call("call_a", "mul", "", index=1)]}),
        choice({"tool_calls": [_call(None, "", '{"a": 3}', index=0)]}),
        choice({"tool_calls": [_call("call_b", "add", "", index=0)]}),
        choice({"tool_calls": [_call(None, "", '{"b": 4}', index=1)]}),
        choice({}, finish_reason="tool_calls"),
    )
    provider = make_provider(Recorder(stream_response(body)))

    assert [
        (chunk.index, chunk.name, chunk.arguments)  # type: ignore[union-attr]
        for chunk in provider.stream(REQUEST)
        if isinstance(chunk, ToolCallDelta)
    ] == [(0, "mul", ""), (0, "", '{"a": 3}'), (1, "add", ""), (1, "", '{"b": 4}')]


def test_provider_asks_again_without_the_effort_only_after_a_refusal_of_no_known_cause(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    """A prompt too long for the context, or a model not served, is no refusal of the
    ``reasoning_effort``: asking again without it would only be refused again."""
    recorder = Recorder(
        httpx.Response(400, json={"error": {"message": VLLM_OVERFLOW}}),
        stream_response(sse(choice({}, finish_reason="stop"))),
    )
    provider = make_provider(recorder, max_retries=2)
    request = dataclasses.replace(REQUEST, params={"reasoning_effort": "high"})

    with pytest.raises(UpstreamError) as caught:
        list(provider.stream(request))

    assert caught.value.code == "context_length_exceeded"
    assert len(recorder.requests) == 1
    assert provider.refuses_effort == set()


def _with_logprobs(content: str, *entries: dict[str, Any]) -> dict[str, Any]:
    payload = choice({"content": content})
    payload["choices"][0]["logprobs"] = {"content": list(entries)}
    return payload


def test_provider_carries_each_token_s_logprobs_with_its_text(
    make_provider: Callable[..., ChatCompletionsProvider],
) -> None:
    hel = {"token": "Hel", "logprob": -0.1, "bytes": [72, 101, 108], "top_logprobs": []}
    lo = {"token": "lo", "logprob": -0.2, "bytes": [108, 111], "top_logprobs": []}
    half = {"token": "\ufffd", "logprob": -0.3, "bytes": [226], "top_logprobs": []}  # no text yet
    pieces = [
        sse(_with_logprobs("Hel", hel), _with_logprobs("lo", lo))[:-14],
        sse(_with_logprobs("", half), choice({}, finish_reason="stop")),
    ]
    recorder = Recorder(
        httpx.Response(200, headers={"content-type": "text/event-stream"}, content=iter(pieces))
    )

    chunks = list(make_provider(recorder).stream(REQUEST))

    assert chunks == [
        TextDelta(text="Hello", logprobs=(hel, lo)),
        TextDelta(text="", logprobs=(half,)),
        Finish(reason="stop"),
    ]
