"""A create of many input items lets the rest of its process run (``app.cooperation``).

A gateway process serves all its clients on one thread (gevent): before, a create of many items
held it from its first item to its last, every other client waiting.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app import cooperation
from app.errors import InvalidRequestError
from app.limits import estimate_tokens
from app.protocol.conversations import AddItemsRequest
from app.protocol.request import CreateResponseRequest
from app.responses import normalise_input, parse_body, parse_request, parse_with_items

ROOT = Path(__file__).resolve().parents[2]

CREATE_UNDER_GEVENT = """
from gevent import monkey; monkey.patch_all()
import json, sys
from pathlib import Path
import gevent, redis
from app.config import Settings
from app.keys import Keys
from app.responses import create_response
from app.store import ResponseStore
from tests.support.dispatch import RecordingDispatcher

url, prefix, count, shape = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = ResponseStore(
    redis.Redis.from_url(url), keys=Keys(prefix), ttl_seconds=600, stream_maxlen=100
)
settings = Settings(
    redis_url=url, key_prefix=prefix, llm_base_url="http://127.0.0.1:9/v1", default_model="m"
)
if shape == "parts":  # one message of as many text parts
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}] * count}]
elif shape == "wide":  # messages of 900 text parts each, as many parts in all
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}] * 900}]
    items *= count // 900
else:
    items = [{"role": "user", "content": "hi"}] * count
body = json.loads(json.dumps({"model": "m", "input": items}))
APP = f"{Path.cwd()}/app/"


def gave_way_in_app_code(greenlet):
    # whether it waits where the app's own code let others run, not in a library's wait for
    # I/O (Redis's socket, a name lookup): its innermost frame outside gevent is the app's
    frame = greenlet.gr_frame
    while frame is not None and "/gevent/" in frame.f_code.co_filename:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(APP)


create = gevent.spawn(create_response, store, RecordingDispatcher(), settings, body)
rounds = 0
while not create.dead:  # once in each round of the event loop
    gevent.sleep(0.000001)
    rounds += not create.dead and gave_way_in_app_code(create)
create.get()
print(rounds)
"""


@pytest.mark.parametrize("shape", ["items", "parts", "wide"])
def test_a_create_of_many_items_lets_the_event_loop_go_round(
    redis_url: str, key_prefix: str, shape: str
) -> None:
    """Counted in rounds of the loop the create let go by, not in time: the same on a busy
    machine.

    20,000 items: a pause each 1,000 of every per-item step. Before, the loop went round only
    while the create waited for Redis. One message of 20,000 text parts (``parts``): its parts
    are validated a batch at a time. Before, the loop went round not once in app code: a request
    of one item never paused. 22 messages of 900 parts (``wide``): validated about two at a
    time, an item weighing its parts too. Before, the loop went round twice: 22 items, none
    heavy, were validated in one call.
    """
    done = subprocess.run(
        [sys.executable, "-c", CREATE_UNDER_GEVENT, redis_url, key_prefix, "20000", shape],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    least = {"items": 60, "parts": 15, "wide": 8}[shape]
    assert int(done.stdout.strip()) >= least, done.stdout


def test_batches_and_items_pause_between_not_after(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[int] = []
    monkeypatch.setattr(cooperation, "pause", lambda: pauses.append(1))
    monkeypatch.setattr(cooperation, "SLICE_SECONDS", float("inf"))  # by count only

    assert [len(b) for b in cooperation.in_batches(list(range(2500)))] == [1000, 1000, 500]
    assert len(pauses) == 2
    assert list(cooperation.each(range(3000))) == list(range(3000))
    assert len(pauses) == 4
    assert list(cooperation.each(range(1000))) == list(range(1000))
    assert len(pauses) == 4


def test_items_pause_after_one_that_took_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any time at all is long here: a pause after every item but the last (none after it)."""
    pauses: list[int] = []
    monkeypatch.setattr(cooperation, "pause", lambda: pauses.append(1))
    monkeypatch.setattr(cooperation, "SLICE_SECONDS", 0.0)

    assert list(cooperation.each(range(5))) == list(range(5))

    assert len(pauses) == 4


def _parts_body(count: int, **changes: Any) -> dict[str, Any]:
    """A create of one user message of ``count`` text parts (``at<n>``: part n replaced)."""
    parts: list[Any] = [{"type": "input_text", "text": f"part {n}"} for n in range(count)]
    for index, part in changes.items():
        parts[int(index.removeprefix("at"))] = part
    message = {"type": "message", "role": "user", "content": parts}
    return {"model": "m", "input": [{"role": "user", "content": "first"}, message]}


def test_a_heavy_item_is_validated_a_batch_of_its_parts_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the whole body would be, with a pause between two batches of its 2,500 parts.

    Before, a request of two items was validated at once, whatever its items held.
    """
    pauses: list[int] = []
    monkeypatch.setattr(cooperation, "pause", lambda: pauses.append(1))
    body = _parts_body(2500)

    parsed = parse_request(body)

    whole = CreateResponseRequest.model_validate(body)
    assert parsed.model_dump() == whole.model_dump()
    assert parsed.model_fields_set == whole.model_fields_set
    assert len(pauses) >= 2


def test_items_weigh_their_lists_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch is a thousand of items and their parts: 30 messages of 600 parts, 15 batches.

    Before, they were validated and estimated in one call each: 18,000 parts at once, held a
    process for 2 s at 16 MB.
    """
    pauses: list[int] = []
    monkeypatch.setattr(cooperation, "pause", lambda: pauses.append(1))
    messages = [_parts_body(600)["input"][1] for _ in range(30)]
    body = {"model": "m", "input": [{"role": "user", "content": "first"}, *messages]}

    parsed = parse_request(body)

    assert parsed.model_dump() == CreateResponseRequest.model_validate(body).model_dump()
    assert len(pauses) == 14  # the first message's batch also holds the one-word question
    pauses.clear()
    assert [len(batch) for batch in cooperation.weighed_batches(parsed.input)] == [3] + [2] * 14
    assert len(pauses) == 14
    estimate_tokens(parsed)
    assert len(pauses) == 28


def test_a_conversation_s_wide_items_are_validated_a_batch_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its 20 items of 600 parts as the whole body would be, with pauses between batches.

    Before, items none of which was heavy were validated in one call.
    """
    pauses: list[int] = []
    monkeypatch.setattr(cooperation, "pause", lambda: pauses.append(1))
    body = {"items": [_parts_body(600)["input"][1] for _ in range(20)]}

    parsed = parse_with_items(AddItemsRequest, body)

    assert parsed.model_dump() == AddItemsRequest.model_validate(body).model_dump()
    assert len(pauses) == 9


def test_a_bad_part_of_a_wide_item_is_named_as_the_whole_body_would_name_it() -> None:
    messages = [_parts_body(600)["input"][1] for _ in range(30)]
    messages[17] = _parts_body(600, at444={"type": "input_text"})["input"][1]
    body = {"model": "m", "input": messages}

    with pytest.raises(InvalidRequestError) as raised:
        parse_request(body)
    with pytest.raises(InvalidRequestError) as whole:
        parse_body(CreateResponseRequest, body)

    assert raised.value.param == whole.value.param == "input.17.content.444.text"


def test_heavy_items_among_many_are_validated_in_their_places() -> None:
    heavy = _parts_body(1200)["input"][1]
    output = {"type": "function_call_output", "call_id": "c", "output": heavy["content"]}
    items = [
        *_body(1500)["input"],
        heavy,
        *_body(10)["input"],
        output,
        {"role": "user", "content": "z"},
    ]
    body = {"model": "m", "input": items}

    parsed = parse_request(body)

    whole = CreateResponseRequest.model_validate(body)
    assert parsed.model_dump() == whole.model_dump()


def test_a_heavy_item_s_estimate_is_made_a_batch_of_its_parts_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its characters as JSON, within the few its batches' brackets and commas add or take.

    Before, the item was made JSON at once: no pause.
    """
    request = parse_request(_parts_body(2500))
    whole = len(json.dumps([item.model_dump(mode="json") for item in request.input]))
    pauses: list[int] = []
    monkeypatch.setattr(cooperation, "pause", lambda: pauses.append(1))

    estimate = estimate_tokens(request)

    assert abs(estimate - (len(json.dumps(None)) + whole) // 4) <= 5
    assert len(pauses) >= 2


def test_a_heavy_item_is_made_a_dict_and_json_a_batch_of_its_parts_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same values and texts as made at once (keys in their order), with pauses between.

    Before, each of the two steps made the item at once: no pause.
    """
    request = parse_request(_parts_body(2500))
    whole = [item.model_dump(mode="json", exclude_none=True) for item in request.input]
    pauses: list[int] = []
    monkeypatch.setattr(cooperation, "pause", lambda: pauses.append(1))

    items = normalise_input(request)
    made_dicts = len(pauses)
    texts = cooperation.json_texts(items)

    heavy = {k: v for k, v in items[1].items() if k not in ("id", "status")}
    assert heavy == whole[1]
    assert list(heavy) == list(whole[1])  # its keys in their order
    assert texts == [json.dumps(item) for item in items]
    assert made_dicts >= 2
    assert len(pauses) - made_dicts >= 2


def _body(count: int, **changes: Any) -> dict[str, Any]:
    items: list[Any] = [{"role": "user", "content": f"item {n}"} for n in range(count)]
    for index, item in changes.items():
        items[int(index.removeprefix("at"))] = item
    return {"model": "m", "input": items, "metadata": {"k": "v"}}


def test_a_long_input_is_validated_as_the_whole_body_would_be() -> None:
    body = _body(2500, at1700={"type": "function_call_output", "call_id": "c", "output": "x"})

    parsed = parse_request(body)

    whole = CreateResponseRequest.model_validate(body)
    assert parsed.model_dump() == whole.model_dump()
    assert parsed.model_fields_set == whole.model_fields_set


@pytest.mark.parametrize(
    ("make", "bad", "where"),
    [
        (_body, {"at0": {"role": "user"}}, "input."),
        (_body, {"at999": {"role": "user", "content": 7}}, "input."),
        (_body, {"at1000": {"role": "nobody", "content": "x"}}, "input."),
        (_body, {"at2499": {"type": "function_call", "call_id": "c", "name": "f"}}, "input."),
        (_body, {"at1500": {"type": "no_such_item"}}, "input."),
        (_body, {"at1200": "not an item"}, "input."),
        # a part of one heavy item, validated a batch of its parts at a time
        (_parts_body, {"at0": {"type": "input_text"}}, "input.1.content."),
        (_parts_body, {"at999": {"type": "input_text", "text": 7}}, "input.1.content."),
        (_parts_body, {"at1000": {"type": "no_such_part", "text": "x"}}, "input.1.content."),
        (_parts_body, {"at2499": "not a part"}, "input.1.content."),
    ],
)
def test_a_bad_item_of_a_long_input_is_named_as_the_whole_body_would_name_it(
    make: Callable[..., dict[str, Any]], bad: dict[str, Any], where: str
) -> None:
    body = make(2500, **bad)

    with pytest.raises(InvalidRequestError) as batched:
        parse_request(body)

    with pytest.raises(InvalidRequestError) as whole:
        parse_body(CreateResponseRequest, body)
    assert (batched.value.param, batched.value.code, batched.value.message) == (
        whole.value.param,
        whole.value.code,
        whole.value.message,
    )
    assert batched.value.param is not None and batched.value.param.startswith(where)


def test_a_bad_field_beside_a_long_input_is_named_too() -> None:
    body = {**_body(2500), "temperature": "hot"}

    with pytest.raises(InvalidRequestError) as batched:
        parse_request(body)

    assert batched.value.param == "temperature"
    assert json.dumps(batched.value.message) == json.dumps(
        "Invalid type for 'temperature': expected a number, but got a string instead."
    )


def test_large_bodies_go_one_at_a_time_and_smaller_ones_meanwhile() -> None:
    entered: list[str] = []
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with cooperation.one_large_at_a_time(cooperation.LARGE_BYTES, tenant="a"):
            entered.append("first")
            first_in.set()
            release.wait(30)

    def second() -> None:
        with cooperation.one_large_at_a_time(cooperation.LARGE_BYTES + 1, tenant="a"):
            entered.append("second")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_in.wait(30)
    threads[1].start()
    with cooperation.one_large_at_a_time(cooperation.LARGE_BYTES - 1, tenant="a"):
        entered.append("small")
    threads[1].join(0.5)  # time enough to enter, were the place not taken

    assert entered == ["first", "small"]
    release.set()
    for thread in threads:
        thread.join(30)
    assert entered == ["first", "small", "second"]


class RecordingTurns(cooperation.TenantTurns):
    """The place, recording the tenants in the order they took it (``took``)."""

    def __init__(self) -> None:
        super().__init__()
        self.took: list[str] = []

    @contextmanager
    def held(self, tenant: str) -> Iterator[None]:
        with super().held(tenant):
            self.took.append(tenant)
            yield


def waiting(turns: cooperation.TenantTurns, tenant: str, count: int) -> None:
    """Until ``count`` of ``tenant``'s bodies wait for the place."""
    for _ in range(3000):
        if len(turns._waiting.get(tenant, ())) == count:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"{tenant}'s {count} bodies never waited")


def test_tenants_waiting_for_the_large_body_place_take_it_in_turn() -> None:
    """One tenant's many large bodies hold another's back by one, not by all of them."""
    turns, entered = cooperation.TenantTurns(), []
    release = threading.Event()

    def body(tenant: str, name: str) -> None:
        with turns.held(tenant):
            entered.append(name)
            if name == "a1":
                release.wait(30)

    def start(tenant: str, name: str) -> threading.Thread:
        thread = threading.Thread(target=body, args=(tenant, name))
        thread.start()
        return thread

    threads = [start("a", "a1")]
    while not entered:
        threading.Event().wait(0.01)
    for count, name in enumerate(["a2", "a3", "a4"], start=1):
        threads.append(start("a", name))
        waiting(turns, "a", count)
    threads.append(start("b", "b1"))
    waiting(turns, "b", 1)
    threads.append(start("c", "c1"))
    waiting(turns, "c", 1)
    release.set()
    for thread in threads:
        thread.join(30)

    assert entered == ["a1", "b1", "c1", "a2", "a3", "a4"]
    assert turns._holder is None and not turns._waiting  # free again


STOPPED_UNDER_GEVENT = """
from gevent import monkey; monkey.patch_all()
import gevent
from app import cooperation

turns, entered = cooperation.TenantTurns(), []
def body(tenant, name, hold=0):
    with turns.held(tenant):
        entered.append(name)
        gevent.sleep(hold)
first = gevent.spawn(body, "a", "a1", 0.2)
gevent.sleep(0.05)
stopped = gevent.spawn(body, "b", "b1")
after = gevent.spawn(body, "a", "a2")
gevent.sleep(0.05)
stopped.kill()  # a deadline, a client gone: it leaves its turn
gevent.joinall([first, after], timeout=10)
print(entered, turns._holder, dict(turns._waiting))
"""


def test_a_body_stopped_while_it_waits_for_the_place_leaves_its_turn() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_UNDER_GEVENT],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip

    assert done.stdout.strip() == "['a1', 'a2'] None {}"


def test_a_body_handed_the_place_as_it_stops_passes_it_on() -> None:
    turns = cooperation.TenantTurns()
    assert turns._take("a") is None  # the place is a's
    handed = turns._take("b")
    waiter = turns._take("c")
    assert handed is not None and waiter is not None
    turns._release()  # a is done: b's turn...
    assert handed.is_set() and turns._holder == "b"

    turns._leave("b", handed)  # ...but b stopped waiting as it was handed the place

    assert waiter.is_set() and turns._holder == "c"


def test_tenant_slots_bound_each_tenant_alone() -> None:
    """A tenant holds ``per_tenant`` slots at most; another tenant's take does not wait on it."""
    slots = cooperation.TenantSlots(2)
    first, second = slots.take("a", timeout=1), slots.take("a", timeout=1)
    assert first is not None and second is not None

    assert slots.take("a", timeout=0.05) is None  # a third waits, and its time runs out
    other = slots.take("b", timeout=0.05)
    assert other is not None
    assert (slots.held("a"), slots.held("b")) == (2, 1)

    first()
    first()  # once, however often called
    assert slots.held("a") == 1
    third = slots.take("a", timeout=0.05)
    assert third is not None and slots.held("a") == 2
    for release in (second, third, other):
        release()
    assert (slots.held("a"), slots.held("b")) == (0, 0)


def test_tenant_slots_hand_a_freed_slot_to_a_waiter() -> None:
    slots = cooperation.TenantSlots(1)
    release = slots.take("a", timeout=1)
    assert release is not None
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(slots.take("a", timeout=10)))
    waiter.start()
    threading.Event().wait(0.05)
    assert not got  # still waiting

    release()
    waiter.join(timeout=10)

    assert got and got[0] is not None and slots.held("a") == 1
