"""Reasoning across stateless turns: sealed reasoning, its return to the model, its summary.

The model is the simulator over HTTP (its ``[reason]`` directive makes it reason); its
recorder shows what the model was sent. Items and events are checked against the ``openai``
SDK's types and the Open Responses schemas.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent

from app.config import Settings
from app.providers.openai_chat import ChatCompletionsProvider
from app.responses import create_response
from app.run import RunDeps, advance_response
from app.sealing import InvalidReasoningError
from app.store import ResponseStore
from tests.e2e.helpers import validate_event, validate_response
from tests.support.dispatch import RecordingDispatcher
from tests.support.recording import Recorder

SDK_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
SDK_ITEM = pydantic.TypeAdapter(ResponseOutputItem)
STATELESS = {"store": False, "include": ["reasoning.encrypted_content"]}
SUMMARY_EVENTS = [
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_summary_part.done",
]


@pytest.fixture
def model(sim_url: str) -> Iterator[ChatCompletionsProvider]:
    provider = ChatCompletionsProvider(base_url=sim_url, max_retries=0)
    yield provider
    provider.close()


def run(
    store: ResponseStore, settings: Settings, model: ChatCompletionsProvider, body: dict[str, Any]
) -> str:
    response, _ = create_response(store, RecordingDispatcher(), settings, {"model": "m", **body})
    deps = RunDeps(store=store, provider=model, settings=settings)
    assert advance_response(deps, response.id, 0) == "completed"
    return response.id


def events(store: ResponseStore, rid: str) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in store.events_after(rid, -1)]


def test_reasoning_is_sealed_and_summarised_when_asked(
    store: ResponseStore, make_settings: Callable[..., Settings], model: ChatCompletionsProvider
) -> None:
    settings = make_settings()
    body = {"input": "why [reason]", "reasoning": {"summary": "auto"}, **STATELESS}
    rid = run(store, settings, model, body)

    reasoning, _message = store.get(rid).response.output
    thought = reasoning["content"][0]["text"]
    assert thought.startswith("Thinking about: why")
    assert reasoning["summary"] == [{"type": "summary_text", "text": thought}]
    assert reasoning["encrypted_content"].startswith("ar1.")
    assert thought not in reasoning["encrypted_content"]
    SDK_ITEM.validate_python(reasoning)
    seen = events(store, rid)
    summary = [e for e in seen if e["type"].startswith("response.reasoning_summary")]
    collapsed = [
        t for i, t in enumerate(e["type"] for e in summary) if i == 0 or t != summary[i - 1]["type"]
    ]
    assert collapsed == SUMMARY_EVENTS
    assert "".join(e["delta"] for e in summary if e["type"].endswith("text.delta")) == thought
    for event in seen:
        validate_event(event)
    for event in summary:  # the SDK names the raw reasoning events its own way
        SDK_EVENT.validate_python(event)
    validate_response(store.get(rid).response.wire())


def test_sealing_on_a_worker_without_a_key_fails_the_response_saying_which_to_set(
    store: ResponseStore, make_settings: Callable[..., Settings], model: ChatCompletionsProvider
) -> None:
    settings = make_settings(secrets_file=None)  # nor ANTWORT_COMPACTION_KEY
    body = {"model": "m", "input": "why [reason]", **STATELESS}
    response, _ = create_response(store, RecordingDispatcher(), settings, body)
    deps = RunDeps(store=store, provider=model, settings=settings)

    assert advance_response(deps, response.id, 0) == "failed"  # an answer, not a crash

    failed = store.get(response.id).response
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "server_error"
    assert "set ANTWORT_COMPACTION_KEY (or ANTWORT_SECRETS_FILE)" in failed.error.message
    assert [e["type"] for e in events(store, response.id)][-2:] == ["error", "response.failed"]


def test_no_summary_and_no_seal_unless_asked(
    store: ResponseStore, make_settings: Callable[..., Settings], model: ChatCompletionsProvider
) -> None:
    rid = run(store, make_settings(), model, {"input": "why [reason]"})

    reasoning, _message = store.get(rid).response.output
    assert reasoning["summary"] == [] and "encrypted_content" not in reasoning
    assert not [e for e in events(store, rid) if "summary" in e["type"]]


def _resent(
    store: ResponseStore, settings: Settings, model: ChatCompletionsProvider, marker: str
) -> list[dict[str, Any]]:
    """A stateless client's second request: the first one's output sent back as input."""
    first = run(store, settings, model, {"input": f"{marker} why [reason]", **STATELESS})
    output = store.get(first).response.output
    reasoning = {k: v for k, v in output[0].items() if k != "content"}  # as Codex resends it
    history = [{"role": "user", "content": f"{marker} why [reason]"}, reasoning, output[1]]
    run(store, settings, model, {"input": [*history, {"role": "user", "content": "and?"}]})
    return output


@pytest.mark.parametrize("is_taken", [True, False], ids=["vllm", "other"])
def test_resent_reasoning_goes_back_where_the_model_server_takes_it(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    model: ChatCompletionsProvider,
    sim_recorder: Recorder,
    is_taken: bool,
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    output = _resent(store, make_settings(llm_reasoning_replay=is_taken), model, marker)

    messages = sent[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == output[1]["content"][0]["text"]
    if is_taken:  # the text sealed in encrypted_content, on its turn's assistant message
        assert messages[1]["reasoning_content"] == output[0]["content"][0]["text"]
    else:
        assert all("reasoning_content" not in m for m in messages)


def test_altered_encrypted_reasoning_is_a_400(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": "ar1.AAAAAAAAAAAAAAAA"}
    body = {"model": "m", "input": [{"role": "user", "content": "hi"}, reasoning]}
    with pytest.raises(InvalidReasoningError) as caught:
        create_response(store, RecordingDispatcher(), make_settings(), body)
    assert (caught.value.param, caught.value.code) == (
        "input.1.encrypted_content",
        "invalid_encrypted_content",
    )


@pytest.mark.parametrize(
    ("accepted", "sent"), [("low,medium,high", "high"), ("", None)], ids=["vllm", "none-taken"]
)
def test_the_effort_reaches_the_model_as_its_server_takes_it(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    model: ChatCompletionsProvider,
    sim_recorder: Recorder,
    accepted: str,
    sent: str | None,
) -> None:
    marker = uuid.uuid4().hex
    seen = sim_recorder.watch(marker)
    settings = make_settings(llm_reasoning_efforts=accepted)
    body = {"input": f"{marker} [tokens=3]", "reasoning": {"effort": "xhigh"}}
    rid = run(store, settings, model, body)  # the simulator, like vLLM, refuses xhigh

    assert seen[0].get("reasoning_effort") == sent
    assert store.get(rid).response.reasoning == {"effort": "xhigh", "summary": None}


def test_no_effort_is_sent_unless_asked(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    model: ChatCompletionsProvider,
    sim_recorder: Recorder,
) -> None:
    marker = uuid.uuid4().hex
    seen = sim_recorder.watch(marker)
    run(store, make_settings(), model, {"input": f"{marker} [tokens=3]"})

    assert "reasoning_effort" not in seen[0]


def test_the_model_servers_efforts_are_checked() -> None:
    with pytest.raises(pydantic.ValidationError, match="expected some of none, minimal"):
        Settings(llm_reasoning_efforts="low,extreme")
    assert Settings(llm_reasoning_efforts=" high, low ,").reasoning_effort_list == ("low", "high")


def test_a_model_that_refuses_the_effort_is_asked_again_without_it(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    model: ChatCompletionsProvider,
    sim_recorder: Recorder,
) -> None:
    """As Ollama answers a model that does not think; here the simulator refuses ``xhigh``
    (vLLM's values only) from a fleet told its server takes it."""
    marker = uuid.uuid4().hex
    seen = sim_recorder.watch(marker)
    settings = make_settings(llm_reasoning_efforts="low,medium,high,xhigh")
    body = {"input": f"{marker} [tokens=3]", "reasoning": {"effort": "xhigh"}}

    run(store, settings, model, body)  # completes
    run(store, settings, model, body)

    assert [request.get("reasoning_effort") for request in seen] == ["xhigh", None, None]
    assert model.refuses_effort == {"m"}  # the second run asked once, without it


def test_a_request_refused_for_another_reason_fails_as_it_did(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    model: ChatCompletionsProvider,
    sim_recorder: Recorder,
) -> None:
    marker = uuid.uuid4().hex
    seen = sim_recorder.watch(marker)
    settings = make_settings()
    body = {"model": "m", "input": f"{marker} [error=400]", "reasoning": {"effort": "high"}}
    response, _ = create_response(store, RecordingDispatcher(), settings, body)

    outcome = advance_response(
        RunDeps(store=store, provider=model, settings=settings), response.id, 0
    )

    assert outcome == "failed"
    assert [request.get("reasoning_effort") for request in seen] == ["high", None]
    assert model.refuses_effort == set()  # the effort was not what it refused
    error = store.get(response.id).response.error
    assert error is not None and "Simulated error 400" in error.message
