import json
import re
from collections.abc import Iterable
from typing import Any

from openai.types.responses import (
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from app.output import OutputBuilder, TurnOutput, item_id
from app.protocol.items import response_of_item, turn_tag, turn_tag_of
from app.protocol.response import Usage
from app.providers.chunks import (
    Chunk,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from app.responses import new_response_id
from app.sink import EventSink
from app.store import ResponseStore
from app.tools.presenters import result_item_id
from tests.support.responses import stored_response


def new_response(store: ResponseStore) -> str:
    return stored_response(store).id


def build(
    store: ResponseStore,
    rid: str,
    chunks: Iterable[Chunk],
    *,
    turn: int = 0,
    first_output_index: int = 0,
) -> TurnOutput:
    sink = EventSink(store, rid, coalesce_seconds=0)
    builder = OutputBuilder(
        response_id=rid, turn=turn, first_output_index=first_output_index, sink=sink
    )
    for chunk in chunks:
        builder.feed(chunk)
    output = builder.close()
    sink.flush()
    return output


def events(store: ResponseStore, rid: str) -> list[dict[str, Any]]:
    stored = store.events_after(rid, -1)
    assert [e.sequence_number for e in stored] == list(range(len(stored)))
    return [json.loads(e.data) for e in stored]


def test_output_builder_text_turn_emits_events_in_spec_order(store: ResponseStore) -> None:
    rid = new_response(store)
    usage = Usage(input_tokens=7, output_tokens=2, total_tokens=9)

    output = build(
        store,
        rid,
        [
            TextDelta(text="Hel"),
            TextDelta(text="lo"),
            Finish(reason="stop"),
            UsageReport(usage=usage),
        ],
    )

    emitted = events(store, rid)
    assert [e["type"] for e in emitted] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    msg_id = item_id("msg", rid, 0, 0)
    added, part_added, delta1, delta2, text_done, part_done, item_done = emitted
    assert added["item"] == {
        "id": msg_id,
        "type": "message",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    assert part_added["part"] == {
        "type": "output_text",
        "text": "",
        "annotations": [],
        "logprobs": [],
    }
    assert [delta1["delta"], delta2["delta"]] == ["Hel", "lo"]
    assert delta1["logprobs"] == []
    assert text_done["text"] == "Hello"
    assert part_done["part"]["text"] == "Hello"
    for event in (part_added, delta1, delta2, text_done, part_done):
        assert (event["item_id"], event["output_index"], event["content_index"]) == (msg_id, 0, 0)
    assert item_done["item"]["status"] == "completed"
    assert item_done["item"]["content"][0]["text"] == "Hello"
    assert output.items == [item_done["item"]]
    assert (output.finish_reason, output.usage) == ("stop", usage)
    assert output.calls == []


def test_output_builder_reasoning_then_text(store: ResponseStore) -> None:
    rid = new_response(store)

    output = build(
        store,
        rid,
        [
            ReasoningDelta(text="Let me "),
            ReasoningDelta(text="think."),
            TextDelta(text="42"),
            Finish(reason="stop"),
        ],
    )

    emitted = events(store, rid)
    assert [(e["type"], e.get("output_index")) for e in emitted] == [
        ("response.output_item.added", 0),
        ("response.reasoning.delta", 0),
        ("response.reasoning.delta", 0),
        ("response.reasoning.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.content_part.added", 1),
        ("response.output_text.delta", 1),
        ("response.output_text.done", 1),
        ("response.content_part.done", 1),
        ("response.output_item.done", 1),
    ]
    assert emitted[0]["item"]["type"] == "reasoning"
    assert emitted[3]["text"] == "Let me think."
    reasoning, message = output.items
    assert reasoning["id"] == item_id("rs", rid, 0, 0)
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Let me think."}]
    assert message["id"] == item_id("msg", rid, 0, 1)
    assert message["content"][0]["text"] == "42"


def test_output_builder_reassembles_tool_calls_split_over_fragments(store: ResponseStore) -> None:
    rid = new_response(store)

    output = build(
        store,
        rid,
        [
            ToolCallDelta(index=0, call_id="call_a", name="get_weather", arguments='{"ci'),
            ToolCallDelta(index=0, arguments='ty": "Paris"}'),
            ToolCallDelta(index=1, call_id="call_b", name="search"),
            ToolCallDelta(index=1, arguments='{"query": '),
            ToolCallDelta(index=1, arguments='"rain"}'),
            Finish(reason="tool_calls"),
        ],
    )

    first, second = item_id("fc", rid, 0, 0), item_id("fc", rid, 0, 1)
    emitted = events(store, rid)
    assert [(e["type"], e.get("item_id") or e["item"]["id"]) for e in emitted] == [
        ("response.output_item.added", first),
        ("response.function_call_arguments.delta", first),
        ("response.function_call_arguments.delta", first),
        ("response.function_call_arguments.done", first),
        ("response.output_item.done", first),
        ("response.output_item.added", second),
        ("response.function_call_arguments.delta", second),
        ("response.function_call_arguments.delta", second),
        ("response.function_call_arguments.done", second),
        ("response.output_item.done", second),
    ]
    assert [e["item"]["name"] for e in emitted if e["type"] == "response.output_item.added"] == [
        "get_weather",
        "search",
    ]
    assert emitted[0]["item"]["call_id"] == "call_a"
    assert emitted[3]["arguments"] == '{"city": "Paris"}'
    assert emitted[3]["name"] == "get_weather"
    calls = output.calls
    assert [(c["call_id"], c["name"], c["arguments"], c["status"]) for c in calls] == [
        ("call_a", "get_weather", '{"city": "Paris"}', "completed"),
        ("call_b", "search", '{"query": "rain"}', "completed"),
    ]
    assert json.loads(calls[1]["arguments"]) == {"query": "rain"}
    assert output.finish_reason == "tool_calls"


def test_output_builder_closes_text_before_a_tool_call(store: ResponseStore) -> None:
    rid = new_response(store)

    output = build(
        store,
        rid,
        [
            TextDelta(text="Checking."),
            ToolCallDelta(index=0, call_id="call_a", name="lookup"),
            Finish(reason="tool_calls"),
        ],
    )

    types = [e["type"] for e in events(store, rid)]
    assert types.index("response.output_item.done") < types.index(
        "response.function_call_arguments.done"
    )
    assert [item["type"] for item in output.items] == ["message", "function_call"]
    assert output.calls[0]["arguments"] == "{}"
    assert output.calls[0]["call_id"] == "call_a"


def test_output_builder_finish_length_marks_the_message_incomplete(store: ResponseStore) -> None:
    rid = new_response(store)

    output = build(store, rid, [TextDelta(text="Once upon a"), Finish(reason="length")])

    [message] = output.items
    assert message["status"] == "incomplete"
    assert output.finish_reason == "length"
    assert events(store, rid)[-1]["item"]["status"] == "incomplete"


def test_output_builder_item_ids_are_deterministic(store: ResponseStore) -> None:
    rid = new_response(store)
    chunks: list[Chunk] = [
        ReasoningDelta(text="hm"),
        TextDelta(text="hi"),
        ToolCallDelta(index=0, name="f"),
    ]

    first = build(store, rid, chunks, turn=1, first_output_index=2)
    again = build(store, rid, chunks, turn=1, first_output_index=2)
    other_turn = build(store, rid, chunks, turn=2, first_output_index=2)

    ids = [item["id"] for item in first.items]
    assert ids == [item["id"] for item in again.items]
    assert ids == [item_id("rs", rid, 1, 2), item_id("msg", rid, 1, 3), item_id("fc", rid, 1, 4)]
    assert not set(ids) & {item["id"] for item in other_turn.items}
    # A call without an id from the model gets a deterministic one too.
    assert first.calls[0]["call_id"] == again.calls[0]["call_id"]
    assert first.calls[0]["call_id"].startswith("call_")
    assert item_id("msg", rid, 1, 3) != item_id("msg", f"{rid}x", 1, 3)


def test_an_item_id_names_its_response_and_its_turn() -> None:
    """An ``item_reference`` is read from the response its id names (``app.references``)."""
    rid = new_response_id()
    ids = [item_id("msg", rid, 3, 0), item_id("fc", rid, 3, 1), result_item_id(rid, "call_1")]

    assert all(re.fullmatch(r"[a-z]+_[0-9a-f]{64}", iid) for iid in ids)  # OpenAPI: 1..64
    assert {response_of_item(iid) for iid in ids} == {rid}
    assert (
        turn_tag(ids[0])
        == turn_tag(ids[1])
        == turn_tag_of(rid, 3)
        != turn_tag(item_id("msg", rid, 4, 0))
    )
    # an id of a test's own making: the tag, no response
    assert turn_tag(item_id("msg", "resp_test", 3, 0)) == turn_tag_of("resp_test", 3)
    assert response_of_item(item_id("msg", "resp_test", 3, 0)) is None
    assert response_of_item(result_item_id("resp_test", "call_1")) is None


def _logprob(token: str, logprob: float, *tops: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": logprob,
        "bytes": list(token.encode()),
        "top_logprobs": [*tops],
    }


def test_output_builder_carries_the_tokens_logprobs_to_the_events_and_the_part(
    store: ResponseStore,
) -> None:
    rid = new_response(store)
    hel = _logprob("Hel", -0.1, _logprob("Hel", -0.1), _logprob("Hal", -2.0))
    lo = {"token": "lo", "logprob": float("-inf"), "bytes": None, "top_logprobs": None}

    output = build(
        store,
        rid,
        [TextDelta(text="Hel", logprobs=(hel,)), TextDelta(text="lo", logprobs=(lo,))],
    )

    [message] = output.items
    part = ResponseOutputMessage.model_validate(message).content[0]
    assert isinstance(part, ResponseOutputText) and part.logprobs is not None
    assert [(p.token, p.bytes, p.logprob) for p in part.logprobs] == [
        ("Hel", [72, 101, 108], -0.1),
        ("lo", [108, 111], -9999.0),  # minus infinity, as vLLM writes it; bytes from the token
    ]
    assert [(t.token, t.logprob) for t in part.logprobs[0].top_logprobs] == [
        ("Hel", -0.1),
        ("Hal", -2.0),
    ]
    emitted = events(store, rid)
    deltas = [
        ResponseTextDeltaEvent.model_validate(e) for e in emitted if e["type"].endswith("delta")
    ]
    assert [[(lp.token, lp.logprob) for lp in d.logprobs] for d in deltas] == [
        [("Hel", -0.1)],
        [("lo", -9999.0)],
    ]
    [done] = [
        ResponseTextDoneEvent.model_validate(e) for e in emitted if e["type"].endswith("text.done")
    ]
    assert [lp.token for lp in done.logprobs or []] == ["Hel", "lo"]


def test_output_builder_without_logprobs_keeps_them_empty(store: ResponseStore) -> None:
    rid = new_response(store)

    output = build(store, rid, [TextDelta(text="Hi")])

    assert output.items[0]["content"][0]["logprobs"] == []
    assert all(e.get("logprobs", []) == [] for e in events(store, rid))
