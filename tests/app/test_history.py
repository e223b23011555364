"""A chain's history is kept once, in a list shared along the chain (``app.store.history``).

Each response references the items before its input (list, length) instead of holding a copy:
a continuation of the list's tip appends the previous response's items, a branch from an older
response copies its prefix once, and what a response reads never changes after its create.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app import cooperation
from app.config import Settings
from app.errors import PreviousResponseNotFoundError
from app.providers.translate import ModelRequest
from app.responses import delete_response
from app.store import Conversations, ResponseStore
from app.store.history import Histories, HistoryRef, ReadItems
from tests.app.test_loop import Loop
from tests.support.model import ScriptedModel, text
from tests.support.replies import Replies


class Echo(ScriptedModel):
    """Answers each call with ``answer <n>`` (its call's number)."""

    def __init__(self) -> None:
        super().__init__(text(""))

    def stream(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        yield from text(f"answer {len(self.requests)}")


def said(request: ModelRequest) -> list[str]:
    """The texts of the items a model call saw, in order."""
    return [
        part["text"]
        for item in request.items
        if item.get("type") == "message"
        for part in item["content"]
    ]


@pytest.fixture
def store(store_on_both: ResponseStore) -> ResponseStore:
    """Each test on one Redis, then on a cluster (a chain's lists in its responses' slot)."""
    return store_on_both


@pytest.fixture
def loop(store: ResponseStore, make_settings: Callable[..., Settings]) -> Loop:
    return Loop(store=store, settings=make_settings(), model=Echo())


def ask(loop: Loop, words: str, previous: str | None = None) -> str:
    body: dict[str, Any] = {"input": words}
    if previous is not None:
        body["previous_response_id"] = previous
    rid = loop.create(**body)
    assert loop.drive(rid) == "completed"
    return rid


def history_lists(store: ResponseStore) -> list[str]:
    pattern = f"{store.keys.prefix}*r:*:hist:*"  # every shard's on a cluster
    return sorted(store.redis.scan_iter(match=pattern, count=1000))


def test_a_chain_keeps_its_items_once_and_each_record_stays_small(loop: Loop) -> None:
    previous: str | None = None
    for index in range(30):
        previous = ask(loop, f"ask {index} " + "word " * 50, previous)
    assert previous is not None
    # one list for the whole chain, 2 items per response before the last
    [history] = history_lists(loop.store)
    assert loop.store.redis.llen(history) == 2 * 29
    # the record references its history: it does not grow with the chain
    record = loop.store.redis.hgetall(loop.store.keys.record(previous))
    assert len(record[b"extra"]) < 500, len(record[b"extra"])
    stored = loop.store.load(previous)
    assert stored is not None and stored.history is not None
    assert loop.store.keys.history(stored.history.chain, stored.history.list) == history.decode()
    assert stored.history.length == 2 * 29
    assert said(loop.model.requests[-1])[-2:] == ["answer 29", "ask 29 " + "word " * 50]


def test_a_branch_from_an_older_response_sees_its_own_history(loop: Loop) -> None:
    model = loop.model
    a = ask(loop, "a")
    b = ask(loop, "b", a)
    c = ask(loop, "c", b)
    assert said(model.requests[-1]) == ["a", "answer 1", "b", "answer 2", "c"]
    branch = ask(loop, "b2", b)  # b is no longer the list's tip: c's create appended b
    assert said(model.requests[-1]) == ["a", "answer 1", "b", "answer 2", "b2"]
    after_c = ask(loop, "d", c)  # the chain goes on as before the branch
    assert said(model.requests[-1]) == ["a", "answer 1", "b", "answer 2", "c", "answer 3", "d"]
    ask(loop, "b3", branch)
    assert said(model.requests[-1]) == ["a", "answer 1", "b", "answer 2", "b2", "answer 4", "b3"]
    ask(loop, "a2", a)
    assert said(model.requests[-1]) == ["a", "answer 1", "a2"]
    ask(loop, "e", after_c)
    assert said(model.requests[-1])[-3:] == ["d", "answer 5", "e"]
    # the main line's list, b2's branch (copied once, then appended to), a2's branch
    assert len(history_lists(loop.store)) == 3


def test_deleting_a_response_leaves_the_chain_after_it_whole(loop: Loop) -> None:
    a = ask(loop, "a")
    b = ask(loop, "b", a)
    c = ask(loop, "c", b)
    delete_response(loop.store, a)
    delete_response(loop.store, b)
    ask(loop, "d", c)
    assert said(loop.model.requests[-1]) == ["a", "answer 1", "b", "answer 2", "c", "answer 3", "d"]
    with pytest.raises(PreviousResponseNotFoundError):
        loop.create(input="x", previous_response_id=b)


def test_an_expired_history_is_a_previous_response_not_found(loop: Loop) -> None:
    a = ask(loop, "a")
    b = ask(loop, "b", a)
    [history] = history_lists(loop.store)
    loop.store.redis.delete(history)
    with pytest.raises(PreviousResponseNotFoundError):
        loop.create(input="c", previous_response_id=b)


def test_a_history_expired_while_queued_fails_the_response_as_the_request_s_fault(
    loop: Loop,
) -> None:
    """The chain expired after the create, before its turn ran: the response fails with the
    404-like code and the ``type`` the create's own error would have had (not ``server_error``,
    which clients retry)."""
    a = ask(loop, "a")
    b = ask(loop, "b", a)
    rid = loop.create(input="c", previous_response_id=b)
    [history] = history_lists(loop.store)
    loop.store.redis.delete(history)

    loop.drive(rid)
    failed = loop.store.get(rid).response
    assert failed.status == "failed"
    error = failed.error
    assert error is not None
    assert (error.code, error.type) == ("previous_response_not_found", "invalid_request_error")


def test_extending_twice_as_a_lost_reply_replays_gives_the_same_history(
    store: ResponseStore,
) -> None:
    items = [{"type": "message", "role": "user", "content": "a"}]
    first = store.extend_history(None, items, response_id="resp_1")
    assert first == HistoryRef("resp_1", "resp_1", 1)
    assert store.extend_history(None, items, response_id="resp_1") == first
    more = [{"type": "message", "role": "assistant", "content": "b"}]
    appended = store.extend_history(first, more, response_id="resp_2")
    assert appended == HistoryRef("resp_1", "resp_1", 2)
    replayed = store.extend_history(first, more, response_id="resp_2")  # the list moved on
    assert replayed == HistoryRef("resp_1", "resp_2", 2)
    assert store.history(appended) == store.history(replayed) == [*items, *more]
    assert store.history(HistoryRef("resp_1", "resp_1", 1)) == items  # the prefix unchanged


def test_a_history_lives_at_least_as_long_as_the_store_keeps_responses(
    store: ResponseStore,
) -> None:
    ref = store.extend_history(None, [{"type": "message"}], response_id="resp_1")
    assert ref is not None
    key = store.keys.history(ref.chain, ref.list)
    store.redis.expire(key, 10)
    assert store.history(ref) == [{"type": "message"}]  # a turn's read keeps it
    assert store.redis.ttl(key) > store.ttl_seconds


def test_a_process_keeps_history_it_read_up_to_a_bound_in_bytes(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The items a process keeps are bounded by their JSON's bytes, not only by their number:
    a few long items (a pasted document, a tool's long output) weigh as much as many short ones.
    A list larger than the bound is read whole each time and not kept."""
    kept = ReadItems(capacity_bytes=300_000)
    monkeypatch.setattr(Histories, "read_items", property(lambda _: kept))
    long_item = {"type": "message", "role": "user", "content": "x" * 100_000}

    refs = [store.extend_history(None, [long_item], response_id=f"resp_{n}") for n in range(5)]
    for ref in refs:
        assert ref is not None and store.history(ref) == [long_item]

    assert 200_000 < kept.held_bytes <= 300_000  # the two lists read last
    too_long = store.extend_history(None, [long_item] * 4, response_id="resp_long")
    assert too_long is not None and store.history(too_long) == [long_item] * 4
    assert kept.held_bytes <= 300_000
    assert kept.get(store.keys.history(too_long.chain, too_long.list)) == ([], [])
    # a list read again in part and then in full counts its bytes once
    [ref] = refs[-1:]
    first = store.extend_history(ref, [long_item], response_id="resp_more")
    assert first is not None and store.history(first) == [long_item] * 2
    key = store.keys.history(first.chain, first.list)
    items, ends = kept.get(key)
    assert len(items) == 2 and ends[1] == 2 * ends[0] and kept.held_bytes <= 300_000


def test_a_history_read_never_shortens_its_lists_life(store: ResponseStore) -> None:
    ref = store.extend_history(None, [{"type": "message"}], response_id="resp_1")
    assert ref is not None
    key = store.keys.history(ref.chain, ref.list)
    store.redis.expire(key, 10 * store.history_ttl)
    assert store.history(ref) == [{"type": "message"}]
    assert store.redis.ttl(key) > 9 * store.history_ttl


def test_a_long_history_is_read_and_branched_with_no_script_holding_its_items(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list read into a Lua script costs Redis ~20 times a plain read (a Lua string per item),
    and Redis serves nobody else meanwhile: 2,500 items, ~3 ms; 450,000, over a second. A cold
    read of a long chain (a new worker, or one whose kept items were evicted) did that; so did a
    branch from an older response of it (``extend_history.lua`` copies the list natively now:
    its reply tells nothing of that, the branch's items show it right)."""
    monkeypatch.setattr(Histories, "read_items", property(lambda _: ReadItems()))  # cold
    items = [{"type": "message", "role": "user", "content": f"m{i} ✓"} for i in range(2500)]
    tip = store.extend_history(None, items, response_id="resp_1")
    assert tip is not None
    older = HistoryRef(tip.chain, tip.list, 2000)
    replies = Replies(store.redis, monkeypatch)

    assert store.history(tip) == items
    branch = store.extend_history(older, [{"type": "message"}], response_id="resp_2")
    assert branch == HistoryRef("resp_1", "resp_2", 2001)

    assert max(replies.scripts) <= 2  # extend_history's reply: {code, length}
    assert replies.largest == cooperation.BATCH  # read a batch a call
    assert store.history(branch) == [*items[:2000], {"type": "message"}]
    assert store.history(tip) == items  # the tip's list unchanged


def test_a_long_block_extends_a_history_a_batch_a_call(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Continuing a response of 450,000 input items sent them all in one script call, which
    held Redis (every tenant's events and turns) for most of a second."""
    first = [{"type": "message", "role": "user", "content": f"a{i}"} for i in range(2500)]
    second = [{"type": "message", "role": "user", "content": f"b{i} ✓"} for i in range(2300)]
    sent: list[int] = []
    execute = store.redis.execute_command

    def counting(*args: Any, **options: Any) -> Any:
        sent.append(len(args))
        return execute(*args, **options)

    monkeypatch.setattr(store.redis, "execute_command", counting)

    tip = store.extend_history(None, first, response_id="resp_1")
    appended = store.extend_history(tip, second, response_id="resp_2")  # onto the tip
    sibling = store.extend_history(tip, second[:1500], response_id="resp_3")  # a branch

    monkeypatch.undo()
    assert max(sent) < 1100
    assert tip == HistoryRef("resp_1", "resp_1", 2500)
    assert appended == HistoryRef("resp_1", "resp_1", 4800)
    assert sibling == HistoryRef("resp_1", "resp_3", 4000)
    assert store.history(appended) == [*first, *second]
    assert store.history(sibling) == [*first, *second[:1500]]
    assert store.history(tip) == first


def conversation_of(store: ResponseStore, count: int) -> tuple[str, list[dict[str, Any]]]:
    """A conversation of ``count`` items (made in the store: the API adds 20 a call)."""
    items = [{"type": "message", "id": f"msg_{i}", "content": f"m{i}"} for i in range(count)]
    store.create_conversation({"id": "conv_1", "object": "conversation"}, items=items)
    return "conv_1", items


def test_a_conversation_s_history_is_what_it_was_when_referenced(
    store_on_both: ResponseStore,
) -> None:
    store = store_on_both
    cid, items = conversation_of(store, 3)
    head = store.head(cid, [])
    assert head is not None and head.history == HistoryRef(cid, cid, 3, 0)

    store.append_to_conversation(cid, [{"type": "message", "id": "msg_3", "content": "m3"}])
    store.delete_conversation_item(cid, "msg_1")
    store.delete_conversation_item(cid, "msg_0")
    later = store.head(cid, ["msg_1", "msg_2"])

    assert later is not None and later.history == HistoryRef(cid, cid, 2, 2)
    assert later.held == {"msg_2"}
    assert store.history(head.history) == items
    assert store.history(later.history) == [items[2], {**items[2], "id": "msg_3", "content": "m3"}]


def test_a_delete_between_two_batches_of_a_long_read_is_not_read_into_the_history(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history of more than a batch is read a batch a call: a delete may come between."""
    monkeypatch.setattr(Histories, "read_items", property(lambda _: ReadItems()))  # cold
    cid, items = conversation_of(store, 2500)
    head = store.head(cid, [])
    assert head is not None and head.history is not None
    read_list = store.read_list

    def deleting(key: str, end: int | None = None, *, start: int = 0) -> list[bytes | str]:
        store.delete_conversation_item(cid, "msg_10")
        return read_list(key, end, start=start)

    monkeypatch.setattr(store, "read_list", deleting)

    assert store.history(head.history) == items


def test_a_reference_to_no_items_reads_none(store: ResponseStore) -> None:
    ref = store.extend_history(None, [{"type": "message"}], response_id="resp_1")
    assert ref is not None

    assert store.history(HistoryRef(ref.chain, ref.list, 0)) == []


def test_a_delete_keeps_the_list_only_when_a_reference_was_made_since_the_last(
    store: ResponseStore,
) -> None:
    """A client deleting items one by one (``pop_item`` in a loop) must not copy a long
    conversation at every delete: only a response's reference needs the list as it was."""
    cid, _ = conversation_of(store, 4)
    kept = [store.keys.conversation_history_at(cid, generation) for generation in range(3)]

    store.delete_conversation_item(cid, "msg_3")  # generation 0 → 1, nobody referenced 0
    head = store.head(cid, [])
    store.delete_conversation_item(cid, "msg_2")  # 1 → 2, referenced
    store.delete_conversation_item(cid, "msg_1")  # 2 → 3, nobody referenced 2

    assert [bool(store.redis.exists(key)) for key in kept] == [False, True, False]
    assert head is not None and head.history is not None
    assert [item["id"] for item in store.history(head.history) or []] == ["msg_0", "msg_1", "msg_2"]


def test_a_delete_between_reading_a_head_and_marking_it_referenced_reads_it_again(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid, _ = conversation_of(store, 3)
    referenced = Conversations._referenced
    deleted: list[str] = []

    def deleting_first(self: Conversations, conversation_id: str, generation: Any) -> bool:
        if not deleted:
            deleted.append("msg_1")
            store.delete_conversation_item(cid, "msg_1")  # the reference is not marked yet
        return referenced(self, conversation_id, generation)

    monkeypatch.setattr(Conversations, "_referenced", deleting_first)
    head = store.head(cid, [])

    assert head is not None and head.history == HistoryRef(cid, cid, 2, 1)
    assert [item["id"] for item in store.history(head.history) or []] == ["msg_0", "msg_2"]
