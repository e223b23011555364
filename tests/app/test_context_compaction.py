"""``context_management: [{"type": "compaction", "compact_threshold": N}]``: a response compacts
its context before a model turn whose prompt the model server counts at ``N`` tokens or more."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pydantic
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent

from app.config import Settings
from app.providers.chunks import Finish, TextDelta
from app.providers.translate import to_chat_messages
from app.responses import create_response
from app.run import TEMPLATE_TOKENS, RunDeps, advance_response
from app.sealing import SUMMARY_HEADER
from app.store import ResponseStore
from app.summary import SUMMARY_REQUEST
from tests.app.test_client_kinds import Turn
from tests.app.test_run import USAGE, FakeModel, answer
from tests.support.dispatch import RecordingDispatcher

OUTPUT_ITEM: pydantic.TypeAdapter[ResponseOutputItem] = pydantic.TypeAdapter(ResponseOutputItem)
STREAM_EVENT: pydantic.TypeAdapter[ResponseStreamEvent] = pydantic.TypeAdapter(ResponseStreamEvent)
PROMPT = USAGE.input_tokens  # what the fake model server reports for every prompt


def compacting(threshold: int | None = None) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"type": "compaction"}
    if threshold is not None:
        entry["compact_threshold"] = threshold
    return [entry]


def run(store: ResponseStore, settings: Settings, model: FakeModel, /, **body: Any) -> Turn:
    body = {"model": "m", "background": True, **body}
    response, _ = create_response(store, RecordingDispatcher(), settings, body)
    advance_response(RunDeps(store=store, provider=model, settings=settings), response.id, 0)
    events = [json.loads(e.data) for e in store.events_after(response.id, -1)]
    return Turn(response.id, store.get(response.id).response.output, events, model)


def chained(store: ResponseStore, settings: Settings, model: FakeModel, /, **body: Any) -> Turn:
    """A response continuing a one-response chain (an answer the summary can cover)."""
    first = run(store, settings, answer("Noted: Tuesday."), input="We launch on Tuesday.")
    return run(store, settings, model, previous_response_id=first.response_id, **body)


def asked(store: ResponseStore, settings: Settings, /, **body: Any) -> Turn:
    """ "When?", continuing a one-response chain, answered "On Tuesday."."""
    return chained(store, settings, answer("On Tuesday."), input="When?", **body)


def test_a_prompt_at_the_threshold_is_compacted_before_the_models_turn(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    turn = asked(
        store,
        make_settings(),
        context_management=compacting(PROMPT),
    )

    measured, summary, answered = turn.model.requests
    assert measured.params["max_tokens"] == 1
    assert summary.items[-1]["content"] == SUMMARY_REQUEST
    assert [m["content"] for m in to_chat_messages(None, summary.items)][:3] == [
        "We launch on Tuesday.",
        "Noted: Tuesday.",
        "When?",
    ]
    assert to_chat_messages(None, answered.items) == [
        {"role": "user", "content": "We launch on Tuesday."},
        {"role": "user", "content": "When?"},
        {"role": "assistant", "content": f"{SUMMARY_HEADER}\nOn Tuesday."},
    ]
    compaction, message = turn.output
    assert compaction["type"] == "compaction" and compaction["id"].startswith("cmp_")
    assert message["type"] == "message"
    for item in turn.output:
        OUTPUT_ITEM.validate_python(item)
    for event in turn.events:
        STREAM_EVENT.validate_python(event)
    done = [e["item"]["type"] for e in turn.events if e["type"] == "response.output_item.done"]
    assert done == ["compaction", "message"]
    usage = turn.events[-1]["response"]["usage"]
    assert usage["input_tokens"] == 2 * PROMPT  # the summary's turn and the model's


def test_a_prompt_under_the_threshold_is_not_compacted(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    turn = asked(
        store,
        make_settings(),
        context_management=compacting(PROMPT + 1),
    )

    measured, answered = turn.model.requests
    assert measured.params["max_tokens"] == 1 and "max_tokens" not in answered.params
    assert [item["type"] for item in turn.output] == ["message"]


def test_nothing_a_summary_would_shorten_is_neither_measured_nor_compacted(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    turn = run(
        store,
        make_settings(),
        answer("Hello."),
        input="We launch on Tuesday.",
        context_management=compacting(1),
    )

    [answered] = turn.model.requests
    assert [item["type"] for item in turn.output] == ["message"]
    assert answered.items[0]["content"][0]["text"] == "We launch on Tuesday."


def test_without_context_management_nothing_is_measured(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    turn = asked(store, make_settings(compact_threshold=1))

    assert len(turn.model.requests) == 1


def test_an_entry_without_a_threshold_takes_the_fleets(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    with_default = asked(
        store,
        make_settings(compact_threshold=PROMPT),
        context_management=compacting(),
    )
    without = asked(
        store,
        make_settings(),
        context_management=compacting(),
    )

    assert [item["type"] for item in with_default.output] == ["compaction", "message"]
    assert [item["type"] for item in without.output] == ["message"]
    assert len(without.model.requests) == 1


def test_a_server_that_reports_no_usage_is_not_compacted(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    silent = FakeModel(TextDelta(text="On Tuesday."), Finish(reason="stop"))

    turn = chained(store, make_settings(), silent, input="When?", context_management=compacting(1))

    assert [item["type"] for item in turn.output] == ["message"]
    assert len(silent.requests) == 2  # measured, then answered


def test_a_stateless_history_is_compacted_and_the_next_request_shown_from_the_item(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    call = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}
    result = {"type": "function_call_output", "call_id": "c1", "output": "Tuesday"}
    history = [{"role": "user", "content": "When do we launch?"}, call, result]

    turn = run(
        store,
        settings,
        answer("Tuesday."),
        input=history,
        store=False,
        context_management=compacting(PROMPT),
    )
    compaction, message = turn.output

    after = run(
        store,
        settings,
        answer("Yes."),
        input=[*history, compaction, message, {"role": "user", "content": "Sure?"}],
        store=False,
    )
    assert [m["role"] for m in to_chat_messages(None, after.model.requests[0].items)] == [
        "user",
        "assistant",
        "assistant",
        "user",
    ]


def test_a_prompt_surely_under_the_threshold_by_its_bytes_is_not_counted(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """Its tokens are at most its bytes as JSON plus what a template adds: no call to count
    them, so the turn makes one model call. Before, every turn made two."""
    turn = asked(store, make_settings(), context_management=compacting(TEMPLATE_TOKENS + 4000))

    [answered] = turn.model.requests
    assert "max_tokens" not in answered.params
    assert [item["type"] for item in turn.output] == ["message"]


def test_a_prompt_over_the_bound_or_with_an_image_is_counted_by_the_server(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    image = {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}
    for question in ("When? " + "x" * 5000, [{"type": "input_text", "text": "When?"}, image]):
        turn = chained(
            store,
            make_settings(),
            answer("On Tuesday."),
            input=[{"role": "user", "content": question}],
            context_management=compacting(TEMPLATE_TOKENS + 4000),
        )

        measured, answered = turn.model.requests
        assert measured.params["max_tokens"] == 1 and "max_tokens" not in answered.params
