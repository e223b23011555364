"""``additional_tools`` input items on the fleet: Codex CLI's "lite" request shape (no
``instructions``, no ``tools``: an ``additional_tools`` item and a developer message first)."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import CLIENT_FN, check_sequence, internal, raw_events, validate_event


def lite_input(text: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"type": "additional_tools", "role": "developer", "tools": tools},
        {"role": "developer", "content": "You are a coding agent."},
        {"role": "user", "content": text},
    ]


def test_a_lite_request_streams_and_runs_a_server_tool_it_added(fleet: Fleet) -> None:
    body = {
        "model": "antwort-sim",
        "input": lite_input("use calculator expression=6*7", internal("calculator")),
        "reasoning": {"effort": "medium", "context": "all_turns"},
        "store": False,
        "stream": True,
    }

    answer = httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=60)

    events = raw_events(answer)
    for event in events:  # (the response's tools hold an internal one, which no SDK types)
        if "response" not in event:
            validate_event(event)
    check_sequence(events)
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert [item["type"] for item in final["output"]] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    assert final["output"][-1]["content"][0]["text"] == "Tool results: 42"


def test_a_call_of_an_added_client_function_pauses_for_the_client(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input=lite_input('Weather? [call get_weather {"city": "Oslo"}]', [CLIENT_FN]),  # type: ignore[arg-type]
    )

    [function_call] = response.output
    assert function_call.type == "function_call" and function_call.name == "get_weather"
    items = client.responses.input_items.list(response.id, order="asc").data
    assert items[0].type == "additional_tools"  # type: ignore[comparison-overlap]
