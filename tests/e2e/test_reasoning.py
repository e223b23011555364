"""Reasoning across stateless turns on the real fleet, as Codex CLI uses it: ``store: false``,
``include: ["reasoning.encrypted_content"]``, ``reasoning.summary``, the history resent.

The fleet's simulator takes reasoning back (``ANTWORT_LLM_REASONING_REPLAY``, as vLLM does);
its recorder shows what the workers sent it.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
from openai.types.responses import (
    Response,
    ResponseConfigurationUpdateItem,
    ResponseReasoningItem,
    ResponseReasoningSummaryPartAddedEvent,
    ResponseReasoningSummaryTextDeltaEvent,
)

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import raw_events, validate_event
from tests.support.recording import Recorder

STATELESS: Any = {"store": False, "include": ["reasoning.encrypted_content"]}


def test_sealed_reasoning_and_its_summary_stream_to_the_sdk(client: openai.OpenAI) -> None:
    stream = client.responses.create(
        model="antwort-sim",
        input="why [reason]",
        reasoning={"summary": "auto"},
        stream=True,
        **STATELESS,
    )
    events = list(stream)

    done = events[-1]
    assert done.type == "response.completed"
    reasoning = done.response.output[0]
    assert isinstance(reasoning, ResponseReasoningItem)
    assert reasoning.encrypted_content and reasoning.encrypted_content.startswith("ar1.")
    [summary] = reasoning.summary
    assert summary.text.startswith("Thinking about: why")
    assert any(isinstance(e, ResponseReasoningSummaryPartAddedEvent) for e in events)
    deltas = [e for e in events if isinstance(e, ResponseReasoningSummaryTextDeltaEvent)]
    assert "".join(e.delta for e in deltas) == summary.text


def test_summary_events_follow_the_open_responses_schemas(fleet: Fleet) -> None:
    body = {"model": "antwort-sim", "input": "why [reason]", "stream": True}
    body.update(reasoning={"summary": "detailed"}, **STATELESS)
    response = httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=30)

    events = raw_events(response)
    assert "response.reasoning_summary_text.done" in [e["type"] for e in events]
    for event in events:
        validate_event(event)


def a_reasoned_first_turn(
    client: openai.OpenAI, sim_recorder: Recorder
) -> tuple[list[dict[str, Any]], Any, Response]:
    """A stateless first turn that reasoned (:func:`a_first_turn`)."""
    return a_first_turn(client, sim_recorder, "why [reason]", **STATELESS)


def a_first_turn(
    client: openai.OpenAI, sim_recorder: Recorder, text: str, **create: Any
) -> tuple[list[dict[str, Any]], Any, Response]:
    """A first turn asking ``text`` (``create``: the rest of its request): what the simulator is
    sent from then on (watched by the question's marker), the question, and the response."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    question: Any = {"role": "user", "content": f"{marker} {text}"}
    return (
        sent,
        question,
        client.responses.create(model="antwort-sim", input=[question], **create),
    )


def test_resent_encrypted_reasoning_reaches_the_model_again(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    sent, question, first = a_reasoned_first_turn(client, sim_recorder)
    reasoning, answer = (item.model_dump(exclude_none=True) for item in first.output)
    reasoning.pop("content")  # only the sealed copy travels back, as with Codex

    second = client.responses.create(
        model="antwort-sim",
        input=[question, reasoning, answer, {"role": "user", "content": "and?"}],
        **STATELESS,
    )

    assert second.status == "completed"
    assistant = sent[1]["messages"][1]
    assert assistant["reasoning_content"] == first.output[0].content[0].text  # type: ignore[union-attr,index]
    assert assistant["content"] == first.output_text


def test_the_effort_reaches_a_vllm_like_model_server_in_its_terms(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    stream = client.responses.create(
        model="antwort-sim",
        input=f"{marker} why [reason]",
        reasoning={"effort": "minimal", "summary": "auto"},
        stream=True,
        **STATELESS,
    )
    done = list(stream)[-1]

    assert done.type == "response.completed"
    assert done.response.reasoning and done.response.reasoning.effort == "minimal"  # as asked
    assert sent[0]["reasoning_effort"] == "low"  # the least of vLLM's low, medium and high


def test_the_sdk_s_newer_reasoning_options_are_taken_and_echoed(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    # openai 3.x's Reasoning: effort "max", context, mode (the first two were a 400 before)
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    options: Any = {"effort": "max", "context": "current_turn", "mode": "standard"}

    response = client.responses.create(
        model="antwort-sim", input=f"{marker} why [reason]", reasoning=options
    )

    assert response.status == "completed"
    assert response.reasoning is not None
    echoed = response.reasoning.model_dump(include={"effort", "context", "mode"})
    assert echoed == options  # as asked, as the effort always was
    assert sent[0]["reasoning_effort"] == "high"  # the most of vLLM's low, medium and high


def refused(client: openai.OpenAI, **body: Any) -> dict[str, Any]:
    """The error of a create the fleet answers with a 400."""
    try:
        client.responses.create(model="antwort-sim", **body)
    except openai.BadRequestError as refusal:
        assert isinstance(refusal.body, dict)
        return refusal.body
    raise AssertionError(f"taken: {body}")


def test_a_reasoning_mode_the_fleet_lacks_is_a_400_naming_it(client: openai.OpenAI) -> None:
    error = refused(client, input="hi", reasoning={"mode": "pro"})

    assert error["param"] == "reasoning.mode"
    assert error["code"] == "invalid_value" and "'standard'" in error["message"]


def test_reasoning_context_current_turn_keeps_earlier_turns_reasoning_from_the_model(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    sent, question, first = a_reasoned_first_turn(client, sim_recorder)
    history = [question, *(item.model_dump(exclude_none=True) for item in first.output)]
    again: Any = [*history, {"role": "user", "content": "and? [reason]"}]

    kept = client.responses.create(model="antwort-sim", input=again, **STATELESS)
    left_out = client.responses.create(
        model="antwort-sim", input=again, reasoning={"context": "current_turn"}, **STATELESS
    )

    assert kept.status == left_out.status == "completed"
    assert "reasoning_content" in sent[1]["messages"][1]  # all turns' reasoning by default
    assert [m["role"] for m in sent[2]["messages"]] == ["user", "assistant", "user"]
    assert "reasoning_content" not in sent[2]["messages"][1]


def test_a_configuration_update_sets_the_effort_of_the_chain_from_then_on(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    # As Codex CLI sends one when its user changes the effort mid-session
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    update: Any = {"type": "configuration_update", "reasoning": {"effort": "high"}}
    question: Any = {"role": "user", "content": f"{marker} why [reason]"}

    first = client.responses.create(
        model="antwort-sim", input=[question, update], reasoning={"effort": "low"}
    )
    second = client.responses.create(
        model="antwort-sim", input="and?", previous_response_id=first.id
    )

    assert first.status == second.status == "completed"
    assert [request["reasoning_effort"] for request in sent] == ["high", "high"]
    assert [message["role"] for message in sent[0]["messages"]] == ["user"]  # not the model's
    _, stored = client.responses.input_items.list(first.id, order="asc").data
    assert isinstance(stored, ResponseConfigurationUpdateItem) and stored.id.startswith("cfg_")
    assert stored.reasoning is not None and stored.reasoning.effort == "high"


def test_a_configuration_update_of_the_text_format_is_a_400_naming_it(
    client: openai.OpenAI,
) -> None:
    update: Any = {"type": "configuration_update", "text": {"format": {"type": "text"}}}
    error = refused(client, input=[update])

    assert error["param"] == "input.0.text"
    assert error["code"] == "invalid_value" and "text.format" in error["message"]
