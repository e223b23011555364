"""``POST /v1/responses/input_tokens``: the first model call a response would make, counted."""

from collections.abc import Callable
from typing import Any

import pytest
from openai.types.responses.input_token_count_params import InputTokenCountParams
from openai.types.responses.input_token_count_response import InputTokenCountResponse

from app.config import Settings
from app.conversations import create_conversation
from app.errors import (
    InvalidRequestError,
    NotFoundError,
    PreviousResponseNotFoundError,
    UpstreamError,
)
from app.jobs import wait_for_result
from app.limits import Caller
from app.protocol.response import Usage
from app.providers.chunks import Finish, TextDelta, UsageReport
from app.providers.translate import ModelRequest, build_chat_body, to_chat_messages
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from app.tenancy import Tenant
from app.token_count import COUNT_FIELDS, run_count, start_count
from tests.app.test_run import FakeModel, answer, create
from tests.support.dispatch import RecordingDispatcher, RecordingJobQueue

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def counted(prompt_tokens: int) -> FakeModel:
    """A model server that reports ``prompt_tokens`` for whatever it is sent."""
    return FakeModel(
        TextDelta(text="A"),
        Finish(reason="length"),
        UsageReport(usage=Usage(input_tokens=prompt_tokens, output_tokens=1, total_tokens=1)),
    )


def count(
    store: ResponseStore, settings: Settings, server: FakeModel, *, tenant: str = "", **body: Any
) -> dict[str, Any]:
    """The whole round trip: gateway side, worker side, gateway side."""
    queue = RecordingJobQueue()
    body.setdefault("model", "antwort-sim")
    job_id = start_count(
        store, queue, settings, body, caller=Caller(Tenant(name=tenant)) if tenant else None
    )
    assert queue.jobs == [job_id] and queue.kinds == ["input_tokens"]
    assert run_count(RunDeps(store=store, provider=server, settings=settings), job_id) != "skipped"
    return wait_for_result(store, "input_tokens", job_id, timeout_seconds=5)


def first_turn_request(
    store: ResponseStore, settings: Settings, dispatcher: RecordingDispatcher, body: dict[str, Any]
) -> ModelRequest:
    """What the first turn of the response the body creates sends the model server."""
    model = answer("Sunny.")
    response_id = create(store, settings, dispatcher, **body)
    advance_response(RunDeps(store=store, provider=model, settings=settings), response_id, 0)
    return model.requests[0]


def test_count_params_are_the_sdks_and_metadata() -> None:
    assert set(InputTokenCountParams.__annotations__) == COUNT_FIELDS - {"metadata"}


def test_count_is_what_the_model_server_reports_in_the_sdks_shape(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    result = count(store, make_settings(), counted(37), input="What is the weather in Oslo?")

    assert result == {"object": "response.input_tokens", "input_tokens": 37}
    InputTokenCountResponse.model_validate(result)


@pytest.mark.parametrize(
    "body",
    [
        {"input": "What is the weather in Oslo?"},
        {
            "input": [{"role": "user", "content": "Weather in Oslo?"}],
            "instructions": "Answer briefly.",
            "tools": [WEATHER],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "reasoning": {"effort": "low"},
        },
        {
            "input": "Give me the weather as JSON.",
            "text": {
                "format": {
                    "type": "json_schema",
                    "name": "weather",
                    "schema": {"type": "object", "properties": {"sky": {"type": "string"}}},
                }
            },
        },
    ],
    ids=["plain", "tools", "structured"],
)
@pytest.mark.parametrize("protocol", ["native", "json"])
def test_count_sends_the_first_turns_request_for_one_token(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    body: dict[str, Any],
    protocol: str,
) -> None:
    dispatcher = RecordingDispatcher()
    settings = make_settings(tool_protocols=f"antwort-sim={protocol}")
    body = {"model": "antwort-sim", **body}
    model = counted(12)

    count(store, settings, model, **body)
    turn = first_turn_request(store, settings, dispatcher, body)

    [sent] = model.requests
    assert build_chat_body(sent) == {**build_chat_body(turn), "max_tokens": 1}


def test_count_continues_a_chain_as_its_next_response_would(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    dispatcher = RecordingDispatcher()
    settings = make_settings()
    first = create(store, settings, dispatcher, model="antwort-sim", input="My name is Ada.")
    advance_response(
        RunDeps(store=store, provider=answer("Hello Ada."), settings=settings), first, 0
    )
    body = {"model": "antwort-sim", "previous_response_id": first, "input": "What is my name?"}
    model = counted(30)

    assert count(store, settings, model, **body)["input_tokens"] == 30

    turn = first_turn_request(store, settings, dispatcher, body)
    assert build_chat_body(model.requests[0]) == {**build_chat_body(turn), "max_tokens": 1}
    texts = [str(item.get("content")) for item in turn.items]
    assert "Ada." in texts[0] and "Hello Ada." in texts[1] and "my name" in texts[2]


def test_count_stores_no_response(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    count(store, make_settings(), counted(5), input="Hi")

    keys = [
        key.decode() if isinstance(key, bytes) else key
        for key in store.redis.keys(f"{store.keys.prefix}*")
    ]
    assert not [key for key in keys if "resp_" in key], keys


def test_count_of_an_input_ending_with_a_call_without_its_output_is_400(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """As a create of it: before, the model server refused the prompt (a 502)."""
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
    queue = RecordingJobQueue()

    with pytest.raises(InvalidRequestError) as raised:
        start_count(store, queue, make_settings(), {"model": "m", "input": [call]}, caller=None)

    assert (raised.value.param, raised.value.code) == ("input", "missing_tool_output")
    assert queue.jobs == []


def test_count_without_usage_is_a_model_error(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    silent = FakeModel(TextDelta(text="A"), Finish(reason="length"))

    with pytest.raises(UpstreamError) as raised:
        count(store, make_settings(), silent, input="Hi")

    assert raised.value.status == 502 and raised.value.code == "usage_not_reported"


def test_count_model_failure_reaches_the_gateway(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    with pytest.raises(UpstreamError) as raised:
        count(
            store, make_settings(), FakeModel(UpstreamError("the model server is down")), input="x"
        )

    assert raised.value.message == "the model server is down"


def test_count_task_redelivered_after_its_answer_does_nothing(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    job_id = start_count(store, RecordingJobQueue(), settings, {"model": "m", "input": "x"})
    deps = RunDeps(store=store, provider=counted(3), settings=settings)

    assert run_count(deps, job_id) == "completed"
    assert run_count(deps, job_id) == "skipped"
    assert wait_for_result(store, "input_tokens", job_id, timeout_seconds=5)["input_tokens"] == 3
    assert run_count(deps, job_id) == "skipped"


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"model": "m", "input": "x", "stream": True}, "unknown_parameter", "stream"),
        ({"model": "m", "input": "x", "store": False}, "unknown_parameter", "store"),
        ({"model": "m", "input": "x", "personality": "p" * 65}, "invalid_value", "personality"),
        ({"model": "m", "input": "x", "personality": 3}, "invalid_value", "personality"),
        ({"model": "m", "input": []}, "empty_array", "input"),
        ({"model": "m", "input": "x", "truncation": "some"}, "invalid_value", "truncation"),
        (
            {"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "nope"}},
            "invalid_value",
            "tool_choice",
        ),
    ],
)
def test_start_count_refuses_what_a_create_refuses(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    body: dict[str, Any],
    code: str,
    param: str,
) -> None:
    queue = RecordingJobQueue()

    with pytest.raises(InvalidRequestError) as raised:
        start_count(store, queue, make_settings(), body)

    assert (raised.value.code, raised.value.param) == (code, param)
    assert queue.jobs == []


def test_count_takes_a_personality_and_counts_the_same(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    plain, styled = counted(9), counted(9)

    count(store, settings, plain, input="Hi")
    count(store, settings, styled, input="Hi", personality="friendly")

    assert build_chat_body(plain.requests[0]) == build_chat_body(styled.requests[0])


def test_count_of_another_tenants_chain_is_not_found(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    dispatcher = RecordingDispatcher()
    settings = make_settings()
    theirs = create(store, settings, dispatcher, model="antwort-sim", input="secret")

    with pytest.raises(PreviousResponseNotFoundError):
        start_count(
            store,
            RecordingJobQueue(),
            settings,
            {"model": "m", "previous_response_id": theirs, "input": "x"},
            caller=Caller(Tenant(name="team-b")),
        )


def test_count_of_a_conversation_reads_its_items(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    items = [
        {"type": "message", "role": "user", "content": "My name is Ada."},
        {"type": "message", "role": "assistant", "content": "Hello Ada."},
    ]
    conversation = create_conversation(store, {"items": items})
    model = counted(21)

    result = count(store, make_settings(), model, conversation=conversation["id"], input="Name?")

    assert result["input_tokens"] == 21
    texts = [m["content"] for m in to_chat_messages(None, model.requests[0].items)]
    assert texts == ["My name is Ada.", "Hello Ada.", "Name?"]
    with pytest.raises(NotFoundError):
        count(store, make_settings(), counted(1), tenant="team-b", conversation=conversation["id"])
