"""Cancel, delete, input items, ``previous_response_id`` chains and ``store: false``."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest
import redis
from openai.types.conversations import ConversationItem
from openai.types.responses import ResponseItem
from pydantic import TypeAdapter

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import (
    plain,
    validate_response,
    wait_for_status,
    wait_until_turn_stopped,
)


def _events_after(client: openai.OpenAI, response_id: str, after: int) -> list[dict[str, Any]]:
    with client.responses.retrieve(response_id, stream=True, starting_after=after) as stream:
        return [event.to_dict() for event in stream]


def test_cancel_running_background_response_stops_it(
    client: openai.OpenAI, fleet: Fleet, counters: redis.Redis
) -> None:
    created = client.responses.create(
        model="antwort-sim", input="long one [tokens=2000] [delay_ms=5]", background=True
    )
    wait_for_status(client, created.id, {"in_progress"})
    # Let some text flow first, so the cancel hits a turn mid-generation.
    with client.responses.retrieve(created.id, stream=True) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                break

    cancelled = client.responses.cancel(created.id)

    assert cancelled.status == "cancelled"
    assert cancelled.id == created.id
    validate_response(cancelled.to_dict())
    assert client.responses.retrieve(created.id).status == "cancelled"
    # The turn notices the cancel at its next event (which the store refuses) and stops.
    wait_until_turn_stopped(counters, fleet.env["ANTWORT_KEY_PREFIX"], created.id)
    settled = _events_after(client, created.id, -1)
    last = settled[-1]["sequence_number"]
    assert len(settled) == last + 1
    assert not any(e["type"] == "response.completed" for e in settled)
    assert _events_after(client, created.id, last) == [], "events kept coming after the cancel"
    assert client.responses.retrieve(created.id).status == "cancelled"

    again = client.responses.cancel(created.id)
    assert again.to_dict() == cancelled.to_dict()


def test_cancel_completed_background_response_is_unchanged(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model="antwort-sim", input="quick [tokens=4]", background=True
    )
    done = wait_for_status(client, created.id, {"completed", "failed"})
    assert done.status == "completed"
    after = client.responses.cancel(created.id)
    assert after.to_dict() == done.to_dict()
    assert client.responses.retrieve(created.id).status == "completed"


def test_cancel_non_background_response_is_400(client: openai.OpenAI) -> None:
    response = client.responses.create(model="antwort-sim", input="foreground [tokens=3]")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.cancel(response.id)
    assert caught.value.status_code == 400
    assert client.responses.retrieve(response.id).status == "completed"


def test_cancel_unknown_response_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_doesnotexist")


def test_delete_response_returns_deletion_object(client: openai.OpenAI, fleet: Fleet) -> None:
    response = client.responses.create(model="antwort-sim", input="delete me [tokens=3]")
    deleted = httpx.delete(f"{fleet.base_url}/v1/responses/{response.id}", timeout=10)
    assert deleted.status_code == 200
    assert deleted.json() == {"id": response.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(response.id)
    again = httpx.delete(f"{fleet.base_url}/v1/responses/{response.id}", timeout=10)
    assert again.status_code == 404


def test_deleting_a_running_response_leaves_no_key_behind(
    client: openai.OpenAI, fleet: Fleet, counters: redis.Redis
) -> None:
    created = client.responses.create(
        model="antwort-sim", input="long one [tokens=2000] [delay_ms=5]", background=True
    )
    with client.responses.retrieve(created.id, stream=True) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                break  # the turn runs: its start is counted, its lease held

    client.responses.delete(created.id)

    # The run stops at its next write, which finds the response gone; what it kept (the count
    # of the turn's starts, a poison guard) went with the delete and is not made again.
    pattern = f"{fleet.env['ANTWORT_KEY_PREFIX']}*{created.id}*"
    deadline = time.monotonic() + 10
    while left := list(counters.scan_iter(match=pattern)):
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.1)
    time.sleep(1)  # the stopped run has nothing more to write
    assert list(counters.scan_iter(match=pattern)) == []
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_delete_response_through_sdk(client: openai.OpenAI) -> None:
    response = client.responses.create(model="antwort-sim", input="sdk delete [tokens=3]")
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(response.id)


def test_input_items_pages_through_sdk(client: openai.OpenAI) -> None:
    texts = ["one", "two", "three", "four", "five"]
    roles = ["user", "assistant", "user", "assistant", "user"]
    messages: list[Any] = [
        {"type": "message", "role": role, "content": text}
        for role, text in zip(roles, texts, strict=True)
    ]
    response = client.responses.create(model="antwort-sim", input=messages)
    assert response.status == "completed"

    first = client.responses.input_items.list(response.id, limit=2, order="asc")
    pages = list(first.iter_pages())
    assert [len(page.data) for page in pages] == [2, 2, 1]
    assert [page.has_more for page in pages] == [True, True, False]
    items = [plain(item) for page in pages for item in page.data]
    assert [item["content"][0]["text"] for item in items] == texts
    assert [item["role"] for item in items] == roles
    assert len({item["id"] for item in items}) == 5
    for page in pages:
        listing = page.to_dict()
        assert listing["object"] == "list"
        assert listing["first_id"] == page.data[0].id
        assert listing["last_id"] == page.data[-1].id

    # Auto-pagination, newest first by default.
    newest_first = list(client.responses.input_items.list(response.id, limit=2))
    assert [item.id for item in newest_first] == [item["id"] for item in reversed(items)]


def test_previous_response_id_feeds_the_chain_to_the_model(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model="antwort-sim", input="first question", instructions="be brief"
    )
    assert first.usage is not None
    # system + user: 2 + 2 words, 2 messages.
    assert first.usage.input_tokens == 2 + 2 + 2
    second = client.responses.create(
        model="antwort-sim", input="second question", previous_response_id=first.id
    )
    assert second.status == "completed"
    assert second.previous_response_id == first.id
    assert second.instructions is None
    assert second.output_text.startswith("Simulated answer to: second question")
    assert second.usage is not None
    # The model saw: first user message, first answer, second user message (no instructions).
    expected = (2 + 1) + (first.usage.output_tokens + 1) + (2 + 1)
    assert second.usage.input_tokens == expected
    # input_items lists this response's own input only.
    items = [plain(item) for item in client.responses.input_items.list(second.id)]
    assert [item["content"][0]["text"] for item in items] == ["second question"]

    third = client.responses.create(
        model="antwort-sim", input="third", previous_response_id=second.id
    )
    assert third.usage is not None
    assert third.usage.input_tokens == expected + second.usage.output_tokens + 1 + 2


def test_previous_response_id_unknown_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="antwort-sim", input="hi", previous_response_id="resp_nosuchthing"
        )
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"


def test_store_false_background_response_is_polled_for_its_answer(client: openai.OpenAI) -> None:
    """Polling is how a background response's client gets its answer: a ``store: false`` one
    answers ``retrieve`` until it expires (``ANTWORT_UNSTORED_TTL_SECONDS`` after its end), and
    cannot be chained on."""
    created = client.responses.create(
        model="antwort-sim", input="ephemeral [tokens=6]", store=False, background=True
    )

    done = wait_for_status(client, created.id, {"completed", "failed"})

    assert done.status == "completed"
    assert done.output_text.startswith("Simulated answer to: ephemeral")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="antwort-sim", input="more", previous_response_id=done.id)
    assert caught.value.code == "previous_response_not_found"


def test_store_false_response_is_gone_after_finishing(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim", input="ephemeral [tokens=6]", store=False
    )
    assert response.status == "completed"
    assert response.to_dict()["store"] is False
    assert response.output_text.startswith("Simulated answer to: ephemeral")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="antwort-sim", input="more", previous_response_id=response.id)
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"


def test_store_false_responses_and_token_counts_leave_no_key_for_30_days(
    client: openai.OpenAI, fleet: Fleet, counters: redis.Redis
) -> None:
    """Before, each left a counter of starts (a turn's, a tool call's, a job's delivery) that
    lived as long as a stored response: a key per request of a client that stores nothing."""
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    before = set(counters.scan_iter(match=f"{prefix}*"))
    tools: Any = [{"type": "internal", "name": "calculator"}]
    response = client.responses.create(
        model="antwort-sim", input="calculator expression=6*7", tools=tools, store=False
    )
    assert response.status == "completed"
    assert client.responses.input_tokens.count(model="antwort-sim", input="hi").input_tokens > 0

    left = {key: counters.ttl(key) for key in set(counters.scan_iter(match=f"{prefix}*")) - before}

    assert any(response.id in key for key in left)
    assert {key: ttl for key, ttl in left.items() if response.id in key and ttl > 300} == {}
    assert {key: ttl for key, ttl in left.items() if ttl == -1 or ttl > 600 + 600} == {}


def test_input_items_of_every_kind_read_back_as_the_sdk_types_them(
    fleet: Fleet, client: openai.OpenAI
) -> None:
    """A client's call and its output are read back with the ``status`` the SDK's item types
    require (it sent none), from ``input_items`` and from a conversation."""
    history = [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "tool_search_call", "call_id": "c2", "arguments": {"query": "crm"}},
        {"type": "tool_search_output", "call_id": "c2", "tools": []},
    ]
    response = client.responses.create(
        model="antwort-sim",
        input=history,  # type: ignore[arg-type]
        tools=[
            {"type": "function", "name": "f", "parameters": {"type": "object"}},
            {"type": "tool_search", "execution": "client"},
        ],
    )
    conversation = client.conversations.create(items=history)  # type: ignore[arg-type]

    items = httpx.get(
        f"{fleet.base_url}/v1/responses/{response.id}/input_items?order=asc", timeout=10
    ).json()["data"]
    held = httpx.get(
        f"{fleet.base_url}/v1/conversations/{conversation.id}/items?order=asc", timeout=10
    ).json()["data"]

    for item in items:
        TypeAdapter(ResponseItem).validate_python(item)
    for item in held:
        TypeAdapter(ConversationItem).validate_python(item)
    assert (
        [item["type"] for item in items]
        == [item["type"] for item in held]
        == [
            "message",
            "function_call",
            "function_call_output",
            "tool_search_call",
            "tool_search_output",
        ]
    )
    assert [item["status"] for item in items] == ["completed"] * 5
