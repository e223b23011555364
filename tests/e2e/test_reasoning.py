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


def test_resent_encrypted_reasoning_reaches_the_model_again(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    question: Any = {"role": "user", "content": f"{marker} why [reason]"}
    first = client.responses.create(model="antwort-sim", input=[question], **STATELESS)
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
