"""Responses in a conversation: what the model reads, what the conversation gains, races."""

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from openai.types.conversations import (
    conversation_create_params,
    conversation_update_params,
    item_create_params,
)
from pydantic import BaseModel

from app.config import Settings
from app.conversation import history_of
from app.conversations import add_items, create_conversation, delete_item, list_items
from app.errors import InvalidRequestError, NotFoundError
from app.keys import Keys
from app.protocol.conversations import (
    AddItemsRequest,
    CreateConversationRequest,
    UpdateConversationRequest,
)
from app.providers.chunks import Finish, TextDelta, ToolCallDelta
from app.responses import create_response
from app.run import RunDeps, advance_response
from app.store import HistoryRef, ResponseStore
from tests.app.test_run import WEATHER_TOOL, FakeModel, answer
from tests.support.dispatch import RecordingDispatcher
from tests.support.replies import Replies


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def new_conversation(store: ResponseStore, *texts: str) -> str:
    conversation = create_conversation(store, {"items": [user(text) for text in texts]})
    conversation_id: str = conversation["id"]
    return conversation_id


def texts(store: ResponseStore, conversation_id: str) -> list[str]:
    page = list_items(store, conversation_id, limit=100, order="asc", after=None)
    return [part["text"] for item in page["data"] for part in item.get("content", [])]


def run(store: ResponseStore, settings: Settings, response_id: str, model: FakeModel) -> str:
    return advance_response(RunDeps(store=store, provider=model, settings=settings), response_id, 0)


@pytest.mark.parametrize(
    ("request_model", "sdk_params"),
    [
        (CreateConversationRequest, conversation_create_params.ConversationCreateParams),
        (UpdateConversationRequest, conversation_update_params.ConversationUpdateParams),
        (AddItemsRequest, item_create_params.ItemCreateParams),
    ],
)
def test_the_conversations_api_takes_every_body_parameter_of_the_sdk(
    request_model: type[BaseModel], sdk_params: type[Any]
) -> None:
    """A parameter a new SDK sends is no 400 ``unknown_parameter`` (openai 3.60 added
    ``safety_identifier`` to a conversation's create). ``include`` is a query parameter."""
    assert set(sdk_params.__annotations__) - {"include"} <= set(request_model.model_fields)


def test_a_response_reads_its_conversation_and_adds_its_input_and_output(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    cid = new_conversation(store, "Earlier question")
    response, _ = create_response(
        store, RecordingDispatcher(), settings, {"input": "Now?", "conversation": {"id": cid}}
    )
    model = answer("Answer.")

    assert run(store, settings, response.id, model) == "completed"

    assert response.conversation is not None and response.conversation.id == cid
    [request] = model.requests
    assert [part["text"] for item in request.items for part in item["content"]] == [
        "Earlier question",
        "Now?",
    ]
    assert texts(store, cid) == ["Earlier question", "Now?", "Answer."]
    stored = store.get(response.id).response
    assert stored.conversation == response.conversation
    assert list_items(store, cid, limit=1, order="desc", after=None)["data"] == stored.output


def test_a_client_tool_round_continues_in_the_conversation(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    cid = new_conversation(store)
    first, _ = create_response(
        store,
        RecordingDispatcher(),
        settings,
        {"input": "Weather?", "conversation": cid, "tools": [WEATHER_TOOL]},
    )
    call = ToolCallDelta(index=0, call_id="call_1", name="get_weather", arguments="{}")
    run(store, settings, first.id, FakeModel(call, Finish(reason="tool_calls")))
    output = {"type": "function_call_output", "call_id": "call_1", "output": "Rain"}
    second, _ = create_response(
        store,
        RecordingDispatcher(),
        settings,
        {"input": [output], "conversation": cid, "tools": [WEATHER_TOOL]},
    )
    model = answer("Rain in Oslo.")

    assert run(store, settings, second.id, model) == "completed"

    [request] = model.requests
    assert [item["type"] for item in request.items] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    page = list_items(store, cid, limit=100, order="asc", after=None)
    assert [item["type"] for item in page["data"]] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]


def test_conversation_and_previous_response_id_exclude_each_other(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    cid = new_conversation(store)
    body = {"input": "x", "conversation": cid, "previous_response_id": "resp_1"}

    with pytest.raises(InvalidRequestError) as raised:
        create_response(store, RecordingDispatcher(), make_settings(), body)

    assert raised.value.code == "mutually_exclusive_parameters"


def test_an_unknown_conversation_is_not_found(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    with pytest.raises(NotFoundError) as raised:
        create_response(
            store, RecordingDispatcher(), make_settings(), {"input": "x", "conversation": "conv_1"}
        )

    assert raised.value.param == "conversation"


def test_responses_racing_on_a_conversation_append_whole_blocks_in_the_order_they_end(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """The rule: each response appends its input and output as one block when it ends.

    Both responses read the conversation as it was when they were created; ``slow`` ends
    after ``fast`` although it started first, so its block comes second.
    """
    settings = make_settings()
    cid = new_conversation(store, "Seed")
    dispatcher = RecordingDispatcher()
    slow, _ = create_response(store, dispatcher, settings, {"input": "A", "conversation": cid})
    fast, _ = create_response(store, dispatcher, settings, {"input": "B", "conversation": cid})
    fast_done, slow_streaming = threading.Event(), threading.Event()
    slow_model = FakeModel(
        TextDelta(text="a1"),
        slow_streaming.set,
        lambda: fast_done.wait(10) or None,
        TextDelta(text="a2"),
        Finish(reason="stop"),
    )
    slow_thread = threading.Thread(target=run, args=(store, settings, slow.id, slow_model))
    slow_thread.start()
    assert slow_streaming.wait(10)
    add_items(store, cid, {"items": [user("Meanwhile")]})  # a client's write in between

    assert run(store, settings, fast.id, answer("b1b2")) == "completed"
    fast_done.set()
    slow_thread.join(10)

    assert store.get(slow.id).response.status == "completed"
    assert texts(store, cid) == ["Seed", "Meanwhile", "B", "b1b2", "A", "a1a2"]
    assert [len(model.requests[0].items) for model in (slow_model,)] == [2]  # Seed, A


def ids_and_texts(store: ResponseStore, conversation_id: str) -> list[tuple[str, str]]:
    page = list_items(store, conversation_id, limit=100, order="asc", after=None)
    return [(item["id"], item["content"][0]["text"]) for item in page["data"]]


def test_a_response_refuses_an_input_item_id_its_conversation_holds(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """An id names one item: a second item of it would take the first one's place."""
    cid = create_conversation(store, {"items": [{**user("first"), "id": "msg_1"}]})["id"]
    dispatcher = RecordingDispatcher()
    body = {"input": [user("new"), {**user("REPLACED"), "id": "msg_1"}], "conversation": cid}

    with pytest.raises(InvalidRequestError) as raised:
        create_response(store, dispatcher, make_settings(), body)

    assert (raised.value.param, raised.value.code) == ("input.1.id", None)
    assert "msg_1" in raised.value.message
    assert dispatcher.turns == []
    assert ids_and_texts(store, cid) == [("msg_1", "first")]


def test_adding_an_item_id_the_conversation_holds_is_refused_whole(
    store: ResponseStore,
) -> None:
    cid = create_conversation(store, {"items": [{**user("first"), "id": "msg_1"}]})["id"]
    body = {"items": [{**user("new"), "id": "msg_2"}, {**user("REPLACED"), "id": "msg_1"}]}

    with pytest.raises(InvalidRequestError) as raised:
        add_items(store, cid, body)

    assert raised.value.param == "items.1.id"
    assert ids_and_texts(store, cid) == [("msg_1", "first")]  # msg_2 not added either


def _create_conversation(store: ResponseStore, _: Settings, items: list[dict[str, Any]]) -> None:
    create_conversation(store, {"items": items})


def _add_items(store: ResponseStore, _: Settings, items: list[dict[str, Any]]) -> None:
    add_items(store, new_conversation(store), {"items": items})


def _respond(store: ResponseStore, settings: Settings, items: list[dict[str, Any]]) -> None:
    body = {"input": items, "conversation": new_conversation(store)}
    create_response(store, RecordingDispatcher(), settings, body)


@pytest.mark.parametrize(
    ("send", "param"),
    [(_create_conversation, "items.2.id"), (_add_items, "items.2.id"), (_respond, "input.2.id")],
)
def test_an_item_id_repeated_in_one_request_is_refused(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    send: Callable[[ResponseStore, Settings, list[dict[str, Any]]], None],
    param: str,
) -> None:
    items = [{**user("a"), "id": "msg_a"}, user("b"), {**user("c"), "id": "msg_a"}]

    with pytest.raises(InvalidRequestError) as raised:
        send(store, make_settings(), items)

    assert raised.value.param == param


def test_an_item_added_while_a_response_runs_keeps_its_place_when_the_response_ends(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """The one clash no create can see: a client adds an id of a running response's input.

    The response cannot be refused any more; the item there first keeps its place and content.
    """
    settings = make_settings()
    cid = new_conversation(store)
    body = {"input": [{**user("the response's"), "id": "msg_9"}], "conversation": cid}
    response, _ = create_response(store, RecordingDispatcher(), settings, body)
    add_items(store, cid, {"items": [{**user("the client's"), "id": "msg_9"}]})

    assert run(store, settings, response.id, answer("Answer.")) == "completed"

    assert ids_and_texts(store, cid) == [
        ("msg_9", "the client's"),
        (store.get(response.id).response.output[0]["id"], "Answer."),
    ]


class _CountingConnection(redis.Connection):
    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        super().send_packed_command(command, check_health)


def test_loading_a_conversation_costs_the_same_round_trips_whatever_its_length(
    redis_url: str, key_prefix: str, make_settings: Callable[..., Settings]
) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=_CountingConnection)
    store = ResponseStore(redis.Redis.from_pool(pool), keys=Keys(key_prefix), ttl_seconds=60)
    settings = make_settings()
    short = new_conversation(store, *(f"q{i}" for i in range(5)))
    long = new_conversation(store)
    for start in range(0, 200, 20):
        add_items(store, long, {"items": [user(f"q{i}") for i in range(start, start + 20)]})
    create_response(store, RecordingDispatcher(), settings, {"input": "x", "conversation": short})

    round_trips = []
    for cid in (short, long):
        before = _CountingConnection.sent
        response, _ = create_response(
            store, RecordingDispatcher(), settings, {"input": "x", "conversation": cid}
        )
        round_trips.append(_CountingConnection.sent - before)
        assert len(history_of(store, store.get(response.id))) in (5, 200)

    assert round_trips[0] == round_trips[1]
    pool.disconnect()


def model_texts(model: FakeModel, call: int = 0) -> list[str]:
    return [part["text"] for item in model.requests[call].items for part in item["content"]]


def history_lists(store: ResponseStore) -> set[bytes]:
    keys = store.redis.scan_iter(match=f"{store.keys.prefix}*:hist:*")
    return {key for key in keys if store.redis.type(key) == b"list"}


def test_a_response_of_a_long_conversation_reads_and_copies_none_of_its_items_at_create(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The conversation's items are referenced in its history list, as a chain's are.

    Before, each create read the whole conversation and copied it into a list of its own: the
    cost of a response grew with the conversation, and its memory with its square.
    """
    settings = make_settings()
    cid = new_conversation(store)
    for start in range(0, 300, 20):
        add_items(store, cid, {"items": [user(f"q{i}") for i in range(start, start + 20)]})
    lists_before = history_lists(store)
    replies = Replies(store.redis, monkeypatch)

    response, _ = create_response(
        store, RecordingDispatcher(), settings, {"input": "Now?", "conversation": cid}
    )

    assert replies.largest < 20
    assert history_lists(store) == lists_before
    model = answer("Answer.")
    assert run(store, settings, response.id, model) == "completed"
    assert model_texts(model) == [*(f"q{i}" for i in range(300)), "Now?"]


def test_a_delete_takes_the_item_from_later_responses_and_not_from_earlier_ones(
    store_on_both: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    store, settings, dispatcher = store_on_both, make_settings(), RecordingDispatcher()
    cid = new_conversation(store, "A", "B", "C")
    b_id = list_items(store, cid, limit=10, order="asc", after=None)["data"][1]["id"]
    before, _ = create_response(store, dispatcher, settings, {"input": "q1", "conversation": cid})
    early = answer("a1")
    assert run(store, settings, before.id, early) == "completed"  # its history read, and kept

    delete_item(store, cid, b_id)
    after, _ = create_response(store, dispatcher, settings, {"input": "q2", "conversation": cid})
    chained, _ = create_response(
        store, dispatcher, settings, {"input": "q3", "previous_response_id": before.id}
    )
    late, onward = answer("a2"), answer("a3")

    assert run(store, settings, after.id, late) == "completed"
    assert run(store, settings, chained.id, onward) == "completed"
    assert model_texts(early) == ["A", "B", "C", "q1"]
    assert model_texts(late) == ["A", "C", "q1", "a1", "q2"]
    assert model_texts(onward) == ["A", "B", "C", "q1", "a1", "q3"]  # its chain, as it was
    assert history_of(store, store.get(before.id)) == history_of(store, store.get(chained.id))[:3]
    assert texts(store, cid) == ["A", "C", "q1", "a1", "q2", "a2"]


def test_a_delete_between_a_create_and_its_run_leaves_the_response_its_history(
    store_on_both: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    store, settings = store_on_both, make_settings()
    cid = new_conversation(store, "A", "B")
    a_id = list_items(store, cid, limit=10, order="asc", after=None)["data"][0]["id"]
    response, _ = create_response(
        store, RecordingDispatcher(), settings, {"input": "q", "conversation": cid}
    )
    delete_item(store, cid, a_id)
    add_items(store, cid, {"items": [user("D")]})
    model = answer("a")

    assert run(store, settings, response.id, model) == "completed"

    assert model_texts(model) == ["A", "B", "q"]
    assert texts(store, cid) == ["B", "D", "q", "a"]


def test_a_conversation_made_before_its_history_list_is_read_whole_once(
    store_on_both: ResponseStore,
    make_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conversation stored by an older fleet has no history list: the first response's create
    builds it (reading the conversation whole once); the next references it, reading none."""
    store, settings, dispatcher = store_on_both, make_settings(), RecordingDispatcher()
    words = [f"w{i}" for i in range(30)]
    cid = new_conversation(store, *words[:20])
    add_items(store, cid, {"items": [user(word) for word in words[20:]]})
    keys = store.keys
    store.redis.delete(keys.conversation_history(cid), keys.conversation_generation(cid))
    first, _ = create_response(store, dispatcher, settings, {"input": "q1", "conversation": cid})
    early = answer("a1")
    assert run(store, settings, first.id, early) == "completed"
    replies = Replies(store.redis, monkeypatch)

    second, _ = create_response(store, dispatcher, settings, {"input": "q2", "conversation": cid})

    assert replies.largest < 20
    late = answer("a2")
    assert run(store, settings, second.id, late) == "completed"
    assert model_texts(early) == [*words, "q1"]
    assert model_texts(late) == [*words, "q1", "a1", "q2"]
    assert texts(store, cid) == [*words, "q1", "a1", "q2", "a2"]


def test_a_conversation_changed_by_an_older_fleet_is_read_whole_and_its_list_rebuilt(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """During an upgrade an older fleet's scripts add and delete items without the list. A
    response created before keeps what it referenced (the list as it was is kept)."""
    settings, dispatcher = make_settings(), RecordingDispatcher()
    cid = new_conversation(store, "A", "B")
    before, _ = create_response(store, dispatcher, settings, {"input": "q0", "conversation": cid})
    keys = store.keys
    [item] = list_items(store, cid, limit=1, order="asc", after=None)["data"]
    added = {**item, "id": "msg_old", "content": [{**item["content"][0], "text": "C"}]}
    store.redis.hset(keys.conversation_items(cid), "msg_old", json.dumps(added))
    store.redis.zadd(keys.conversation_order(cid), {"msg_old": 100})
    store.redis.hincrby(keys.conversation(cid), "next", 1)
    response, _ = create_response(store, dispatcher, settings, {"input": "q", "conversation": cid})
    rebuilt = store.head(cid, [])
    models = [answer("a0"), answer("a"), answer("a2")]

    assert run(store, settings, before.id, models[0]) == "completed"
    assert run(store, settings, response.id, models[1]) == "completed"
    later, _ = create_response(store, dispatcher, settings, {"input": "q2", "conversation": cid})
    assert run(store, settings, later.id, models[2]) == "completed"

    assert rebuilt is not None and rebuilt.history == HistoryRef(cid, cid, 3, 1)
    assert model_texts(models[0]) == ["A", "B", "q0"]
    assert model_texts(models[1]) == ["A", "B", "C", "q"]
    assert model_texts(models[2]) == ["A", "B", "C", "q0", "a0", "q", "a", "q2"]


def test_a_list_built_afresh_is_not_adopted_when_the_conversation_changed_meanwhile(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = new_conversation(store, "A", "B")
    a_id = list_items(store, cid, limit=1, order="asc", after=None)["data"][0]["id"]
    store.redis.delete(store.keys.conversation_history(cid))
    store.redis.delete(store.keys.conversation_generation(cid))
    append_list = store.append_list

    def appending_meanwhile(key: str, items: Any, *, before: int, ttl: int) -> bool:
        delete_item(store, cid, a_id)  # as many items as before: only the counter tells
        add_items(store, cid, {"items": [user("C")]})
        return append_list(key, items, before=before, ttl=ttl)

    monkeypatch.setattr(store, "append_list", appending_meanwhile)

    assert not store.rebuild_history(cid)
    head = store.head(cid, [])
    assert head is not None and head.history is None
    assert history_lists(store) == set()


def test_a_response_created_when_its_conversation_was_empty_sees_none_added_after(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings, dispatcher = make_settings(), RecordingDispatcher()
    cid = new_conversation(store)
    first, _ = create_response(store, dispatcher, settings, {"input": "q1", "conversation": cid})
    second, _ = create_response(store, dispatcher, settings, {"input": "q2", "conversation": cid})
    assert run(store, settings, second.id, answer("a2")) == "completed"
    model = answer("a1")

    assert run(store, settings, first.id, model) == "completed"

    assert model_texts(model) == ["q1"]
    assert texts(store, cid) == ["q2", "a2", "q1", "a1"]


def test_a_long_input_s_ids_are_checked_against_its_conversation_a_batch_a_call(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cid = new_conversation(store)
    add_items(store, cid, {"items": [{**user("held"), "id": "msg_held"}]})
    inputs = [{**user(f"m{i}"), "id": f"msg_{i}"} for i in range(2500)]
    inputs[2200]["id"] = "msg_held"
    replies = Replies(store.redis, monkeypatch)

    with pytest.raises(InvalidRequestError) as raised:
        create_response(
            store, RecordingDispatcher(), make_settings(), {"input": inputs, "conversation": cid}
        )

    assert raised.value.param == "input.2200.id"
    assert replies.largest <= 1000 + 5  # a batch of ids, beside the head's five replies


def test_a_list_is_not_built_from_an_order_naming_an_item_that_is_gone(
    store: ResponseStore,
) -> None:
    """Its length would never match the order's: every create after would rebuild it."""
    cid = new_conversation(store, "A")
    store.redis.delete(store.keys.conversation_history(cid))
    store.redis.delete(store.keys.conversation_generation(cid))
    store.redis.zadd(store.keys.conversation_order(cid), {"msg_gone": 100})

    assert not store.rebuild_history(cid)
    assert history_lists(store) == set()


def previous_release_decode(raw: bytes) -> tuple[str, str, int]:
    """How a worker of the release before conversations had lists read a ``history`` field."""
    chain, list_id, length = raw.decode().split(" ")
    return chain, list_id, int(length)


def test_a_response_created_before_any_delete_is_read_by_a_worker_of_the_release_before(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """In a rolling upgrade, an older worker may run a response a newer gateway created: its
    history must be what that worker reads (the live list: no delete has changed it)."""
    settings, dispatcher = make_settings(), RecordingDispatcher()
    cid = new_conversation(store, "A", "B")
    response, _ = create_response(store, dispatcher, settings, {"input": "q", "conversation": cid})
    raw = store.redis.hget(store.keys.record(response.id), "history")

    chain, list_id, length = previous_release_decode(raw)

    history = store.redis.lrange(store.keys.history(chain, list_id), 0, length - 1)
    assert [json.loads(item)["content"][0]["text"] for item in history] == ["A", "B"]
    assert HistoryRef.decode(raw) == HistoryRef(cid, cid, 2, 0)  # a generation, all the same

    first = list_items(store, cid, limit=10, order="asc", after=None)["data"][0]
    delete_item(store, cid, first["id"])
    later, _ = create_response(store, dispatcher, settings, {"input": "r", "conversation": cid})
    raw = store.redis.hget(store.keys.record(later.id), "history")
    assert HistoryRef.decode(raw) == HistoryRef(cid, cid, 1, 1)  # only a newer worker reads it


def test_an_older_conversation_s_first_create_builds_its_list_and_references_it(
    store_on_both: ResponseStore,
    make_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its items are read whole once (to build the list), and the response copies none."""
    store, settings = store_on_both, make_settings()
    words = [f"w{i}" for i in range(30)]
    cid = new_conversation(store, *words[:20])
    add_items(store, cid, {"items": [user(word) for word in words[20:]]})
    keys = store.keys
    store.redis.delete(keys.conversation_history(cid), keys.conversation_generation(cid))
    whole_reads: list[str] = []
    whole = type(store)._whole

    def counted(self: ResponseStore, conversation_id: str) -> Any:
        whole_reads.append(conversation_id)
        return whole(self, conversation_id)

    monkeypatch.setattr(type(store), "_whole", counted)

    response, _ = create_response(
        store, RecordingDispatcher(), settings, {"input": "q", "conversation": cid}
    )

    assert whole_reads == [cid]
    ref = HistoryRef.decode(store.redis.hget(keys.record(response.id), "history"))
    assert ref is not None and (ref.list, ref.length) == (cid, 30)
    assert history_lists(store) == {keys.conversation_history(cid).encode()}  # no copy
    model = answer("a")
    assert run(store, settings, response.id, model) == "completed"
    assert model_texts(model) == [*words, "q"]
