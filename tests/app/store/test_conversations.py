from typing import Any

import pytest
import redis

from app.protocol.response import ResponseConversation, ResponseStatus
from app.store import ResponseStore
from app.store.status import COMMIT, FAIL, FINISH
from tests.app.store.support import keys_like, make_response
from tests.support.replies import Replies


def conversation(store: ResponseStore, *items: dict[str, Any]) -> str:
    conversation_id = f"conv_{len(items)}_{id(items)}"
    store.create_conversation(
        {"id": conversation_id, "object": "conversation", "created_at": 1, "metadata": {}},
        items=items,
    )
    return conversation_id


def message(item_id: str, text: str = "hi") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "role": "user", "content": text}


def ids(store: ResponseStore, conversation_id: str, **page: Any) -> list[str]:
    found = store.conversation_items(conversation_id, **page)
    assert found is not None
    return [item["id"] for item in found.items]


def test_conversation_pages_go_either_way_from_any_item(store: ResponseStore) -> None:
    cid = conversation(store, *(message(f"msg_{i}") for i in range(5)))

    assert ids(store, cid) == [f"msg_{i}" for i in range(5)]
    assert ids(store, cid, is_descending=True) == [f"msg_{i}" for i in reversed(range(5))]
    page = store.conversation_items(cid, after="msg_1", limit=2)
    assert page is not None
    assert ([item["id"] for item in page.items], page.has_more) == (["msg_2", "msg_3"], True)
    page = store.conversation_items(cid, after="msg_2", is_descending=True, limit=2)
    assert page is not None
    assert ([item["id"] for item in page.items], page.has_more) == (["msg_1", "msg_0"], False)
    unknown = store.conversation_items(cid, after="msg_x")
    assert unknown is not None and not unknown.is_after_known
    assert store.conversation_items("conv_none") is None


def test_conversation_append_refuses_a_block_with_an_id_it_holds(store: ResponseStore) -> None:
    cid = conversation(store, message("msg_a"), message("msg_b"))

    refused = store.append_to_conversation(cid, [message("msg_c"), message("msg_a", "new")])

    assert refused.conversation is not None and refused.conversation["id"] == cid
    assert refused.held == 1
    assert ids(store, cid) == ["msg_a", "msg_b"]  # not msg_c either: all or nothing
    assert store.conversation_item(cid, "msg_a")[1] == message("msg_a")
    appended = store.append_to_conversation(cid, [message("msg_c")])
    assert (appended.conversation is not None, appended.held) == (True, None)
    assert ids(store, cid) == ["msg_a", "msg_b", "msg_c"]
    assert store.append_to_conversation("conv_none", [message("msg_d")]).conversation is None
    assert store.conversation("conv_none") is None


def test_conversation_append_keeps_an_item_without_an_id_by_its_position(
    store: ResponseStore,
) -> None:
    cid = conversation(store, message("msg_a"))

    assert store.append_to_conversation(cid, [{"type": "message", "content": []}]).conversation

    page = store.conversation_items(cid)
    assert page is not None and len(page.items) == 2
    assert store.conversation_item(cid, "item_2")[1] == {"type": "message", "content": []}


def test_conversation_item_and_conversation_delete(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    cid = conversation(store, message("msg_a"), message("msg_b"))

    found, removed = store.delete_conversation_item(cid, "msg_a")
    assert found is not None and found["id"] == cid and removed
    assert store.delete_conversation_item(cid, "msg_a")[1] is False
    assert ids(store, cid) == ["msg_b"]
    assert store.delete_conversation(cid)
    assert not store.delete_conversation(cid)
    assert store.delete_conversation_item(cid, "msg_b") == (None, False)
    assert not store.update_conversation({"id": cid, "metadata": {}})
    assert not keys_like(redis_client, f"{store.keys.conversation(cid)}*")


def test_a_whole_conversation_is_read_in_order_with_no_script_holding_its_items(
    store: ResponseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn of a response in a conversation reads all of it. Read by a script, each item was a
    Lua string (some twenty times a plain read's cost) while Redis served no one else."""
    items = [message(f"msg_{i}", f"m{i} ✓") for i in range(2500)]
    cid = conversation(store, *items)
    store.delete_conversation_item(cid, "msg_7")
    replies = Replies(redis_client, monkeypatch)

    page = store.conversation_items(cid)

    assert page is not None and page.conversation["id"] == cid and not page.has_more
    assert page.items == [item for item in items if item["id"] != "msg_7"]
    assert max(replies.scripts, default=0) < 10
    assert store.conversation_items("conv_none") is None


def _finish_in(store: ResponseStore, cid: str, status: str, *, store_response: bool = True) -> str:
    output = [{"type": "message", "id": "msg_out", "role": "assistant", "content": []}]
    response = make_response(
        "in_progress",
        id=store.keys.new_id_with_shard_of("resp_", cid),  # a cluster: in the conversation's slot
        conversation=ResponseConversation(id=cid),
        store=store_response,
    )
    store.create(response, inputs=[message("msg_in")], extra={}, events=[])
    final = response.model_copy(update={"status": ResponseStatus(status), "output": output})
    assert store.write(final, transition=FAIL if status == "failed" else FINISH).ok
    return response.id


@pytest.mark.parametrize("status", ["completed", "incomplete", "requires_action"])
def test_a_response_that_ends_appends_its_input_and_output(
    store: ResponseStore, status: str
) -> None:
    cid = conversation(store, message("msg_0"))

    _finish_in(store, cid, status)

    assert ids(store, cid) == ["msg_0", "msg_in", "msg_out"]
    assert store.conversation_item(cid, "msg_out")[1] == {
        "type": "message",
        "id": "msg_out",
        "role": "assistant",
        "content": [],  # JSON as written: an empty list stays a list
    }


def test_a_response_s_block_leaves_an_item_of_its_id_in_place(store: ResponseStore) -> None:
    """Added after the response was created (its create checked the ids): the first one stays."""
    cid = conversation(store, message("msg_0"), message("msg_in", "the client's"))

    _finish_in(store, cid, "completed")

    assert ids(store, cid) == ["msg_0", "msg_in", "msg_out"]
    assert store.conversation_item(cid, "msg_in")[1] == message("msg_in", "the client's")


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_failed_or_cancelled_response_appends_nothing(store: ResponseStore, status: str) -> None:
    cid = conversation(store, message("msg_0"))

    _finish_in(store, cid, status)

    assert ids(store, cid) == ["msg_0"]


def test_a_commit_appends_nothing_and_a_deleted_conversation_stays_deleted(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    cid = conversation(store, message("msg_0"))
    response = make_response(
        "in_progress",
        id=store.keys.new_id_with_shard_of("resp_", cid),
        conversation=ResponseConversation(id=cid),
    )
    store.create(response, inputs=[message("msg_in")], extra={}, events=[])
    assert store.write(response, transition=COMMIT).ok
    assert ids(store, cid) == ["msg_0"]

    store.delete_conversation(cid)
    final = response.model_copy(update={"status": ResponseStatus.COMPLETED})
    assert store.write(final, transition=FINISH).ok
    assert not keys_like(redis_client, f"{store.keys.conversation(cid)}*")


def test_an_unstored_response_does_not_shorten_the_conversation_s_life(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    cid = conversation(store, message("msg_0"))

    _finish_in(store, cid, "completed", store_response=False)

    for key in (store.keys.conversation(cid), store.keys.conversation_order(cid)):
        assert redis_client.ttl(key) > store.unstored_ttl_seconds
