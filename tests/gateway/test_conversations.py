"""The ``/v1/conversations`` routes in-process, their bodies checked against the SDK's types."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask.testing import FlaskClient
from openai.types.conversations import (
    Conversation,
    ConversationDeletedResource,
    ConversationItem,
    ConversationItemList,
)
from openai.types.responses import Response
from pydantic import TypeAdapter

from app import cooperation
from app.conversation import history_of
from tests.gateway.conftest import error_of

ITEM: TypeAdapter[ConversationItem] = TypeAdapter(ConversationItem)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def create(web: FlaskClient, **body: Any) -> Conversation:
    answer = web.post("/v1/conversations", json=body)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return Conversation.model_validate(answer.json)


def items(web: FlaskClient, cid: str, query: str = "") -> ConversationItemList:
    answer = web.get(f"/v1/conversations/{cid}/items{query}")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    body = answer.json
    assert body is not None and set(body) == {"object", "data", "first_id", "last_id", "has_more"}
    return ConversationItemList.model_validate(body)


def test_conversation_create_retrieve_update_delete(web: FlaskClient) -> None:
    created = create(web, metadata={"topic": "demo"})

    assert created.id.startswith("conv_") and created.object == "conversation"
    assert created.metadata == {"topic": "demo"}
    assert Conversation.model_validate(web.get(f"/v1/conversations/{created.id}").json) == created
    updated = web.post(f"/v1/conversations/{created.id}", json={"metadata": {"topic": "new"}})
    assert Conversation.model_validate(updated.json).metadata == {"topic": "new"}
    deleted = ConversationDeletedResource.model_validate(
        web.delete(f"/v1/conversations/{created.id}").json
    )
    assert (deleted.id, deleted.deleted, deleted.object) == (
        created.id,
        True,
        "conversation.deleted",
    )
    error_of(web.get(f"/v1/conversations/{created.id}"), 404)


def test_conversation_create_takes_an_empty_body(web: FlaskClient) -> None:
    answer = web.post("/v1/conversations")

    assert Conversation.model_validate(answer.json).metadata == {}
    error_of(web.post("/v1/conversations", data="x"), 415)


def test_conversation_items_add_list_page_retrieve_delete(web: FlaskClient) -> None:
    cid = create(web, items=[user("one"), user("two")]).id
    added = web.post(
        f"/v1/conversations/{cid}/items?include[]=message.output_text.logprobs",
        json={"items": [user("three"), {"role": "assistant", "content": "four"}]},
    )
    assert added.status_code == 200, added.get_data(as_text=True)
    added_list = ConversationItemList.model_validate(added.json)
    assert [ITEM.validate_python(item).type for item in added_list.data] == ["message"] * 2

    every = items(web, cid, "?order=asc")
    texts = [item.content[0].text for item in every.data]  # type: ignore[union-attr]
    assert texts == ["one", "two", "three", "four"]
    assert every.data[3].role == "assistant"  # type: ignore[union-attr]
    assert items(web, cid).data[0].id == every.last_id  # desc by default
    page = items(web, cid, f"?order=asc&limit=2&after={every.data[0].id}")
    assert ([item.id for item in page.data], page.has_more) == (
        [item.id for item in every.data[1:3]],
        True,
    )
    one = web.get(f"/v1/conversations/{cid}/items/{every.first_id}")
    assert ITEM.validate_python(one.json) == every.data[0]
    after_delete = web.delete(f"/v1/conversations/{cid}/items/{every.first_id}")
    assert Conversation.model_validate(after_delete.json).id == cid
    assert len(items(web, cid).data) == 3
    error_of(web.get(f"/v1/conversations/{cid}/items/{every.first_id}"), 404)
    error_of(web.delete(f"/v1/conversations/{cid}/items/{every.first_id}"), 404)


UNKNOWN_ID_REQUESTS = [
    ("GET", "/v1/conversations/conv_x", None),
    ("POST", "/v1/conversations/conv_x", {"metadata": {}}),
    ("DELETE", "/v1/conversations/conv_x", None),
    ("GET", "/v1/conversations/conv_x/items", None),
    ("POST", "/v1/conversations/conv_x/items", {"items": [user("hi")]}),
    ("GET", "/v1/conversations/conv_x/items/msg_1", None),
    ("DELETE", "/v1/conversations/conv_x/items/msg_1", None),
]


@pytest.mark.parametrize(("method", "path", "body"), UNKNOWN_ID_REQUESTS)
def test_conversation_unknown_ids_are_404(
    web: FlaskClient, method: str, path: str, body: Any
) -> None:
    error = error_of(web.open(path, method=method, json=body), 404)

    assert (error.type, error.code) == ("not_found", "not_found")
    assert "conv_x" in error.message


def test_conversation_id_naming_another_conversations_key_is_404(web: FlaskClient) -> None:
    """``<id>:items`` is the key of the conversation's items: an item of id ``object`` there
    must not pass for a conversation object (whose delete would take the items with it)."""
    cid = create(web, items=[{**user("kept"), "id": "object"}]).id

    for method in ("GET", "DELETE"):
        error = error_of(web.open(f"/v1/conversations/{cid}:items", method=method), 404)
        assert error.param == "conversation_id"
    assert [item.id for item in items(web, cid).data] == ["object"]


def test_conversation_item_ids_are_never_taken_twice(web: FlaskClient) -> None:
    cid = create(web, items=[{**user("first"), "id": "msg_1"}]).id
    again = {**user("REPLACED"), "id": "msg_1"}

    error = error_of(web.post(f"/v1/conversations/{cid}/items", json={"items": [again]}), 400)
    assert (error.type, error.param) == ("invalid_request_error", "items.0.id")
    body = {"input": [again], "conversation": cid, "background": True}
    assert error_of(web.post("/v1/responses", json=body), 400).param == "input.0.id"
    twice = {"items": [user("a"), again, again]}
    assert error_of(web.post("/v1/conversations", json=twice), 400).param == "items.2.id"
    assert [item.id for item in items(web, cid).data] == ["msg_1"]
    assert items(web, cid).data[0].content[0].text == "first"  # type: ignore[union-attr]


BAD_BODIES = [
    ({"items": [user("x")] * 21}, "items"),
    ({"metadata": {"k": "v" * 513}}, "metadata.k"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"items": [{"type": "nonsense"}]}, "items.0"),
    ({"name": "x"}, "name"),
]


@pytest.mark.parametrize(("body", "param"), BAD_BODIES)
def test_conversation_create_refuses_bad_bodies(
    web: FlaskClient, body: dict[str, Any], param: str
) -> None:
    error = error_of(web.post("/v1/conversations", json=body), 400)

    assert error.param == param


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("?limit=0", "limit"),
        ("?order=up", "order"),
        ("?after=msg_x", "after"),
        ("?include=x", "include"),
    ],
)
def test_conversation_items_list_refuses_bad_queries(
    web: FlaskClient, query: str, param: str
) -> None:
    cid = create(web).id

    assert error_of(web.get(f"/v1/conversations/{cid}/items{query}"), 400).param == param


def test_conversation_update_and_add_need_their_fields(web: FlaskClient) -> None:
    cid = create(web).id

    assert error_of(web.post(f"/v1/conversations/{cid}", json={}), 400).param == "metadata"
    assert error_of(web.post(f"/v1/conversations/{cid}/items", json={}), 400).param == "items"
    error_of(web.post(f"/v1/conversations/{cid}/items", data="x"), 415)


def test_response_in_a_conversation_echoes_it_and_snapshots_its_items(
    web: FlaskClient, store: Any
) -> None:
    cid = create(web, items=[user("before")]).id

    for conversation in (cid, {"id": cid}):
        answer = web.post(
            "/v1/responses", json={"input": "hi", "background": True, "conversation": conversation}
        )
        response = Response.model_validate(answer.json)
        assert response.conversation is not None and response.conversation.id == cid
        context = history_of(store, store.get(response.id))
        assert [item["content"][0]["text"] for item in context] == ["before"]


def test_response_conversation_errors(web: FlaskClient) -> None:
    cid = create(web).id
    both = {"input": "hi", "conversation": cid, "previous_response_id": "resp_1"}

    error = error_of(web.post("/v1/responses", json=both), 400)
    assert error.code == "mutually_exclusive_parameters"
    error = error_of(web.post("/v1/responses", json={"input": "hi", "conversation": "conv_x"}), 404)
    assert error.param == "conversation"
    error = error_of(web.post("/v1/responses", json={"input": "hi", "conversation": {}}), 400)
    assert error.param == "conversation.id"


@pytest.mark.parametrize("path", ["/v1/conversations", "/v1/conversations/{id}/items"])
def test_a_conversation_s_large_body_waits_for_the_process_s_place(
    web: FlaskClient, path: str
) -> None:
    """As a create's does (its items take many times its size while they are checked and
    stored); the small ones go on meanwhile. Before, it was decoded and stored at once."""
    conversation = web.post("/v1/conversations", json={}).get_json()["id"]
    text = "x" * cooperation.LARGE_BYTES
    large = {"items": [{"type": "message", "role": "user", "content": text}]}
    answers: dict[str, Any] = {}

    def post_large() -> None:
        answers["large"] = web.post(path.format(id=conversation), json=large)

    with cooperation.one_large_at_a_time(cooperation.LARGE_BYTES, tenant="other"):
        thread = threading.Thread(target=post_large)
        thread.start()
        small = web.post(f"/v1/conversations/{conversation}/items", json={"items": [user("small")]})
        assert small.status_code == 200
        thread.join(0.5)  # time enough to be answered, were the place not taken
        assert "large" not in answers

    thread.join(30)
    assert answers["large"].status_code == 200, answers["large"].get_data(as_text=True)


def test_a_heavy_item_is_added_whole_and_in_order(web: FlaskClient) -> None:
    """One message of 2,500 parts, validated a batch of parts at a time (``app.validation``)."""
    parts = [{"type": "input_text", "text": f"part {n}"} for n in range(2500)]
    body = {"items": [{"type": "message", "role": "user", "content": parts}, user("after")]}

    made = web.post("/v1/conversations", json=body)

    assert made.status_code == 200, made.get_data(as_text=True)
    listed = web.get(f"/v1/conversations/{made.get_json()['id']}/items?order=asc").get_json()
    first, second = listed["data"]
    assert [part["text"] for part in first["content"]] == [f"part {n}" for n in range(2500)]
    assert second["content"][0]["text"] == "after"


def test_a_bad_part_of_a_heavy_item_is_named(web: FlaskClient) -> None:
    parts: list[Any] = [{"type": "input_text", "text": "x"}] * 2500
    parts[1234] = {"type": "input_text", "text": 7}
    body = {"items": [{"type": "message", "role": "user", "content": parts}]}

    error = error_of(web.post("/v1/conversations", json=body), 400)

    assert error.param == "items.0.content.1234.text"


def test_too_many_heavy_items_are_refused_as_too_many(web: FlaskClient) -> None:
    parts = [{"type": "input_text", "text": "x"}] * 1001
    body = {"items": [{"type": "message", "role": "user", "content": parts}] * 21}

    error = error_of(web.post("/v1/conversations", json=body), 400)

    assert error.param == "items"
