"""Model servers that stream otherwise than the simulator, as real ones do.

The session's inference worker is swapped for one whose model server numbers every tool call
of a turn 0, as Ollama does for models without a tool parser of their own
(``tests.support.model_proxy``; ollama/ollama#15457, #15497). Each call arrives whole with an
id of its own: a turn's parallel calls stay apart, on the fleet and at the client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import CLIENT_FN, internal
from tests.support.model_proxy import ollama_numbered_model


@pytest.fixture(scope="module")
def ollama_fleet(fleet: Fleet, sim_url: str) -> Iterator[Fleet]:
    """The fleet, its inference worker talking to a model that numbers every call 0."""
    with ollama_numbered_model(sim_url) as model_url, fleet.inference_worker_on(model_url):
        yield fleet


def test_parallel_calls_numbered_alike_run_apart_on_the_fleet(
    ollama_fleet: Fleet, client: openai.OpenAI
) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input='[call calculator {"expression": "6*7"}] [call calculator {"expression": "2+3"}]',
        tools=internal("calculator"),  # type: ignore[arg-type]
    )

    assert response.status == "completed"
    calls = [item for item in response.output if item.type == "function_call"]
    assert [json.loads(call.arguments) for call in calls] == [  # type: ignore[union-attr]
        {"expression": "6*7"},
        {"expression": "2+3"},
    ]
    assert response.output_text == "Tool results: 42; 5"


def test_parallel_client_calls_numbered_alike_reach_the_client_apart(
    ollama_fleet: Fleet, client: openai.OpenAI
) -> None:
    with client.responses.stream(
        model="antwort-sim",
        input='[call get_weather {"city": "Oslo"}] [call get_weather {"city": "Rome"}]',
        tools=[CLIENT_FN],  # type: ignore[list-item]
    ) as stream:
        done = [
            event.item
            for event in stream
            if event.type == "response.output_item.done" and event.item.type == "function_call"
        ]
        response = stream.get_final_response()

    assert [json.loads(item.arguments) for item in done] == [{"city": "Oslo"}, {"city": "Rome"}]  # type: ignore[union-attr]
    assert len({item.call_id for item in done}) == 2  # type: ignore[union-attr]
    assert [item.call_id for item in response.output] == [item.call_id for item in done]  # type: ignore[union-attr]
