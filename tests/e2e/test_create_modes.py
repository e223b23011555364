"""``POST /v1/responses`` in its three modes (plain, streaming, background) and their mix."""

from __future__ import annotations

import uuid
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseInputFile, ResponseInputMessageItem, ResponseInputText

from tests.e2e.helpers import check_sequence, validate_event, validate_response, wait_for_status
from tests.support.recording import Recorder


def _stream_events(client: openai.OpenAI, **params: Any) -> list[dict[str, Any]]:
    with client.responses.create(model="antwort-sim", stream=True, **params) as stream:
        return [event.to_dict() for event in stream]


def _check_text_turn(events: list[dict[str, Any]], expected_text: str) -> None:
    check_sequence(events)
    for event in events:
        validate_event(event)
    assert events[-1]["type"] == "response.completed"
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas
    assert all(delta["logprobs"] == [] for delta in deltas)
    assert "".join(delta["delta"] for delta in deltas) == expected_text
    (done,) = [e for e in events if e["type"] == "response.output_text.done"]
    assert done["text"] == expected_text
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == expected_text
    body = [e["type"] for e in events if not e["type"].startswith("response.output_text.delta")]
    assert body[-6:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_create_plain_returns_completed_response(client: openai.OpenAI) -> None:
    response = client.responses.create(model="antwort-sim", input="plain mode [tokens=12]")
    assert response.status == "completed"
    assert response.background is False
    assert response.id.startswith("resp_")
    assert response.output_text.startswith("Simulated answer to: plain mode")
    assert len(response.output_text.split()) == 12
    assert response.usage is not None and response.usage.output_tokens == 12
    validate_response(response.to_dict())
    # The stored copy is the same response.
    assert client.responses.retrieve(response.id).to_dict() == response.to_dict()


def test_create_stream_emits_spec_events_in_order(client: openai.OpenAI) -> None:
    events = _stream_events(client, input="stream mode [tokens=30]")
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert "response.queued" not in {e["type"] for e in events}
    assert events[0]["response"]["status"] == "queued"
    assert events[1]["response"]["status"] == "in_progress"
    final = events[-1]["response"]
    _check_text_turn(events, final["output"][0]["content"][0]["text"])
    assert final["output"][0]["content"][0]["text"].startswith("Simulated answer to: stream mode")
    assert len(final["output"][0]["content"][0]["text"].split()) == 30


def test_create_background_returns_queued_then_completes(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model="antwort-sim", input="background mode [tokens=40] [delay_ms=5]", background=True
    )
    assert created.status == "queued"
    assert created.background is True
    assert created.output == []
    validate_response(created.to_dict())
    done = wait_for_status(client, created.id, {"completed", "failed", "cancelled"})
    assert done.status == "completed"
    assert done.output_text.startswith("Simulated answer to: background mode")
    assert done.completed_at is not None
    validate_response(done.to_dict())


def test_create_background_stream_includes_queued_event(client: openai.OpenAI) -> None:
    events = _stream_events(client, input="background stream [tokens=25]", background=True)
    assert [e["type"] for e in events[:3]] == [
        "response.created",
        "response.queued",
        "response.in_progress",
    ]
    assert events[0]["response"]["background"] is True
    final = events[-1]["response"]
    _check_text_turn(events, final["output"][0]["content"][0]["text"])
    retrieved = client.responses.retrieve(final["id"])
    assert retrieved.status == "completed"
    assert retrieved.output_text == final["output"][0]["content"][0]["text"]


def test_create_background_in_a_completion_window_completes(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model="antwort-sim",
        input="windowed [tokens=8]",
        background=True,
        background_options={"completion_window": "2h", "continuation_id": "nightly-batch"},
    )
    assert created.status == "queued"
    assert "background_options" not in created.to_dict()  # OpenAI's response has no such field
    done = wait_for_status(client, created.id, {"completed", "failed", "cancelled"})
    assert done.status == "completed"
    assert len(done.output_text.split()) == 8

    with pytest.raises(openai.BadRequestError) as caught:  # the 2h and 8h windows never stream
        client.responses.create(
            model="antwort-sim",
            input="windowed stream",
            background=True,
            stream=True,
            background_options={"completion_window": "8h"},
        )
    assert caught.value.param == "background_options.completion_window"
    assert caught.value.code == "invalid_value"


def test_content_parts_with_cache_breakpoints_and_a_file_detail_are_taken_and_kept(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    # openai 3.x's content part fields (each part was a 400 "Unknown parameter" before)
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    breakpoint: Any = {"mode": "explicit", "ttl": "30m"}
    content: Any = [
        {"type": "input_text", "text": f"{marker} hello", "prompt_cache_breakpoint": breakpoint},
        {"type": "input_file", "filename": "a.txt", "file_data": FILE, "detail": "low"},
    ]

    response = client.responses.create(
        model="antwort-sim", input=[{"role": "user", "content": content}]
    )

    assert response.status == "completed"
    [message] = client.responses.input_items.list(response.id).data
    assert isinstance(message, ResponseInputMessageItem)
    text, file = message.content
    assert isinstance(text, ResponseInputText) and isinstance(file, ResponseInputFile)
    assert text.prompt_cache_breakpoint is not None
    assert text.prompt_cache_breakpoint.model_dump() == breakpoint
    assert file.detail == "low"
    [user] = sent[0]["messages"]
    assert user["content"][0] == {"type": "text", "text": f"{marker} hello"}  # as before


FILE = "data:text/plain;base64,aGk="
