import gc
import json
import time
import weakref

import pytest
import redis

from app import sink as sink_module
from app.protocol.events import Event, output_text_delta
from app.protocol.response import ResponseStatus
from app.sink import EventSink, ResponseInactiveError
from app.store import ResponseStore
from app.store.status import CANCEL
from tests.support.lost_replies import lose_next_reply, lossy_store
from tests.support.responses import stored_response

WINDOW = 0.05


def added(item_id: str = "msg_1") -> Event:
    return {"type": "response.output_item.added", "output_index": 0, "item": {"id": item_id}}


def delta(text: str) -> Event:
    return output_text_delta("msg_1", 0, 0, text)


def stored_types(store: ResponseStore, rid: str) -> list[str]:
    return [event.type for event in store.events_after(rid, -1)]


def test_first_delta_after_a_quiet_spell_is_written_at_once(store: ResponseStore) -> None:
    rid = stored_response(store).id
    sink = EventSink(store, rid, coalesce_seconds=60)

    sink.emit(delta("a"))

    assert stored_types(store, rid) == ["response.output_text.delta"]


def test_an_announcement_waits_for_the_content_it_announces(store: ResponseStore) -> None:
    rid = stored_response(store).id
    sink = EventSink(store, rid, coalesce_seconds=60)

    sink.emit(added())
    assert stored_types(store, rid) == []  # no round trip of its own
    sink.emit(delta("a"))

    assert stored_types(store, rid) == ["response.output_item.added", "response.output_text.delta"]


def test_an_announcement_alone_is_written_within_a_window(store: ResponseStore) -> None:
    rid = stored_response(store).id
    sink = EventSink(store, rid, coalesce_seconds=WINDOW)

    sink.emit(added())

    deadline = time.monotonic() + 5
    while not stored_types(store, rid) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert stored_types(store, rid) == ["response.output_item.added"]


def test_deltas_within_a_window_are_merged(store: ResponseStore) -> None:
    rid = stored_response(store).id
    sink = EventSink(store, rid, coalesce_seconds=60)

    for text in ["a", "b", "c", "d"]:
        sink.emit(delta(text))
    sink.flush()

    written = [json.loads(event.data)["delta"] for event in store.events_after(rid, -1)]
    assert written == ["a", "bcd"]  # the first at once, the rest as one


def test_take_hands_over_the_buffer_in_order(store: ResponseStore) -> None:
    rid = stored_response(store).id
    sink = EventSink(store, rid, coalesce_seconds=60)
    sink.emit(delta("a"))  # written at once
    sink.emit(added("msg_2"))
    sink.emit(delta("b"))

    taken = sink.take()

    assert [event["type"] for event in taken] == [
        "response.output_item.added",
        "response.output_text.delta",
    ]
    assert sink.take() == []
    assert stored_types(store, rid) == ["response.output_text.delta"]


def test_take_after_a_refused_flush_raises(store: ResponseStore) -> None:
    rid = stored_response(store).id
    sink = EventSink(store, rid, coalesce_seconds=60)
    stored = store.load(rid)
    assert stored is not None
    cancelled = stored.response.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(cancelled, transition=CANCEL).ok

    with pytest.raises(ResponseInactiveError):
        sink.emit(delta("a"))  # refused: the response is cancelled
    with pytest.raises(ResponseInactiveError):
        sink.take()


def test_the_window_stretches_with_the_streams_of_the_process(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sink_module, "_LIVE", weakref.WeakSet())  # not other tests' sinks
    rid = stored_response(store).id

    def sink() -> EventSink:
        return EventSink(store, rid, coalesce_seconds=0.005, max_coalesce_seconds=0.025)

    alone = sink()
    assert alone.window() == pytest.approx(0.005)
    busy = [sink() for _ in range(11)]  # 12 streams: three base windows
    assert alone.window() == pytest.approx(0.015)
    busy += [sink() for _ in range(20)]
    assert alone.window() == pytest.approx(0.025)  # capped
    del busy
    gc.collect()
    assert alone.window() == pytest.approx(0.005)


def test_a_flush_whose_reply_was_lost_is_sent_again_without_a_repeat(
    redis_url: str, key_prefix: str
) -> None:
    store = lossy_store(redis_url, key_prefix, retries=False)
    try:
        rid = stored_response(store).id
        sink = EventSink(store, rid, coalesce_seconds=60)
        sink.emit(delta("dolor "))

        lose_next_reply()  # the flush lands; the sink hears only the error
        sink.emit(delta("sit "))  # buffered: the window is long
        with pytest.raises(redis.ConnectionError):
            sink.flush()
        sink.emit(delta("amet"))
        events = sink.take()

        assert [json.loads(e.data)["delta"] for e in store.events_after(rid, -1)] == [
            "dolor ",
            "sit ",
        ]
        assert [e["delta"] for e in events] == ["amet"]
    finally:
        store.redis.close()


def test_the_flusher_is_woken_only_for_a_sink_due_before_its_next_look(
    store: ResponseStore,
) -> None:
    """Sinks falling due after the flusher's next planned look cost no wake-up; all are flushed.

    Each schedule used to wake the flusher thread (a thread switch per buffered response on a
    busy worker, to find nothing due yet).
    """
    flusher = sink_module._Flusher()
    rids = [stored_response(store).id for _ in range(20)]
    sinks = [EventSink(store, rid, coalesce_seconds=60) for rid in rids]
    for sink in sinks:
        sink.emit(added())  # buffered, nothing written yet
    now = time.monotonic()
    # The first: the thread plans to look at +3 s (far enough that no stall of a busy machine
    # lets it flush, and plan anew, before the others are scheduled).
    flusher.schedule(sinks[0], now + 3)
    time.sleep(0.05)  # it is waiting for that look now
    for offset, sink in enumerate(sinks[1:], start=1):
        flusher.schedule(sink, now + 3 + offset * 0.001)  # all due after that look

    assert flusher.wakeups == 1
    deadline = time.monotonic() + 30
    while any(not stored_types(store, rid) for rid in rids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(stored_types(store, rid) == ["response.output_item.added"] for rid in rids)

    idle = sink_module._Flusher()  # a thread with nothing planned: a far schedule wakes it
    idle.schedule(sinks[0], time.monotonic() + 30)
    assert idle.wakeups == 1
    idle.schedule(sinks[1], time.monotonic() + 0.01)  # due before the planned look
    assert idle.wakeups == 2


def test_merged_text_deltas_keep_every_token_s_logprobs(store: ResponseStore) -> None:
    rid = stored_response(store).id
    sink = EventSink(store, rid, coalesce_seconds=60)
    tokens = {
        text: {"token": text, "logprob": -0.5, "bytes": [ord(text)], "top_logprobs": []}
        for text in "abc"
    }

    for text in "abc":
        sink.emit({**delta(text), "logprobs": [tokens[text]]})
    sink.flush()

    written = [json.loads(event.data) for event in store.events_after(rid, -1)]
    assert [(e["delta"], e["logprobs"]) for e in written] == [
        ("a", [tokens["a"]]),
        ("bc", [tokens["b"], tokens["c"]]),
    ]
