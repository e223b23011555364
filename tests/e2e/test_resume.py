"""Resuming a response's event stream: ``GET /v1/responses/{id}?stream=true&starting_after=N``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import (
    assert_error_body,
    check_sequence,
    raw_events,
    validate_event,
    wait_for_status,
)


def _resume(client: openai.OpenAI, response_id: str, **params: Any) -> list[dict[str, Any]]:
    with client.responses.retrieve(response_id, stream=True, **params) as stream:
        return [event.to_dict() for event in stream]


def test_resume_after_dropped_connection_delivers_every_event_once(client: openai.OpenAI) -> None:
    first: list[dict[str, Any]] = []
    with client.responses.create(
        model="antwort-sim",
        input="resume me [tokens=200] [delay_ms=25]",
        background=True,
        stream=True,
    ) as stream:
        for event in stream:
            first.append(event.to_dict())
            if sum(e["type"] == "response.output_text.delta" for e in first) >= 3:
                break
    assert first[-1]["type"] == "response.output_text.delta"
    response_id = first[0]["response"]["id"]
    last_seen = first[-1]["sequence_number"]
    # The turn goes on without a listener.
    assert client.responses.retrieve(response_id).status == "in_progress"

    rest = _resume(client, response_id, starting_after=last_seen)

    assert rest[0]["sequence_number"] == last_seen + 1
    union = first + rest
    check_sequence(union)
    for payload in union:
        validate_event(payload)
    assert union[-1]["type"] == "response.completed"
    text = "".join(e["delta"] for e in union if e["type"] == "response.output_text.delta")
    final = union[-1]["response"]
    assert text == final["output"][0]["content"][0]["text"]
    assert len(text.split()) == 200


def test_resume_raw_sse_framing(client: openai.OpenAI, fleet: Fleet) -> None:
    created = client.responses.create(
        model="antwort-sim", input="framing [tokens=30] [delay_ms=2]", background=True
    )
    with httpx.stream(
        "GET",
        f"{fleet.base_url}/v1/responses/{created.id}",
        params={"stream": "true", "starting_after": "0"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        body = response.read().decode()

    assert body.endswith("data: [DONE]\n\n")
    blocks = [block for block in body.split("\n\n") if block]
    events = []
    for block in blocks[:-1]:
        if block.startswith(":"):  # a comment (connected / keepalive)
            assert "\n" not in block
            continue
        event_line, data_line = block.split("\n")  # exactly two lines, no id:
        assert event_line.startswith("event: ")
        assert data_line.startswith("data: ")
        event = json.loads(data_line.removeprefix("data: "))
        assert event["type"] == event_line.removeprefix("event: ")
        events.append(event)
    assert blocks[-1] == "data: [DONE]"
    check_sequence(events, start=1)
    assert events[-1]["type"] == "response.completed"


def test_resume_late_joiner_replays_everything(client: openai.OpenAI, fleet: Fleet) -> None:
    created = client.responses.create(
        model="antwort-sim", input="late joiner [tokens=15]", background=True
    )
    done = wait_for_status(client, created.id, {"completed", "failed"})
    assert done.status == "completed"

    events = _resume(client, created.id)

    check_sequence(events)
    for event in events:
        validate_event(event)
    assert [e["type"] for e in events[:3]] == [
        "response.created",
        "response.queued",
        "response.in_progress",
    ]
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == done.output_text
    # The same history over raw HTTP, twice: replays are repeatable.
    url = f"{fleet.base_url}/v1/responses/{created.id}"
    again = httpx.get(url, params={"stream": "true"}, timeout=10)
    assert raw_events(again) == events
    tail = httpx.get(url, params={"stream": "true", "starting_after": "3"}, timeout=10)
    assert raw_events(tail) == events[4:]


@pytest.mark.parametrize("starting_after", ["abc", "-5", "1.5"])
def test_resume_invalid_starting_after_is_400(
    client: openai.OpenAI, fleet: Fleet, starting_after: str
) -> None:
    created = client.responses.create(model="antwort-sim", input="cursor [tokens=3]")
    response = httpx.get(
        f"{fleet.base_url}/v1/responses/{created.id}",
        params={"stream": "true", "starting_after": starting_after},
        timeout=10,
    )
    error = assert_error_body(response, 400)
    assert error["param"] == "starting_after"
    assert error["type"] == "invalid_request_error"
