"""The Conversations API through the official SDK, and responses that share a conversation."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from openai.types.responses import Response


def test_conversations_through_the_sdk(client: openai.OpenAI) -> None:
    created = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "first"}], metadata={"a": "1"}
    )

    assert client.conversations.retrieve(created.id) == created
    assert client.conversations.update(created.id, metadata={"a": "2"}).metadata == {"a": "2"}
    added = client.conversations.items.create(
        created.id, items=[{"type": "message", "role": "user", "content": "second"}]
    )
    listed = list(client.conversations.items.list(created.id, order="asc", limit=1))  # 2 pages
    assert [item.id for item in listed][1:] == [item.id for item in added.data]
    item = client.conversations.items.retrieve(listed[0].id, conversation_id=created.id)
    assert item == listed[0]
    assert client.conversations.items.delete(listed[0].id, conversation_id=created.id).id == (
        created.id
    )
    deleted = client.conversations.delete(created.id)
    assert (deleted.deleted, deleted.object) == (True, "conversation.deleted")
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(created.id)


def test_a_conversation_takes_the_sdk_s_safety_identifier(client: openai.OpenAI) -> None:
    """openai 3.60 sends ``safety_identifier`` on a conversation's create; it was an unknown
    parameter (400). As on a response's create: at most 64 characters."""
    created = client.conversations.create(safety_identifier="user-7", metadata={"a": "1"})

    assert client.conversations.retrieve(created.id).metadata == {"a": "1"}
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create(safety_identifier="x" * 65)
    assert caught.value.param == "safety_identifier"


def test_responses_continue_a_conversation(client: openai.OpenAI) -> None:
    conversation = client.conversations.create()

    first = client.responses.create(model="antwort-sim", input="Hi", conversation=conversation.id)
    second = client.responses.create(
        model="antwort-sim", input="Again", conversation={"id": conversation.id}
    )

    assert first.conversation is not None and first.conversation.id == conversation.id
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens  # the model read the first
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.id for item in items] == [
        *(item.id for item in client.responses.input_items.list(first.id).data),
        first.output[0].id,
        *(item.id for item in client.responses.input_items.list(second.id).data),
        second.output[0].id,
    ]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(
            model="antwort-sim",
            input="x",
            conversation=conversation.id,
            previous_response_id=second.id,
        )


def test_responses_racing_on_one_conversation_append_whole_blocks(client: openai.OpenAI) -> None:
    """Each response appends its input and output as one block when it ends: none is lost,
    none interleaves with another (the order of the blocks, the order the responses ended in,
    is shown deterministically by tests/app/test_conversations.py)."""
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "seed"}]
    )

    def respond(index: int) -> Response:
        return client.responses.create(
            model="antwort-sim",
            input=f"race {index} [delay_ms={10 * (index % 3)}]",
            conversation=conversation.id,
        )

    with ThreadPoolExecutor(max_workers=6) as pool:
        responses = list(pool.map(respond, range(6)))

    items = list(client.conversations.items.list(conversation.id, order="asc", limit=100))
    assert len(items) == 1 + 2 * len(responses)
    blocks = [[item.id for item in items[i : i + 2]] for i in range(1, len(items), 2)]
    by_block = {
        (client.responses.input_items.list(r.id).data[0].id, r.output[0].id): r for r in responses
    }
    ended = [by_block[(user, answer)] for user, answer in blocks]  # KeyError: interleaved
    assert sorted(r.id for r in ended) == sorted(r.id for r in responses)


def test_long_responses_racing_with_short_ones_append_whole_blocks_in_order(
    client: openai.OpenAI,
) -> None:
    """A block of more than 250 items is queued by the final write and appended a batch a call
    (app/store/conversations.py): blocks still follow each other whole, in the order their
    responses ended, and the next response reads every item."""
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "seed"}]
    )

    def respond(index: int) -> Response:
        size = 600 if index % 2 else 1
        words = [{"role": "user", "content": f"r{index} m{i}"} for i in range(size)]
        return client.responses.create(
            model="antwort-sim",
            input=words,
            conversation=conversation.id,
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        responses = list(pool.map(respond, range(4)))

    items = list(client.conversations.items.list(conversation.id, order="asc", limit=100))
    assert len(items) == 1 + 2 * 601 + 2 * 2
    by_first = {
        client.responses.input_items.list(r.id, order="asc").data[0].id: r for r in responses
    }
    at = 1
    while at < len(items):
        response = by_first[items[at].id]  # KeyError: a block began in another's
        size = 1 + sum(1 for _ in client.responses.input_items.list(response.id, limit=100))
        assert [item.id for item in items[at : at + size]][-1] == response.output[0].id
        at += size
    last = client.responses.create(model="antwort-sim", input="after", conversation=conversation.id)
    assert last.usage is not None and last.usage.input_tokens > 2 * 600 * 2  # two words each


def test_an_item_id_the_conversation_holds_is_refused(client: openai.OpenAI) -> None:
    """The audit's case: a response's input, then added items, reusing an item's id."""
    first: Any = {"type": "message", "role": "user", "content": "first", "id": "msg_1"}
    again: Any = {**first, "content": "REPLACED"}  # the SDK's params have no input item ids
    conversation = client.conversations.create(items=[first])

    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(
            model="antwort-sim",
            conversation=conversation.id,
            input=[again],
        )
    assert raised.value.param == "input.0.id"
    with pytest.raises(openai.BadRequestError) as raised:
        client.conversations.items.create(conversation.id, items=[again])
    assert raised.value.param == "items.0.id"

    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [(item.id, item.model_dump()["content"][0]["text"]) for item in items] == [
        ("msg_1", "first")
    ]


def test_a_deleted_item_leaves_later_responses_and_stays_in_earlier_chains(
    client: openai.OpenAI,
) -> None:
    """The model's prompt, counted by the simulator (a message: its words and one)."""
    conversation = client.conversations.create(
        items=[
            {"type": "message", "role": "user", "content": "alpha " * 10},  # 11
            {"type": "message", "role": "user", "content": "beta"},  # 2
        ]
    )
    first = client.responses.create(model="antwort-sim", input="one", conversation=conversation.id)
    alpha = next(iter(client.conversations.items.list(conversation.id, order="asc")))
    client.conversations.items.delete(alpha.id, conversation_id=conversation.id)

    later = client.responses.create(model="antwort-sim", input="two", conversation=conversation.id)
    chained = client.responses.create(
        model="antwort-sim", input="three", previous_response_id=first.id
    )

    assert first.usage is not None and later.usage is not None and chained.usage is not None
    answer = first.usage.output_tokens + 1
    assert first.usage.input_tokens == 11 + 2 + 2
    assert later.usage.input_tokens == 2 + 2 + answer + 2
    assert chained.usage.input_tokens == 11 + 2 + 2 + answer + 2
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.id for item in items][1:] == [
        *(item.id for item in client.responses.input_items.list(first.id).data),
        first.output[0].id,
        *(item.id for item in client.responses.input_items.list(later.id).data),
        later.output[0].id,
    ]
