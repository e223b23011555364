"""``item_reference`` input items on the real fleet, as the Vercel AI SDK sends a chat.

With ``store`` on (its default), the AI SDK sends the user's messages and tool results again
each turn, and names every earlier assistant message, reasoning item and tool call by its id
alone. The simulator's recorder shows what the model was sent.
"""

from __future__ import annotations

import uuid
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.test_reasoning import a_first_turn
from tests.e2e.test_websocket import check_response_events, create, open_socket, socket_error
from tests.support.recording import Recorder

WEATHER: Any = {
    "type": "function",
    "name": "weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def reference(item: Any) -> dict[str, str]:
    return {"type": "item_reference", "id": item.id}


def another_id(item_id: str) -> str:
    """The id with its last hex digit changed: same shape, names no stored item."""
    return item_id[:-1] + ("1" if item_id.endswith("0") else "0")


def test_a_chat_naming_its_earlier_turns_by_reference_reaches_the_model_whole(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    sent, question, first = a_first_turn(client, sim_recorder, "why [reason]")
    reasoning, answer = first.output

    second = client.responses.create(
        model="antwort-sim",
        input=[
            question,
            reference(reasoning),
            reference(answer),
            {"role": "user", "content": "and?"},
        ],
    )

    assert second.status == "completed"
    assistant = sent[1]["messages"][1]
    assert assistant["reasoning_content"] == reasoning.content[0].text  # type: ignore[union-attr,index]
    assert assistant["content"] == first.output_text
    listed = client.responses.input_items.list(second.id, order="asc").data
    assert [item.id for item in listed[1:3]] == [reasoning.id, answer.id]
    assert listed[2].model_dump(exclude_none=True) == answer.model_dump(exclude_none=True)


def test_a_referenced_tool_call_and_its_result_reach_the_model(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    sent, question, first = a_first_turn(
        client, sim_recorder, '[call weather {"city": "Oslo"}]', tools=[WEATHER]
    )
    [call] = first.output
    assert call.type == "function_call"
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}

    second = client.responses.create(
        model="antwort-sim", input=[question, reference(call), result], tools=[WEATHER]
    )

    assert second.status == "completed"
    called, answered = sent[1]["messages"][1:3]
    [tool_call] = called["tool_calls"]
    assert (tool_call["id"], tool_call["function"]["name"]) == (call.call_id, "weather")
    assert (answered["role"], answered["content"]) == ("tool", "Sunny, 21 C")


def test_a_whole_turn_named_by_reference_its_question_too_reaches_the_model(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    sent, _, first = a_first_turn(client, sim_recorder, "hello")
    [question] = client.responses.input_items.list(first.id).data  # sent without an id

    second = client.responses.create(
        model="antwort-sim",
        input=[
            reference(question),
            reference(first.output[0]),
            {"role": "user", "content": "and?"},
        ],
    )

    assert second.status == "completed"
    asked, answered = sent[1]["messages"][:2]
    assert (asked["role"], asked["content"]) == ("user", question.content[0].text)  # type: ignore[union-attr]
    assert (answered["role"], answered["content"]) == ("assistant", first.output_text)
    listed = client.responses.input_items.list(second.id, order="asc").data
    assert listed[0].model_dump(exclude_none=True) == question.model_dump(exclude_none=True)


def test_items_added_to_a_conversation_are_named_by_reference_and_reach_the_model(
    client: openai.OpenAI, sim_recorder: Recorder
) -> None:
    """Through the SDK: a conversation made with a question and given an answer, both then
    named by reference in a response outside it. Before, such an item's id was random: 404."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": f"{marker} Where is it sunny?"}]
    )
    client.conversations.items.create(
        conversation.id, items=[{"type": "message", "role": "assistant", "content": "In Oslo."}]
    )
    question, answer = client.conversations.items.list(conversation.id, order="asc").data

    response = client.responses.create(
        model="antwort-sim",
        input=[reference(question), reference(answer), {"role": "user", "content": "and?"}],
    )

    assert response.status == "completed"
    asked, answered, follow_up = sent[0]["messages"][:3]
    assert (asked["role"], asked["content"]) == ("user", f"{marker} Where is it sunny?")
    assert (answered["role"], answered["content"]) == ("assistant", "In Oslo.")
    assert (follow_up["role"], follow_up["content"]) == ("user", "and?")
    listed = client.responses.input_items.list(response.id, order="asc").data
    assert [item.id for item in listed[:2]] == [question.id, answer.id]


def test_a_reference_to_an_unstored_response_s_item_is_openai_s_404(
    client: openai.OpenAI,
) -> None:
    first = client.responses.create(model="antwort-sim", input="hello", store=False)

    with pytest.raises(openai.NotFoundError) as raised:
        client.responses.create(
            model="antwort-sim",
            input=[{"role": "user", "content": "hi"}, reference(first.output[0])],
        )

    message = raised.value.body["message"]  # type: ignore[index]
    assert message.startswith(f"Item with id '{first.output[0].id}' not found. Items are not")


def test_a_websocket_create_takes_references_and_refuses_an_unknown_one(
    fleet: Fleet, client: openai.OpenAI
) -> None:
    first = client.responses.create(model="antwort-sim", input="hello")
    question = {"role": "user", "content": "and?"}

    with open_socket(fleet.base_url) as ws:
        events = create(ws, model="antwort-sim", input=[reference(first.output[0]), question])
        unknown = {"type": "item_reference", "id": another_id(first.output[0].id)}
        refused = create(ws, model="antwort-sim", input=[unknown, question])

    answered = check_response_events(events)
    listed = client.responses.input_items.list(answered["id"], order="asc").data
    assert listed[0].model_dump(exclude_none=True) == first.output[0].model_dump(exclude_none=True)
    error = socket_error(refused)
    assert (error["status"], error["param"]) == (404, "input")
    assert error["message"] == f"Item with id '{unknown['id']}' not found."
