"""The JSON tool protocol on the real fleet: the simulator answers in directives, tools run on
``tools.internal`` workers, and clients see the same items and events as with native calls."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import (
    CLIENT_FN,
    check_sequence,
    internal,
    raw_events,
    validate_event,
    wait_for_status,
)

JSON_MODE = {"antwort_tool_protocol": "json"}


def create(client: openai.OpenAI, text: str, *tools: str, **extra: Any) -> Any:
    return client.responses.create(
        model="antwort-sim",
        input=text,
        tools=internal(*tools),  # type: ignore[arg-type]
        metadata=JSON_MODE,
        **extra,
    )


def kinds(response: Any) -> list[str]:
    return [item.type for item in response.output]


def test_json_direct_reply_after_a_plan(client: openai.OpenAI) -> None:
    response = create(client, "hello there [tokens=6]")
    assert response.status == "completed"
    assert kinds(response) == ["message"]
    assert response.output_text == "Simulated answer to: hello there lorem"


def test_json_plan_then_single_tool(client: openai.OpenAI) -> None:
    response = create(client, "please use calculator expression=6*7", "calculator")
    assert response.status == "completed"
    assert kinds(response) == ["function_call", "function_call_output", "message"]
    call, result, _ = response.output
    assert (call.name, json.loads(call.arguments)) == ("calculator", {"expression": "6*7"})  # type: ignore[union-attr]
    assert result.call_id == call.call_id and result.output == "42"  # type: ignore[union-attr]
    assert response.output_text == "Tool results: 42"


class Forecast(BaseModel):
    city: str
    summary: str


def test_json_structured_answer_parses_with_the_sdk(client: openai.OpenAI) -> None:
    """``text.format`` reaches a model on the protocol through its prompt, an answer that is not
    the format is repaired, and only the answer is text: ``responses.parse`` takes it."""
    response = client.responses.parse(
        model="antwort-sim",
        input="[json_fault=bad_format] the forecast city=Oslo summary=wet",
        metadata=JSON_MODE,
        text_format=Forecast,
    )
    assert response.status == "completed"
    assert kinds(response) == ["message"]
    assert response.output_parsed == Forecast(city="Oslo", summary="wet")


def test_json_multi_step_loop_runs_one_tool_per_turn(client: openai.OpenAI) -> None:
    response = create(client, "fast_echo then calculator expression=2+3", "fast_echo", "calculator")
    assert response.status == "completed"
    assert kinds(response) == [
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert response.output_text == "Tool results: fast_echo done; 5"


@pytest.mark.parametrize("fault", ["bad_json", "bad_schema", "no_plan", "unknown_tool", "bad_args"])
def test_json_broken_answer_is_repaired_on_the_second_try(
    client: openai.OpenAI, fault: str
) -> None:
    response = create(client, f"[json_fault={fault}] use fast_echo", "fast_echo")
    assert response.status == "completed", response.error
    assert kinds(response) == ["function_call", "function_call_output", "message"]
    assert response.output_text == "Tool results: fast_echo done"


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("bad_json", "your answer is not valid JSON ("),
        ("unknown_tool", "there is no tool named 'sim_fault_tool'; the tools are: fast_echo"),
        (
            "bad_args",
            "the args for 'fast_echo' do not match its schema at 'note': "
            "12345 is not of type 'string'",
        ),
    ],
)
def test_json_broken_twice_fails_with_a_clear_error(
    client: openai.OpenAI, fault: str, reason: str
) -> None:
    response = create(client, f"[json_fault={fault},{fault}] use fast_echo", "fast_echo")
    assert response.status == "failed"
    assert response.error is not None
    message = response.error.message
    assert message.startswith("The model did not follow the JSON tool protocol")
    assert f"First answer: {reason}" in message
    assert f"Second answer: {reason}" in message
    assert response.output == []


def test_json_cancel_directive_ends_the_response_cancelled(client: openai.OpenAI) -> None:
    response = create(client, "[json_fault=cancel] use fast_echo", "fast_echo", background=True)
    final = wait_for_status(client, response.id, {"cancelled", "completed", "failed"})
    assert final.status == "cancelled"
    assert final.output_text == "The simulator gives up, as scripted."


def stream(fleet: Fleet, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return raw_events(response)


def test_json_stream_without_include_is_only_standard_events(fleet: Fleet) -> None:
    events = stream(
        fleet,
        {
            "model": "antwort-sim",
            "input": "get_weather city=Paris",
            "tools": [CLIENT_FN],
            "metadata": JSON_MODE,
            "stream": True,
        },
    )
    check_sequence(events)
    for event in events:
        validate_event(event)  # the spec's events only, each matching its schema
    assert events[-1]["type"] == "response.completed"
    [call] = events[-1]["response"]["output"]
    assert (call["name"], call["arguments"]) == ("get_weather", '{"city": "Paris"}')


def test_json_stream_with_progress_carries_plan_and_step_titles(fleet: Fleet) -> None:
    events = stream(
        fleet,
        {
            "model": "antwort-sim",
            "input": "fast_echo then calculator expression=1+1",
            "tools": internal("fast_echo", "calculator"),
            "metadata": JSON_MODE,
            "include": ["antwort:progress"],
            "stream": True,
        },
    )
    check_sequence(events)
    vendor = [e for e in events if e["type"].startswith("antwort:")]
    assert [e["type"] for e in vendor] == [
        "antwort:plan",
        "antwort:step.started",
        "antwort:step.completed",
        "antwort:step.started",
        "antwort:step.completed",
    ]
    assert vendor[0]["steps"] == ["Run fast_echo", "Run calculator", "Write the answer"]
    assert [e.get("title") for e in vendor[1::2]] == ["Run fast_echo", "Run calculator"]
    calls = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    ]
    assert [e["call_id"] for e in vendor[1:]] == [
        calls[0]["call_id"],
        calls[0]["call_id"],
        calls[1]["call_id"],
        calls[1]["call_id"],
    ]
    assert all(e["status"] == "completed" for e in vendor[2::2])


def test_native_stream_with_progress_derives_step_titles(fleet: Fleet) -> None:
    events = stream(
        fleet,
        {
            "model": "antwort-sim",
            "input": "calculator expression=6*7",
            "tools": internal("calculator"),
            "include": ["antwort:progress"],
            "stream": True,
        },
    )
    vendor = [e for e in events if e["type"].startswith("antwort:")]
    assert [(e["type"], e.get("title")) for e in vendor] == [
        ("antwort:step.started", "calculator: expression=6*7"),
        ("antwort:step.completed", None),
    ]


BACKTRACKING = r"^(a+)+$"
"""Python's ``re`` takes 2**n steps over ``"a" * n + "!"`` against it."""


def test_json_a_client_schema_s_backtracking_pattern_does_not_hold_the_worker(
    client: openai.OpenAI,
) -> None:
    """A tenant's tool schema is checked on the shared worker: its pattern cannot stall it."""
    code = "a" * 64 + "!"
    lookup = {
        "type": "function",
        "name": "lookup",
        "description": "Look a code up.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": BACKTRACKING}},
        },
    }
    response = client.responses.create(
        model="antwort-sim",
        input=f'please use lookup code="{code}"',
        tools=[lookup],  # type: ignore[list-item]
        metadata=JSON_MODE,
    )
    # the call broke the schema: the model was told so and answered instead (a call that passed
    # would have paused the response for the client with a function_call)
    assert response.status == "completed", response.error
    assert kinds(response) == ["message"]

    after = create(client, "hello there [tokens=6]")
    assert after.status == "completed"
