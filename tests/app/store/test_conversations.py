import dataclasses
import json
import threading
from typing import Any

import pytest
import redis

from app.protocol.response import ResponseConversation, ResponseStatus
from app.store import ResponseStore
from app.store.conversations import APPEND_BLOCK, BLOCK_BATCH, AppendBlockCall
from app.store.status import COMMIT, FAIL, FINISH
from tests.app.store.support import keys_like, lazily_freed, lazily_freed_since, make_response
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


def test_a_long_conversation_s_delete_frees_it_outside_redis_s_main_thread(
    store: ResponseStore, redis_client: redis.Redis
) -> None:
    """A ``DEL`` of 450,000 items held Redis 270 ms, while it served no one else."""
    cid = conversation(store, *(message(f"msg_{i}") for i in range(2000)))
    before = lazily_freed(redis_client)

    assert store.delete_conversation(cid)

    assert lazily_freed_since(redis_client, before, at_least=2) >= 2  # its items and order
    assert store.conversation(cid) is None


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


def _finish_in(
    store: ResponseStore,
    cid: str,
    status: str,
    *,
    store_response: bool = True,
    inputs: tuple[dict[str, Any], ...] = (message("msg_in"),),
    output_id: str = "msg_out",
) -> str:
    output = [{"type": "message", "id": output_id, "role": "assistant", "content": []}]
    response = make_response(
        "in_progress",
        id=store.keys.new_id_with_shard_of("resp_", cid),  # a cluster: in the conversation's slot
        conversation=ResponseConversation(id=cid),
        store=store_response,
    )
    store.create(response, inputs=list(inputs), extra={}, events=[])
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


LONG = 2 * BLOCK_BATCH + 10


def _long_input(prefix: str, count: int) -> tuple[dict[str, Any], ...]:
    return tuple(message(f"{prefix}_{i}", f"{prefix} {i}") for i in range(count))


def _block(prefix: str, count: int = LONG) -> list[str]:
    """The ids of a block :func:`_with_waiting_blocks` queued: its input, then its output."""
    return [*(f"{prefix}_{i}" for i in range(count)), f"{prefix}_out"]


def _history_ids(store: ResponseStore, cid: str) -> list[str]:
    history = store.redis.lrange(store.keys.conversation_history(cid), 0, -1)
    return [json.loads(item)["id"] for item in history]


def _with_waiting_blocks(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch, *blocks: tuple[str, int]
) -> str:
    """A conversation (``msg_0``) with a response's block waiting for each ``(prefix, inputs)``
    (``prefix_0``…, then ``prefix_out``): each writer stopped right after its final write (a
    worker killed) before it appended its block."""
    cid = conversation(store, message("msg_0"))
    with monkeypatch.context() as stopped:
        stopped.setattr(store, "settle_conversation", lambda _conversation_id: None)
        for prefix, count in blocks:
            inputs = _long_input(prefix, count)
            _finish_in(store, cid, "completed", inputs=inputs, output_id=f"{prefix}_out")
    return cid


def _order_and_waiting(store: ResponseStore, cid: str) -> tuple[int, int]:
    pending = store.keys.conversation_pending(cid)
    return store.redis.zcard(store.keys.conversation_order(cid)), store.redis.llen(pending)


def test_a_long_block_is_queued_by_the_final_write_not_appended_in_it(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each item appended in the write's script held Redis for everyone: 450,000 items 4.9 s."""
    cid = _with_waiting_blocks(store, monkeypatch, ("msg_in", LONG))

    assert _order_and_waiting(store, cid) == (1, 1)  # before: (512, 0), all in one call
    assert ids(store, cid) == ["msg_0", *_block("msg_in")]
    assert _order_and_waiting(store, cid) == (512, 0)


def test_a_writer_appends_its_queued_block_at_once(store: ResponseStore) -> None:
    cid = conversation(store, message("msg_0"))

    _finish_in(store, cid, "completed", inputs=_long_input("msg_in", LONG))

    assert _order_and_waiting(store, cid) == (512, 0)
    assert not keys_like(store.redis, f"{store.keys.conversation(cid)}:block:*")


def test_a_final_write_stands_when_appending_its_block_fails(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis failed after the write: the response ended; the next reader appends the block."""
    cid = conversation(store, message("msg_0"))

    def failing(_conversation_id: str) -> None:
        raise redis.ConnectionError("Redis went away")

    with monkeypatch.context() as broken:
        broken.setattr(store, "settle_conversation", failing)
        inputs = _long_input("msg_in", LONG)
        _finish_in(store, cid, "completed", inputs=inputs, output_id="msg_in_out")  # the write ok

    assert ids(store, cid) == ["msg_0", *_block("msg_in")]


def test_a_block_is_appended_a_batch_a_call(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = _with_waiting_blocks(store, monkeypatch, ("msg_in", LONG))
    pending = store.keys.conversation_pending(cid)
    block = store.redis.lindex(pending, 0)
    assert block is not None
    assert block.decode().startswith(f"{store.keys.conversation(cid)}:block:")
    call = AppendBlockCall(
        conversation=store.keys.conversation(cid),
        items_key=store.keys.conversation_items(cid),
        order_key=store.keys.conversation_order(cid),
        history=store.keys.conversation_history(cid),
        generation=store.keys.conversation_generation(cid),
        pending=pending,
        block=block.decode(),
        count=BLOCK_BATCH,
        ttl=store.ttl_seconds,
        history_ttl=store.history_ttl,
    )
    append = store.script(APPEND_BLOCK)

    other = dataclasses.replace(call, block=store.keys.conversation_block(cid, "resp_other"))
    assert append(other) == block  # not the first block: the first named, none appended
    assert _order_and_waiting(store, cid) == (1, 1)
    assert append(call) == block  # it waits on: its first batch went
    assert _order_and_waiting(store, cid) == (1 + BLOCK_BATCH, 1)
    assert append(call) == block
    assert append(call) is None  # its last ten and the output: none waits now
    assert _order_and_waiting(store, cid) == (512, 0)
    assert _history_ids(store, cid) == ids(store, cid)


READERS = {
    "every item": lambda store, cid: ids(store, cid),
    "a page": lambda store, cid: ids(store, cid, after="msg_in_499", limit=20),
    "an item": lambda store, cid: store.conversation_item(cid, "msg_in_out")[1]["id"],
    "the head": lambda store, cid: store.head(cid, ["msg_in_out"]).held,
    "an append": lambda store, cid: store.append_to_conversation(cid, [message("msg_z")]).held,
    "a delete": lambda store, cid: store.delete_conversation_item(cid, "msg_in_3")[1],
    "a rebuild": lambda store, cid: store.rebuild_history(cid),
}
SEEN = {
    "every item": ["msg_0", *_block("msg_in")],
    "a page": _block("msg_in")[500:],
    "an item": "msg_in_out",
    "the head": frozenset({"msg_in_out"}),
    "an append": None,
    "a delete": True,
    "a rebuild": True,
}


@pytest.mark.parametrize("reader", READERS)
def test_every_read_or_change_of_a_conversation_appends_the_waiting_blocks_first(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """The writer stopped before it appended its block: the next to look appends it, whole."""
    cid = _with_waiting_blocks(store, monkeypatch, ("msg_in", LONG))

    assert READERS[reader](store, cid) == SEEN[reader]

    assert _order_and_waiting(store, cid)[1] == 0
    expected = ["msg_0", *_block("msg_in")]
    if reader == "a delete":
        expected.remove("msg_in_3")
    if reader == "an append":
        expected.append("msg_z")
    assert ids(store, cid) == expected
    assert _history_ids(store, cid) == expected


def test_blocks_follow_each_other_in_the_order_their_responses_ended(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short block that ends while a long one waits waits behind it."""
    cid = _with_waiting_blocks(store, monkeypatch, ("msg_a", LONG), ("msg_b", 1))

    assert _order_and_waiting(store, cid) == (1, 2)
    assert ids(store, cid) == ["msg_0", *_block("msg_a"), *_block("msg_b", 1)]


def test_settling_side_by_side_appends_each_item_once_in_order(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = _with_waiting_blocks(store, monkeypatch, ("msg_a", 2000), ("msg_b", 700))
    start = threading.Barrier(4)

    def settle() -> None:
        start.wait()
        store.settle_conversation(cid)

    threads = [threading.Thread(target=settle) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    expected = ["msg_0", *_block("msg_a", 2000), *_block("msg_b", 700)]
    assert _order_and_waiting(store, cid) == (len(expected), 0)
    assert ids(store, cid) == expected
    assert _history_ids(store, cid) == expected


def test_a_deleted_conversation_s_waiting_blocks_go_with_it(
    store: ResponseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = _with_waiting_blocks(store, monkeypatch, ("msg_a", LONG), ("msg_b", 1))

    assert store.delete_conversation(cid)

    assert not keys_like(redis_client, f"{store.keys.conversation(cid)}*")


def test_a_block_waiting_on_a_conversation_deleted_since_is_dropped(
    store: ResponseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queued between a delete's read of the waiting blocks and its delete."""
    cid = _with_waiting_blocks(store, monkeypatch, ("msg_a", LONG))
    keys = [store.keys.conversation(cid), store.keys.conversation_items(cid)]
    redis_client.delete(*keys, store.keys.conversation_order(cid))

    store.settle_conversation(cid)

    assert not keys_like(redis_client, f"{store.keys.conversation(cid)}:*")


def test_items_of_several_conversations_are_read_by_id_in_one_call(store: ResponseStore) -> None:
    """What an ``item_reference`` to a conversation's item reads (on the cluster, the
    conversations are in slots of their own)."""
    first = conversation(store, message("msg_a", "one"))
    second = conversation(store, message("msg_b", "two"), message("msg_c", "three"))

    read = store.conversation_items_named(
        [(second, "msg_c"), (first, "msg_a"), (first, "msg_c"), ("conv_gone", "msg_a")]
    )

    assert [(c and c["id"], i and i["content"]) for c, i in read] == [
        (second, "three"),
        (first, "one"),
        (first, None),
        (None, None),
    ]
