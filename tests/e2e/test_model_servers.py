"""Model servers that stream otherwise than the simulator, as real ones do.

The session's inference worker is swapped for one whose model server is the simulator behind
a proxy (``tests.support.model_proxy``); each test says how the proxy changes the answers:

- every tool call of a turn numbered 0, as Ollama does for models without a tool parser of
  their own (ollama/ollama#15457, #15497). Each call arrives whole with an id of its own: a
  turn's parallel calls stay apart, on the fleet and at the client;
- each call's first fragment numbered apart from the rest, as SGLang does
  (sgl-project/sglang#6310): each call keeps its arguments;
- a whole completion for a request to stream: the answer arrives all at once;
- each stream ended before the model's finish, or with vLLM's finish reason ``abort``: the
  response fails, and says why.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import CLIENT_FN, internal
from tests.support.model_proxy import (
    EditEvents,
    ModelProxy,
    aborted,
    before_the_finish,
    every_call_numbered_0,
    model_proxy,
    not_streamed,
    openings_numbered_apart,
)


@pytest.fixture(scope="module")
def proxy(fleet: Fleet, sim_url: str) -> Iterator[ModelProxy]:
    """The proxy the fleet's inference worker talks to while this module runs."""
    with model_proxy(sim_url) as proxy, fleet.inference_worker_on(proxy.url):
        yield proxy


@pytest.mark.parametrize(
    "numbering",
    [every_call_numbered_0, openings_numbered_apart],
    ids=["every-call-0", "openings-apart"],
)
def test_parallel_calls_numbered_otherwise_run_apart_on_the_fleet(
    proxy: ModelProxy, client: openai.OpenAI, numbering: EditEvents
) -> None:
    proxy.behave(events=numbering)

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
    proxy: ModelProxy, client: openai.OpenAI
) -> None:
    proxy.behave(events=every_call_numbered_0)

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


def test_a_server_that_does_not_stream_answers_through_a_stream(
    proxy: ModelProxy, client: openai.OpenAI
) -> None:
    proxy.behave(request=not_streamed)

    events = list(
        client.responses.create(
            model="antwort-sim",
            input="use calculator expression=6*7",
            tools=internal("calculator"),  # type: ignore[arg-type]
            stream=True,
        )
    )

    assert events[-1].type == "response.completed"
    response = events[-1].response
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert [item.type for item in response.output] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    assert "".join(deltas) == response.output_text == "Tool results: 42"


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (before_the_finish, "ended its answer before it finished"),
        (aborted, "gave up on its answer (finish_reason 'abort')"),
    ],
    ids=["cut", "aborted"],
)
def test_an_answer_the_model_server_did_not_finish_fails_the_response(
    proxy: ModelProxy, client: openai.OpenAI, edit: EditEvents, reason: str
) -> None:
    proxy.behave(events=edit)

    response = client.responses.create(model="antwort-sim", input="Hello!")

    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == "server_error"
    assert reason in response.error.message
