"""The text's log probabilities, asked with ``include``, from the model server to the SDK."""

from __future__ import annotations

from typing import Any

import openai

from programs.simulator.server import SIM_LOGPROB
from tests.e2e.helpers import check_sequence, validate_event, validate_response

LOGPROBS = ["message.output_text.logprobs"]


def test_logprobs_asked_with_include_come_with_every_token(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim", input="hello there [tokens=5]", include=LOGPROBS, top_logprobs=2
    )

    validate_response(response.to_dict())
    part = response.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text" and part.logprobs
    assert "".join(token.token for token in part.logprobs) == part.text
    assert {token.logprob for token in part.logprobs} == {SIM_LOGPROB}
    assert [[top.token for top in token.top_logprobs] for token in part.logprobs] == [
        [token.token, f"{token.token}#1"] for token in part.logprobs
    ]
    assert all(token.bytes == list(token.token.encode()) for token in part.logprobs)
    assert response.top_logprobs == 2


def test_logprobs_stream_with_their_deltas(client: openai.OpenAI) -> None:
    with client.responses.create(
        model="antwort-sim",
        input="hello there [tokens=5]",
        include=LOGPROBS,
        top_logprobs=0,
        stream=True,
    ) as stream:
        events: list[dict[str, Any]] = [event.to_dict() for event in stream]

    check_sequence(events)
    for event in events:
        validate_event(event)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all(delta["logprobs"] for delta in deltas)
    # each delta's own tokens (tokens read together travel together)
    assert ["".join(t["token"] for t in d["logprobs"]) for d in deltas] == [
        d["delta"] for d in deltas
    ]
    assert all(t["top_logprobs"] == [] for d in deltas for t in d["logprobs"])
    (done,) = [e for e in events if e["type"] == "response.output_text.done"]
    assert "".join(token["token"] for token in done["logprobs"]) == done["text"]
    final = events[-1]["response"]["output"][0]["content"][0]
    assert final["logprobs"] == [t for d in deltas for t in d["logprobs"]]


def test_no_logprobs_unless_include_asks(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim", input="hello there [tokens=5]", top_logprobs=2
    )

    part = response.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text" and part.logprobs == []
