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
  response fails, and says why;
- a prompt refused as longer than the model's context, or a model the server does not have: the
  response fails with OpenAI's code for it, and Codex CLI tells its user so at once instead of
  asking again five times.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import CLIENT_FN, internal, raw_events, validate_event
from tests.e2e.test_codex import needs_codex, run_codex
from tests.support.model_proxy import (
    EditEvents,
    ModelProxy,
    Refusal,
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


CONTEXT_OVERFLOW = Refusal(
    400,
    {
        "object": "error",  # as vLLM answers it
        "message": "This model's maximum context length is 4096 tokens. However, you requested "
        "5120 tokens (4096 in the messages, 1024 in the completion). Please reduce the length of "
        "the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
)
NO_SUCH_MODEL = Refusal(
    404,
    {
        "object": "error",
        "message": "The model `antwort-sim` does not exist.",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    },
)


def test_a_prompt_longer_than_the_model_context_fails_the_response_as_openai_fails_it(
    proxy: ModelProxy, fleet: Fleet
) -> None:
    proxy.behave(refusal=CONTEXT_OVERFLOW)

    answer = httpx.post(
        f"{fleet.base_url}/v1/responses",
        json={"model": "antwort-sim", "input": "Hello!", "stream": True},
        timeout=30,
    )

    events = raw_events(answer)
    for event in events:
        validate_event(event, sdk_error_code=False)  # the code is OpenAI's, not in its SDK's list
    assert [event["type"] for event in events][-2:] == ["error", "response.failed"]
    assert events[-2]["code"] == events[-2]["error"]["code"] == "context_length_exceeded"
    error = events[-1]["response"]["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith(
        "Model server answered 400: This model's maximum context length is 4096 tokens."
    )


def test_truncation_auto_leaves_the_oldest_turns_out_until_the_prompt_fits(
    proxy: ModelProxy, client: openai.OpenAI
) -> None:
    """``truncation: "auto"``: a prompt the server refuses as too long is sent again without
    its oldest turns; ``disabled`` (the default) fails as the server says."""
    proxy.behave()
    first = client.responses.create(model="antwort-sim", input="One.")
    second = client.responses.create(
        model="antwort-sim", input="Two.", previous_response_id=first.id
    )
    asked_before = len(proxy.exchanges)
    # a context of four messages: the instructions, a turn, and the question
    proxy.behave(refusal=CONTEXT_OVERFLOW, refuses=lambda body: len(body["messages"]) > 4)

    fitted = client.responses.create(
        model="antwort-sim",
        instructions="Be brief.",
        input="Three.",
        previous_response_id=second.id,
        truncation="auto",
    )
    failed = client.responses.create(
        model="antwort-sim",
        instructions="Be brief.",
        input="Three.",
        previous_response_id=second.id,
    )

    assert fitted.status == "completed", fitted.error
    assert fitted.truncation == "auto"
    sent = [request["messages"] for request, _ in proxy.exchanges[asked_before:]]
    assert [len(messages) for messages in sent] == [6, 4, 6]  # fitted: one turn out; failed
    assert [m["content"] for m in sent[1]] == [
        "Be brief.",
        "Two.",
        second.output_text,
        "Three.",
    ]
    assert failed.status == "failed"
    assert failed.error is not None and failed.error.code == "context_length_exceeded"


def test_truncation_auto_leaves_the_oldest_tool_rounds_of_one_request_out(
    proxy: ModelProxy, client: openai.OpenAI
) -> None:
    """An agent's many tool rounds on one user message (the Agents SDK's loop): the rounds
    that do not fit go, oldest first; the task and the last round stay."""
    rounds = []
    for n in range(1, 4):
        rounds += [
            {"type": "function_call", "call_id": f"c{n}", "name": "get_weather",
             "arguments": json.dumps({"city": f"City {n}"})},
            {"type": "function_call_output", "call_id": f"c{n}", "output": f"{n}0 degrees"},
        ]  # fmt: skip
    asked_before = len(proxy.exchanges)
    proxy.behave(refusal=CONTEXT_OVERFLOW, refuses=lambda body: len(body["messages"]) > 4)

    fitted = client.responses.create(
        model="antwort-sim",
        instructions="Be brief.",
        input=[{"role": "user", "content": "Weather in three cities?"}, *rounds],
        tools=[CLIENT_FN],  # type: ignore[list-item]
        truncation="auto",
    )

    assert fitted.status == "completed", fitted.error
    sent = [request["messages"] for request, _ in proxy.exchanges[asked_before:]]
    assert [len(messages) for messages in sent] == [8, 6, 4]  # none, one, two rounds out
    assert [m["role"] for m in sent[-1]] == ["system", "user", "assistant", "tool"]
    assert sent[-1][1]["content"] == "Weather in three cities?"
    assert sent[-1][2]["tool_calls"][0]["id"] == "c3" and sent[-1][3]["content"] == "30 degrees"


def test_a_model_the_server_does_not_have_fails_the_response_as_openai_fails_it(
    proxy: ModelProxy, client: openai.OpenAI
) -> None:
    proxy.behave(refusal=NO_SUCH_MODEL)

    response = client.responses.create(model="antwort-sim", input="Hello!")

    assert response.status == "failed"
    assert response.error is not None and response.error.code == "model_not_found"
    assert response.error.message.endswith("The model `antwort-sim` does not exist.")


@needs_codex
@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_tells_its_user_the_context_is_full_without_asking_again(
    proxy: ModelProxy, fleet: Fleet, tmp_path: Path, websockets: bool
) -> None:
    """Codex asks again after a ``server_error``, five times over each transport; after
    ``context_length_exceeded`` it stops and says why. The model is asked once: neither
    Codex nor the fleet (which asks again without a refused ``reasoning_effort``) repeats it."""
    proxy.behave(refusal=CONTEXT_OVERFLOW)
    asked_before = len(proxy.exchanges)

    done = run_codex(fleet, tmp_path, "Go on.", websockets=websockets)

    assert done.returncode != 0
    assert "context window" in done.stdout + done.stderr, done.stdout + done.stderr
    assert len(proxy.exchanges) == asked_before + 1
