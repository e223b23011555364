"""The model's view of a history prefix is kept per process and equals the view prepared whole.

Whatever follows a kept prefix — calls of its last turn answered in a later input, an MCP
approval request decided later, results arriving out of order — the model sees what it would
see if the whole chain were prepared afresh (``app.model_prefix``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from app.config import Settings
from app.conversation import history_of
from app.model_prefix import EMPTY, PREFIXES, Prefix, PrefixKey, PreparedPrefixes, prepared_items
from app.protocol.items import item_id
from app.providers.translate import (
    ModelRequest,
    PreparedItems,
    build_chat_body,
    encode_chat_body,
    to_chat_messages,
)
from app.sealing import model_items
from app.store import ResponseStore
from app.tools.registry import KINDS
from tests.app.test_loop import CLIENT_FN, Loop, internal
from tests.support.model import ScriptedModel, calls, text

Item = dict[str, Any]


def user(words: str) -> Item:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": words}]}


def said(rid: str, turn: int, index: int, words: str) -> Item:
    return {
        "id": item_id("msg", rid, turn, index),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": words, "annotations": []}],
    }


def thought(rid: str, turn: int, index: int) -> Item:
    return {
        "id": item_id("rs", rid, turn, index),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": f"thinking in {rid}"}],
    }


def call(rid: str, turn: int, index: int, call_id: str) -> Item:
    return {
        "id": item_id("fc", rid, turn, index),
        "type": "function_call",
        "call_id": call_id,
        "name": "calculator",
        "arguments": '{"expression": "6*7"}',
        "status": "completed",
    }


def result(call_id: str) -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": f"out {call_id}"}


def shown(call_id: str) -> Item:
    """A result with an image: the model gets it in a user message after the turn's results."""
    image = {"type": "input_image", "image_url": f"https://example.test/{call_id}.png"}
    parts = [{"type": "input_text", "text": f"out {call_id}"}, image]
    return {"type": "function_call_output", "call_id": call_id, "output": parts}


def approval_request(request_id: str) -> Item:
    return {
        "id": request_id,
        "type": "mcp_approval_request",
        "server_label": "docs",
        "name": "search",
        "arguments": "{}",
    }


def approval(request_id: str) -> Item:
    return {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}


def a_chain() -> list[Item]:
    """A chain's items: plain answers, parallel calls answered out of order (one result with an
    image), reasoning, a client's call answered by the next input (with an image), an approval
    decided by the next input, calls left open before a user message."""
    items: list[Item] = []
    for n in range(3):
        rid = f"resp_{n}"
        items += [user(f"ask {n}"), thought(rid, 0, 0), call(rid, 0, 1, f"c{n}a")]
        items += [call(rid, 0, 2, f"c{n}b"), result(f"c{n}b"), shown(f"c{n}a")]
        items += [said(rid, 1, 0, f"answer {n}")]
    items += [user("two calls"), call("resp_p", 0, 0, "p1"), call("resp_p", 0, 1, "p2")]
    items += [user("weather?"), call("resp_3", 0, 0, "client")]  # asked on: the calls open
    items += [shown("client"), said("resp_4", 0, 0, "sunny")]  # the client answered
    items += [user("search"), approval_request("mcpr_1")]  # the client approves it
    items += [approval("mcpr_1"), said("resp_6", 0, 0, "found")]
    for n in range(7, 10):
        items += [user(f"ask {n}"), said(f"resp_{n}", 0, 0, f"answer {n}")]
    return items


RESTS: list[Callable[[list[Item]], list[Item]]] = [
    lambda history: [],
    lambda history: [user("next")],
    lambda history: [result(c["call_id"]) for c in reversed(history) if "call_id" in c][:2],
    lambda history: [approval("mcpr_1"), said("resp_x", 0, 0, "later")],
    lambda history: [said("resp_y", 0, 0, "more"), user("and then")],
]


def _list(store: ResponseStore) -> str:
    """A history list's key of this test's own (the kept prefixes are the process')."""
    return store.keys.history("resp_chain", "resp_chain")


def whole(store: ResponseStore, settings: Settings, items: list[Item]) -> list[Item]:
    """The model's view prepared afresh: what a process that kept nothing shows."""
    return KINDS.presenters.model_view(model_items(store, settings, items))


@pytest.mark.parametrize("replay", [False, True])
def test_every_history_of_a_list_is_shown_as_prepared_whole(
    store: ResponseStore, make_settings: Callable[..., Settings], replay: bool
) -> None:
    settings = make_settings(llm_reasoning_replay=replay)
    chain = a_chain()
    key = _list(store)
    # the histories as the chain grows, then each again (a late turn of an earlier response)
    lengths = [*range(len(chain) + 1), *range(len(chain) + 1)]
    for length in lengths:
        history = chain[:length]
        for rest_of in RESTS:
            rest = rest_of(history)
            got = prepared_items(
                store,
                settings,
                KINDS.presenters,
                history=history,
                history_list=key,
                rest=rest,
            )
            expected = whole(store, settings, [*history, *rest])
            assert list(got) == expected, (length, rest)
            for instructions in (None, "be brief"):
                plain = to_chat_messages(instructions, expected)
                assert to_chat_messages(instructions, got) == plain, (length, rest)
                sent = ModelRequest(model="m", instructions=instructions, items=got)
                body = build_chat_body(replace(sent, items=expected))
                assert json.loads(encode_chat_body(sent)) == body, (length, rest)
    kept = PREFIXES.get((key, KINDS.presenters, replay))
    # kept up to the last user message before the approval request, whose view reads later items
    assert kept.length == chain.index(approval_request("mcpr_1")) - 1


@pytest.mark.parametrize(
    ("context", "replay", "thoughts"),
    [
        ("current_turn", True, ["thinking in resp_1"]),
        ("all_turns", True, ["thinking in resp_0", "thinking in resp_1"]),
        ("auto", True, ["thinking in resp_0", "thinking in resp_1"]),
        (None, True, ["thinking in resp_0", "thinking in resp_1"]),
        ("current_turn", False, []),
    ],
)
def test_reasoning_context_current_turn_leaves_out_the_reasoning_of_earlier_turns(
    store: ResponseStore,
    make_settings: Callable[..., Settings],
    context: str | None,
    replay: bool,
    thoughts: list[str],
) -> None:
    settings = make_settings(llm_reasoning_replay=replay)
    earlier = [user("first"), thought("resp_0", 0, 0), said("resp_0", 0, 1, "one")]
    # this turn: a client call of resp_1 answered by the next response's input
    this_turn = [user("second"), thought("resp_1", 0, 0), call("resp_1", 0, 1, "call_a")]

    got = prepared_items(
        store,
        settings,
        KINDS.presenters,
        history=[*earlier, *this_turn],
        history_list=_list(store),
        rest=[result("call_a")],
        reasoning_context=context,
    )

    messages = to_chat_messages(None, got)
    assert [m["reasoning_content"] for m in messages if "reasoning_content" in m] == thoughts
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "tool"]


def test_calls_that_end_a_kept_prefix_are_answered_in_call_order_after_it(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    chain = [user("a"), call("r", 0, 0, "x"), call("r", 0, 1, "y"), user("b"), said("s", 0, 0, "c")]
    key = _list(store)

    def prepare(history: list[Item], rest: list[Item]) -> list[Item]:
        return list(
            prepared_items(
                store,
                settings,
                KINDS.presenters,
                history=history,
                history_list=key,
                rest=rest,
            )
        )

    prepare(chain, [user("d")])  # keeps the first three items, up to the user's "b"
    assert PREFIXES.get((key, KINDS.presenters, False)).length == 3
    # a late turn of the response whose history ends there: the client answers, y first
    answers = [result("y"), result("x")]
    seen = prepare(chain[:3], answers)
    assert seen == whole(store, settings, [*chain[:3], *answers])
    assert [(i["type"], i["call_id"]) for i in seen[1:]] == [
        ("function_call", "x"),
        ("function_call", "y"),
        ("function_call_output", "x"),
        ("function_call_output", "y"),
    ]


def test_a_kept_prefix_stops_before_an_item_whose_view_reads_later_items(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    history = [user("search"), approval_request("mcpr_1"), said("r", 0, 0, "x"), user("more")]
    history += [said("r2", 0, 0, "y")]
    key = _list(store)
    undecided = prepared_items(
        store,
        settings,
        KINDS.presenters,
        history=history,
        history_list=key,
        rest=[user("go on")],
    )
    assert not [i for i in undecided if i["type"] == "function_call"]  # undecided: not shown
    decided = prepared_items(
        store,
        settings,
        KINDS.presenters,
        history=history,
        history_list=key,
        rest=[approval("mcpr_1")],
    )
    assert [i["call_id"] for i in decided if i["type"] == "function_call"] == ["mcpr_1"]
    assert list(decided) == whole(store, settings, [*history, approval("mcpr_1")])


def test_translation_uses_the_kept_messages_only_for_the_items_they_stand_for() -> None:
    prefix = [user("a"), said("r", 0, 0, "b")]
    messages = [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B"}]
    tail = [user("c")]
    kept = PreparedItems([*prefix, *tail], prefix=prefix, messages=messages)
    assert to_chat_messages(None, kept)[:2] == messages
    # the list no longer starts with the kept items' objects: translated afresh
    other = PreparedItems([dict(prefix[0]), prefix[1], *tail], prefix=prefix, messages=messages)
    assert to_chat_messages(None, other)[:2] == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    # what follows the kept items would join their last message: translated afresh
    joined = PreparedItems([*prefix, call("r", 0, 1, "c1")], prefix=prefix, messages=messages)
    assert to_chat_messages(None, joined)[1]["content"] == "b"


class Recorder(ScriptedModel):
    """Calls the calculator on odd calls, answers on even ones; the client's call on request."""

    def __init__(self) -> None:
        super().__init__(text(""))

    def stream(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        n = len(self.requests)
        if n == 13:  # two parallel calls of the client's function
            yield from calls(("cli_1", "get_weather", "{}"), ("cli_2", "get_weather", "{}"))
        elif n % 2:
            yield from calls((f"call_{n}", "calculator", '{"expression": "6*7"}'))
        else:
            yield from text(f"answer {n}")


def test_a_tool_chain_shows_the_model_what_a_fresh_process_would(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    loop = Loop(store=store, settings=settings, model=Recorder())
    tools = [*internal("calculator"), CLIENT_FN]
    previous: str | None = None
    answers: list[Item] = []
    for n in range(10):
        body: dict[str, Any] = {"input": answers or f"ask {n}", "tools": tools}
        if previous is not None:
            body["previous_response_id"] = previous
        rid = loop.create(**body)
        before = len(loop.model.requests)
        assert loop.drive(rid) in ("completed", "requires_action")
        stored = store.load(rid)
        assert stored is not None
        history = history_of(store, stored)
        inputs = store.inputs(rid)
        output = stored.response.output
        # the last request saw the chain, the input and the output before its turn
        for request in loop.model.requests[before:]:
            seen = [*history, *inputs, *output[: _output_seen(output, request)]]
            assert list(request.items) == whole(store, settings, seen)
            assert to_chat_messages(None, request.items) == to_chat_messages(
                None, list(request.items)
            )
        # the client answers its calls in the next input, the second one first
        pending = [i for i in output if i["type"] == "function_call" and i["name"] == "get_weather"]
        answers = [result(c["call_id"]) for c in reversed(pending)]
        previous = rid
    # the client's answers, in reverse order, came after the kept prefix: shown in call order
    answered = loop.model.requests[13].items
    assert [(i["type"], i.get("call_id")) for i in answered[-4:]] == [
        ("function_call", "cli_1"),
        ("function_call", "cli_2"),
        ("function_call_output", "cli_1"),
        ("function_call_output", "cli_2"),
    ]


def _output_seen(output: list[Item], request: ModelRequest) -> int:
    """How many output items a request saw: those before the first its turn produced."""
    seen = {i.get("id") for i in request.items}
    count = 0
    for item in output:
        if item.get("id") not in seen:
            break
        count += 1
    return count


def test_kept_prefixes_are_bounded_by_their_bytes_too() -> None:
    """A few prefixes of long messages weigh as much as many of short ones; one larger than the
    bound is not kept (a later turn prepares it again)."""
    kept = PreparedPrefixes(capacity=1_000, capacity_bytes=250)

    def prefix(length: int, size: int) -> Prefix:
        return Prefix(length, [], [], [], b"x" * size)

    def key(name: str) -> PrefixKey:
        return (name, KINDS.presenters, False)

    for name in ("a", "b", "c"):
        kept.put(key(name), prefix(2, 100))
    assert kept.get(key("a")) is EMPTY  # pushed out by c's bytes, not by its items
    assert kept.get(key("c")).length == 2 and kept.held_bytes == 200
    kept.put(key("c"), prefix(4, 120))  # the same list, grown: counted once
    assert kept.held_bytes == 220
    kept.put(key("d"), prefix(9, 300))
    assert kept.get(key("d")) is EMPTY and kept.held_bytes == 220
