"""Structured outputs through the official SDK: ``responses.parse`` and ``responses.stream`` with
a pydantic ``text_format``.

The gateway passes ``text.format`` to the model as Chat Completions' ``response_format`` and
echoes it on the response; the simulator answers an instance of the schema (``name=value`` in
the prompt sets a property), which the SDK parses into the client's own model.
"""

from __future__ import annotations

from typing import Literal

import openai
import pytest
from pydantic import BaseModel


class Guest(BaseModel):
    name: str


class Event(BaseModel):
    title: str
    day: Literal["mon", "tue", "wed"]
    seats: int
    guests: list[Guest]


PROMPT = 'Plan it: title="Team lunch" seats=8'
EXPECTED = Event(title="Team lunch", day="mon", seats=8, guests=[Guest(name="sim")])


def test_responses_parse_returns_the_clients_model(client: openai.OpenAI) -> None:
    response = client.responses.parse(model="antwort-sim", input=PROMPT, text_format=Event)

    assert response.status == "completed"
    assert response.output_parsed == EXPECTED
    assert response.text is not None and response.text.format is not None
    text_format = response.text.format
    assert text_format.type == "json_schema" and text_format.name == "Event"
    assert text_format.strict is True and text_format.schema_["required"] == list(
        Event.model_fields
    )
    assert client.responses.retrieve(response.id).output_text == response.output_text


def test_responses_stream_with_a_text_format_parses_the_final_response(
    client: openai.OpenAI,
) -> None:
    with client.responses.stream(model="antwort-sim", input=PROMPT, text_format=Event) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()

    assert "".join(deltas) == final.output_text
    assert final.output_parsed == EXPECTED


def test_a_response_after_a_function_call_answers_in_the_format(client: openai.OpenAI) -> None:
    weather = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    asked = client.responses.parse(
        model="antwort-sim",
        input="use get_weather for city=Oslo, then " + PROMPT,
        tools=[weather],  # type: ignore[list-item]
        text_format=Event,
    )
    [call] = asked.output
    assert call.type == "function_call" and asked.output_parsed is None

    answered = client.responses.parse(
        model="antwort-sim",
        previous_response_id=asked.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "rain"}],
        tools=[weather],  # type: ignore[list-item]
        text_format=Event,
    )

    assert answered.output_parsed == EXPECTED


@pytest.mark.parametrize(
    ("text_format", "param", "code"),
    [
        (
            {"type": "json_schema", "name": "event"},
            "text.format.schema",
            "missing_required_parameter",
        ),
        ({"type": "json_schema", "schema": {}}, "text.format.name", "missing_required_parameter"),
        (
            {"type": "json_schema", "name": "an event", "schema": {}},
            "text.format.name",
            "invalid_value",
        ),
    ],
)
def test_a_bad_text_format_is_a_400_naming_it(
    client: openai.OpenAI, text_format: dict[str, object], param: str, code: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="antwort-sim",
            input="hi",
            text={"format": text_format},  # type: ignore[typeddict-item]
        )

    error = caught.value.body
    assert isinstance(error, dict) and (error["param"], error["code"]) == (param, code)
