import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.config import Settings
from app.errors import UpstreamError
from app.output import TurnOutput
from app.plan import CancelByModel, ToolPlan, plan_next_step
from app.protocol.response import Usage
from app.providers.chunks import (
    MODEL_CANCELLED,
    Chunk,
    Finish,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from app.providers.translate import ModelRequest
from app.responses import cancel_response, create_response
from app.run import RunDeps, StepOutcome, advance_response
from app.store import ResponseStore
from tests.support.dispatch import RecordingDispatcher
from tests.support.responses import stored_response

USAGE = Usage(input_tokens=11, output_tokens=3, total_tokens=14)
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


class FakeModel:
    """Yields scripted chunks; an ``Exception`` in the script is raised; a callable is called."""

    def __init__(self, *script: Chunk | Exception | Callable[[], None]):
        self.script = list(script)
        self.requests: list[ModelRequest] = []
        self.yielded = 0
        self.closed = False

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        self.requests.append(request)
        try:
            for step in self.script:
                if isinstance(step, Exception):
                    raise step
                if callable(step):
                    step()
                    continue
                yield step
                self.yielded += 1
        finally:
            self.closed = True


def answer(text: str) -> FakeModel:
    return FakeModel(
        TextDelta(text=text[:2]),
        TextDelta(text=text[2:]),
        Finish(reason="stop"),
        UsageReport(usage=USAGE),
    )


def create(
    store: ResponseStore, settings: Settings, dispatcher: RecordingDispatcher, **body: Any
) -> str:
    body.setdefault("input", "What is the weather?")
    response, _ = create_response(store, dispatcher, settings, body)
    return response.id


def event_types(store: ResponseStore, rid: str) -> list[str]:
    stored = store.events_after(rid, -1)
    assert [e.sequence_number for e in stored] == list(range(len(stored)))
    return [e.type for e in stored]


def test_run_turn_completes_a_text_turn(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    dispatcher = RecordingDispatcher()
    rid = create(store, settings, dispatcher)
    model = answer("Sunny.")

    status = advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    assert status == "completed"
    assert dispatcher.turns == [(rid, 0)]
    stored = store.get(rid)
    response = stored.response
    assert (response.status, stored.turn) == ("completed", 1)
    assert response.usage == USAGE
    assert response.completed_at is not None
    [message] = response.output
    assert message["content"][0]["text"] == "Sunny."
    assert message["status"] == "completed"
    types = event_types(store, rid)
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types.count("response.in_progress") == 1
    assert types.count("response.completed") == 1
    assert types[-1] == "response.completed"
    assert "response.output_text.done" in types
    final = json.loads(store.events_after(rid, len(types) - 2)[0].data)
    assert final["response"]["output"] == response.output
    [request] = model.requests
    assert request.model == "antwort-sim"
    assert request.items[0]["content"] == [{"type": "input_text", "text": "What is the weather?"}]


def test_run_turn_pauses_on_function_calls_as_completed_by_default(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid = create(store, settings, RecordingDispatcher(), tools=[WEATHER_TOOL])
    model = FakeModel(
        ToolCallDelta(index=0, call_id="call_1", name="get_weather", arguments='{"city":'),
        ToolCallDelta(index=0, arguments='"Oslo"}'),
        Finish(reason="tool_calls"),
    )

    status = advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    assert status == "completed"
    response = store.get(rid).response
    assert response.status == "completed"
    [call] = response.output
    assert (call["type"], call["call_id"], call["arguments"]) == (
        "function_call",
        "call_1",
        '{"city":"Oslo"}',
    )
    assert event_types(store, rid)[-1] == "response.completed"
    assert model.requests[0].tools == [{**WEATHER_TOOL, "description": None, "strict": None}]


def test_run_turn_pauses_with_requires_action_when_configured(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(client_tool_status="requires_action")
    rid = create(store, settings, RecordingDispatcher(), tools=[WEATHER_TOOL])
    model = FakeModel(
        ToolCallDelta(index=0, call_id="call_1", name="get_weather", arguments="{}"),
        Finish(reason="tool_calls"),
    )

    status = advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    assert status == "requires_action"
    assert store.get(rid).response.status == "requires_action"
    types = event_types(store, rid)
    assert types.count("response.completed") == 1
    assert types[-1] == "response.completed"


def test_the_run_takes_the_answer_format_from_the_response_not_from_the_run_fields(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """The response echoes its ``text.format``: a schema, megabytes maybe, need not be repeated
    in the run's fields (a later release stops writing it there)."""
    settings = make_settings()
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    text_format = {"type": "json_schema", "name": "place", "schema": schema, "strict": True}
    rid = create(store, settings, RecordingDispatcher(), text={"format": text_format})
    stored = store.get(rid)
    expected = {
        "type": "json_schema",
        "json_schema": {"name": "place", "schema": schema, "strict": True},
    }
    # written for workers of earlier releases, which read it only there
    assert stored.extra["params"]["response_format"] == expected
    params = {k: v for k, v in stored.extra["params"].items() if k != "response_format"}
    store.set_extra(rid, {**stored.extra, "params": params})
    model = FakeModel(TextDelta(text='{"city": "Oslo"}'), Finish(reason="stop"))

    status = advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    assert status == "completed"
    assert model.requests[0].params["response_format"] == expected


def test_run_turn_finish_length_is_incomplete(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid = create(store, settings, RecordingDispatcher(), max_output_tokens=3)
    model = FakeModel(TextDelta(text="Once upon"), Finish(reason="length"))

    status = advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    assert status == "incomplete"
    response = store.get(rid).response
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output[-1]["status"] == "incomplete"
    types = event_types(store, rid)
    assert types[-1] == "response.incomplete"
    assert "response.completed" not in types
    assert model.requests[0].params["max_tokens"] == 3


def test_run_turn_upstream_error_fails_the_response(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid = create(store, settings, RecordingDispatcher())
    model = FakeModel(TextDelta(text="Hal"), UpstreamError("Model server answered 503: busy"))

    status = advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    assert status == "failed"
    response = store.get(rid).response
    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == "server_error"
    assert response.error.message == "Model server answered 503: busy"
    types = event_types(store, rid)
    assert types[-2:] == ["error", "response.failed"]
    assert "response.output_text.delta" in types  # what streamed before the error stays
    assert "response.completed" not in types
    error = json.loads(store.events_after(rid, len(types) - 3)[0].data)
    assert error["code"] == "server_error"
    assert error["error"]["message"] == "Model server answered 503: busy"


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        ("upstream_error", "server_error"),  # failed as `server_error`, which clients retry
        ("rate_limit_exceeded", "requests"),
        ("context_length_exceeded", "invalid_request_error"),
        ("model_not_found", "invalid_request_error"),
        ("invalid_prompt", "invalid_request_error"),
    ],
)
def test_a_failed_response_s_error_has_the_type_of_its_code(
    store: ResponseStore, make_settings: Callable[..., Settings], code: str, error_type: str
) -> None:
    """The model server's refusal of the prompt is the request's fault, its last 429 a rate
    limit, as their HTTP errors would say: before, every failure was a ``server_error``."""
    settings = make_settings()
    rid = create(store, settings, RecordingDispatcher())
    model = FakeModel(UpstreamError("Model server answered: no", code=code))

    advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    error = store.get(rid).response.error
    assert error is not None
    assert error.type == error_type
    *_, event, failed = store.events_after(rid, -1)
    assert json.loads(event.data)["error"]["type"] == error_type
    assert json.loads(failed.data)["response"]["error"]["type"] == error_type


def test_run_turn_stops_when_cancelled_mid_stream(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(coalesce_ms=0)
    dispatcher = RecordingDispatcher()
    rid = create(store, settings, dispatcher, background=True)
    at_cancel: list[int] = []

    def cancel() -> None:
        cancel_response(store, dispatcher, rid)
        at_cancel.append(store.last_sequence_number(rid))

    model = FakeModel(
        *[TextDelta(text=f"{i} ") for i in range(5)],
        cancel,
        *[TextDelta(text=f"{i} ") for i in range(5, 50)],
        Finish(reason="stop"),
    )

    status = advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    assert status == "skipped"
    assert model.closed
    assert model.yielded < 10
    assert dispatcher.revoked == [(rid, 0)]
    assert store.get(rid).response.status == "cancelled"
    assert store.get(rid).response.output == []
    assert store.last_sequence_number(rid) == at_cancel[0]
    assert "response.completed" not in event_types(store, rid)


def test_run_turn_of_a_committed_turn_is_skipped(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid = create(store, settings, RecordingDispatcher())
    model = answer("Sunny.")
    deps = RunDeps(store=store, provider=model, settings=settings)
    assert advance_response(deps, rid, 0) == "completed"
    before = store.get(rid)
    last = store.last_sequence_number(rid)

    assert advance_response(deps, rid, 0) == "skipped"
    assert advance_response(deps, rid, 1) == "skipped"

    assert len(model.requests) == 1
    assert store.last_sequence_number(rid) == last
    assert store.get(rid).version == before.version


def test_run_turn_of_an_unknown_response_is_skipped(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    model = answer("Sunny.")
    deps = RunDeps(store=store, provider=model, settings=make_settings())

    assert advance_response(deps, "resp_missing", 0) == "skipped"
    assert model.requests == []


def test_run_turn_sends_the_previous_response_chain_without_its_instructions(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    dispatcher = RecordingDispatcher()
    first = create(store, settings, dispatcher, input="Hi", instructions="Answer in French.")
    advance_response(RunDeps(store=store, provider=answer("Bonjour"), settings=settings), first, 0)
    second = create(store, settings, dispatcher, input="Again?", previous_response_id=first)
    model = answer("Encore")

    assert advance_response(RunDeps(store=store, provider=model, settings=settings), second, 0) == (
        "completed"
    )

    [request] = model.requests
    assert request.instructions is None
    assert [(item["type"], item["role"]) for item in request.items] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert request.items[0]["content"][0]["text"] == "Hi"
    assert request.items[1] == store.get(first).response.output[0]
    assert request.items[2]["content"][0]["text"] == "Again?"
    assert "French" not in json.dumps(request.items)
    assert store.get(second).response.previous_response_id == first


def test_run_turn_chain_uses_the_new_instructions(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    dispatcher = RecordingDispatcher()
    first = create(store, settings, dispatcher, input="Hi", instructions="Answer in French.")
    advance_response(RunDeps(store=store, provider=answer("Bonjour"), settings=settings), first, 0)
    second = create(
        store,
        settings,
        dispatcher,
        input="Again?",
        previous_response_id=first,
        instructions="Be brief.",
    )
    model = answer("Encore")

    advance_response(RunDeps(store=store, provider=model, settings=settings), second, 0)

    assert model.requests[0].instructions == "Be brief."


def test_model_cancel_is_a_step_that_ends_the_response_cancelled(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    rid = create(store, settings, RecordingDispatcher())
    model = FakeModel(
        TextDelta(text="I cannot do that."),
        Finish(reason=MODEL_CANCELLED),
        UsageReport(usage=USAGE),
    )

    outcome = advance_response(RunDeps(store=store, provider=model, settings=settings), rid, 0)

    assert outcome is StepOutcome.CANCELLED
    stored = store.get(rid)
    assert stored.response.status == "cancelled" and stored.turn == 1
    assert stored.response.output[0]["content"][0]["text"] == "I cannot do that."
    types = event_types(store, rid)
    # The turn's events are written with the cancel; no terminal event follows, as a cancel.
    assert types[-1] == "response.output_item.done"
    assert not [t for t in types if t in ("response.completed", "response.failed")]


def test_plan_next_step_cancels_before_anything_else_when_the_model_gave_up(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    response = stored_response(store)
    call = {"type": "function_call", "call_id": "c", "name": "x", "arguments": "{}"}
    output = TurnOutput(items=[call], calls=[call], finish_reason=MODEL_CANCELLED, usage=USAGE)
    step = plan_next_step(make_settings(), response, output, ToolPlan())
    assert isinstance(step, CancelByModel)


class CountingStore(ResponseStore):
    """A store that counts the records it is asked to load (the chain walk's reads)."""

    loads: list[str]

    def load(self, response_id: str) -> Any:
        self.loads.append(response_id)
        return super().load(response_id)


def test_a_long_chain_is_read_once_per_response_one_record_deep(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """The chain is a snapshot taken at create: a turn never walks it, a create reads one record."""
    settings = make_settings()
    counting = CountingStore(
        store.redis, keys=store.keys, ttl_seconds=settings.response_ttl_seconds
    )
    counting.loads = []
    dispatcher = RecordingDispatcher()
    chain: list[str] = []
    for depth in range(12):
        previous = chain[-1] if chain else None
        rid = create(
            counting, settings, dispatcher, input=f"q{depth}", previous_response_id=previous
        )
        model = answer(f"a{depth}")
        advance_response(RunDeps(store=counting, provider=model, settings=settings), rid, 0)
        chain.append(rid)

    assert counting.loads.count(chain[0]) == 1  # read by its child's create, never again
    assert counting.loads.count(chain[5]) == 1
    texts = [item["content"][0]["text"] for item in model.requests[0].items]
    assert texts == [t for depth in range(12) for t in (f"q{depth}", f"a{depth}")][:-1]

    # the snapshot stands for the whole chain: its ancestors may go, the chain goes on
    for rid in chain[:-1]:
        store.delete(rid)
    last = create(store, settings, dispatcher, input="more", previous_response_id=chain[-1])
    model = answer("done")
    advance_response(RunDeps(store=store, provider=model, settings=settings), last, 0)
    assert len(model.requests[0].items) == 2 * 12 + 1
