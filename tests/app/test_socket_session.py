import contextlib
import dataclasses
import gc
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import redis

from app import cooperation, socket_session
from app.config import Settings
from app.errors import AppError, InvalidRequestError
from app.keys import Keys
from app.limits import Caller
from app.protocol.json_text import load_json
from app.relay import EventHub
from app.run import RunDeps, advance_response
from app.socket_session import CreateMessage, SocketSession, parse_create_event
from app.store import ResponseStore
from app.tenancy import Tenant
from tests.app import test_relay
from tests.app.test_cooperation import RecordingTurns, waiting
from tests.app.test_run import FakeModel, answer
from tests.support.cycles import left_in_cycles
from tests.support.private_redis import PrivateRedis
from tests.support.sentinel import wait_for


class ThreadDispatcher:
    """Runs each queued turn in a thread of this process: a fleet of one, for the session."""

    def __init__(self, deps: RunDeps):
        self.deps = dataclasses.replace(deps, dispatcher=self)  # its turns queue the next here
        self.threads: list[threading.Thread] = []

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        thread = threading.Thread(target=advance_response, args=(self.deps, response_id, turn))
        thread.start()
        self.threads.append(thread)

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        raise AssertionError("no server-side tools here")

    def revoke_response(self, response_id: str, turn: int, call_ids: Sequence[str] = ()) -> None:
        raise AssertionError("nothing is cancelled here")


class ScriptedTransport:
    """Hands out the scripted messages, then says the client left; records what was sent."""

    connected = True  # sends still work after "leaving": what was sent is answered

    def __init__(self, *messages: str):
        self.messages = list(messages)
        self.sent: list[dict[str, Any]] = []

    def send(self, data: str) -> None:
        self.sent.append(json.loads(data))

    def receive(self, timeout: float | None = None) -> str | None:
        if not self.messages:
            raise ConnectionAbortedError("the client left")
        return self.messages.pop(0)

    def finals(self) -> list[dict[str, Any]]:
        return [e["response"] for e in self.sent if e["type"] == "response.completed"]

    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.sent if e["type"] == "error" and "status" in e]


def create(**body: Any) -> str:
    return json.dumps({"type": "response.create", **body})


hub = test_relay.hub  # the running EventHub fixture, shared


@pytest.fixture
def make_session(
    store: ResponseStore, hub: EventHub, make_settings: Callable[..., Settings]
) -> Iterator[Callable[..., SocketSession]]:
    dispatchers: list[ThreadDispatcher] = []

    def make(model: FakeModel, **settings: Any) -> SocketSession:
        config = make_settings(keepalive_seconds=0.2, **settings)
        dispatchers.append(ThreadDispatcher(RunDeps(store=store, provider=model, settings=config)))
        return SocketSession(store=store, hub=hub, dispatcher=dispatchers[-1], settings=config)

    yield make
    for dispatcher in dispatchers:
        for thread in dispatcher.threads:
            thread.join(timeout=10)


def serve(session: SocketSession, transport: ScriptedTransport) -> None:
    with pytest.raises(ConnectionAbortedError):
        session.serve(transport)


def test_session_continues_an_unstored_response_from_its_cache(
    make_session: Callable[..., SocketSession],
) -> None:
    model = answer("Noted.")
    session = make_session(model)
    transport = ScriptedTransport(create(input="Remember papaya", store=False))
    serve(session, transport)
    [first] = transport.finals()

    transport = ScriptedTransport(
        create(input="Which fruit?", store=False, previous_response_id=first["id"])
    )
    serve(session, transport)

    [second] = transport.finals()
    assert second["previous_response_id"] == first["id"]
    texts = [json.dumps(item["content"]) for item in model.requests[-1].items]
    assert "Remember papaya" in texts[0] and "Noted." in texts[1] and "Which fruit?" in texts[2]
    cached = session.cached[None]  # the default lane's
    assert cached.response_id == second["id"]
    assert cached.context is not None and len(cached.context) == 4


def test_session_forgets_after_a_failed_continuation(
    make_session: Callable[..., SocketSession],
) -> None:
    session = make_session(answer("Noted."))
    transport = ScriptedTransport(create(input="hi", store=False))
    serve(session, transport)
    [first] = transport.finals()
    bad = {"type": "function_call_output", "call_id": "nope", "output": "x"}

    transport = ScriptedTransport(
        create(input=[bad], previous_response_id=first["id"]),
        create(input="again", previous_response_id=first["id"]),
    )
    serve(session, transport)

    codes = [error["error"]["code"] for error in transport.errors()]
    assert codes == ["invalid_value", "previous_response_not_found"]
    assert session.cached == {}


def test_session_stored_responses_continue_through_the_store(
    make_session: Callable[..., SocketSession], store: ResponseStore
) -> None:
    session = make_session(answer("Noted."))
    transport = ScriptedTransport(create(input="hi"))
    serve(session, transport)
    [first] = transport.finals()

    assert session.cached[None].context is None
    other = make_session(answer("Again."))
    transport = ScriptedTransport(create(input="go on", previous_response_id=first["id"]))
    serve(other, transport)
    assert [final["status"] for final in transport.finals()] == ["completed"]


def test_session_ends_with_connection_limit_reached(
    make_session: Callable[..., SocketSession],
) -> None:
    now = [0.0]
    session = make_session(answer("x"), websocket_max_seconds=5)
    session.clock = lambda: now[0]
    session.deadline = 5.0
    transport = ScriptedTransport(create(input="hi"))

    def receive(timeout: float | None = None) -> str | None:
        now[0] += timeout or 0
        return None

    transport.receive = receive  # type: ignore[method-assign]

    assert session.serve(transport) == "websocket_connection_limit_reached"

    [error] = transport.sent
    assert error["error"]["code"] == "websocket_connection_limit_reached"
    assert error["status"] == 400


def test_session_ends_when_the_client_idles(make_session: Callable[..., SocketSession]) -> None:
    now = [0.0]
    session = make_session(answer("x"), websocket_idle_seconds=30)
    session.clock = lambda: now[0]
    waits: list[float] = []
    # (seconds until receive returns, what it returns): a spurious wake-up after 10 s, a create
    # 5 s later, then nothing until the wait runs out
    steps: list[tuple[float | None, str | None]] = [(10, None), (5, create(input="hi"))]

    def receive(timeout: float | None = None) -> str | None:
        assert timeout is not None
        waits.append(timeout)
        after, message = steps.pop(0) if steps else (None, None)
        wait_for(lambda: not session.busy(), timeout=10, what="the create answered")
        now[0] += timeout if after is None else after
        return message

    transport = ScriptedTransport()
    transport.receive = receive  # type: ignore[method-assign]

    assert session.serve(transport) == "websocket_idle_timeout"

    assert waits == [30, 20, 30]  # the create came within the 30 s; after it, 30 s again
    assert now[0] == 15 + 30
    assert transport.finals()[0]["status"] == "completed"
    [error] = transport.errors()
    assert (error["status"], error["error"]["code"]) == (400, "websocket_idle_timeout")


def test_session_a_message_that_is_not_json_leaves_no_error_in_a_cycle(
    make_session: Callable[..., SocketSession],
) -> None:
    """The reader's error for it was kept with the frame it was caught in (which held it), and
    raised again by the lane (whose frame held it too): each a cycle with the session in it."""
    session = make_session(answer("Noted."))
    transport = ScriptedTransport("{", create(input="hi", store=False))

    garbage = left_in_cycles(lambda: serve(session, transport))

    assert [e["error"]["code"] for e in transport.errors()] == ["invalid_json"]
    assert len(transport.finals()) == 1
    assert [o for o in garbage if isinstance(o, AppError)] == []


def parse_create_message(message: str) -> CreateMessage:
    """What the session makes of a message: its JSON, then its create."""
    return parse_create_event(load_json(message))


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("{", "invalid_json"),
        ("1", "invalid_event"),
        ('{"input": "x"}', "invalid_event_type"),
        ('{"type": "response.create", "background": true}', "unsupported_parameter"),
        ('{"type": "response.create", "background": null}', "unsupported_parameter"),
        ('{"type": "response.create", "stream": false}', "invalid_value"),
        ('{"type": "response.create", "generate": "no"}', "invalid_value"),
        ('{"type": "response.create", "generate": null}', "invalid_value"),
        ('{"type": "response.create", "input": ' + "[" * 9_999 + "]" * 9_999 + "}", "invalid_json"),
        ('{"type": "response.create", "input": "\\udc00"}', "invalid_value"),
        ('{"type": "response.create", "metadata": ' + "[" * 100 + "]" * 100 + "}", "invalid_value"),
    ],
)
def test_parse_create_message_refuses_what_is_not_a_create(message: str, code: str) -> None:
    with pytest.raises(InvalidRequestError) as raised:
        parse_create_message(message)
    assert raised.value.code == code


def test_parse_create_message_returns_the_create_body() -> None:
    assert parse_create_message(create(input="x", store=False)) == CreateMessage(
        {"input": "x", "store": False}
    )


def test_parse_create_message_takes_codex_clis_warm_up() -> None:
    """``stream: true`` is implicit in WebSocket mode (Codex sends it); ``generate`` is kept."""
    warm_up = create(input="x", stream=True, generate=False)
    assert parse_create_message(warm_up) == CreateMessage({"input": "x"}, generate=False)


def test_parse_create_message_leaves_stream_options_and_background_false_to_the_body() -> None:
    """The SDK's WebSocket create has both; the create body validates them as HTTP does."""
    message = create(input="x", stream=True, stream_options={"include_obfuscation": False})
    body = {"input": "x", "stream_options": {"include_obfuscation": False}}
    assert parse_create_message(message) == CreateMessage(body)
    assert parse_create_message(create(background=False)) == CreateMessage({"background": False})


@pytest.mark.parametrize("stored", [True, False])
def test_a_warm_up_completes_with_no_output_and_its_successor_continues_from_it(
    make_session: Callable[..., SocketSession], stored: bool
) -> None:
    model = answer("Noted.")
    session = make_session(model)
    transport = ScriptedTransport(
        create(input="Remember papaya", instructions="Be brief.", store=stored, generate=False)
    )
    serve(session, transport)

    [warm] = transport.finals()
    assert [e["type"] for e in transport.sent] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert (warm["status"], warm["output"], warm["instructions"]) == ("completed", [], "Be brief.")
    assert model.requests == []  # no model was called

    transport = ScriptedTransport(
        create(input="Which fruit?", store=stored, previous_response_id=warm["id"])
    )
    serve(session, transport)

    [final] = transport.finals()
    assert final["output"][0]["content"][0]["text"] == "Noted."
    [request] = model.requests
    texts = [json.dumps(item["content"]) for item in request.items]
    assert "Remember papaya" in texts[0] and "Which fruit?" in texts[1] and len(texts) == 2


def test_session_continues_only_its_own_tenants_responses(
    store: ResponseStore, hub: EventHub, make_settings: Callable[..., Settings]
) -> None:
    config = make_settings(keepalive_seconds=0.2)
    dispatcher = ThreadDispatcher(RunDeps(store=store, provider=answer("Noted."), settings=config))

    def connect(tenant: str) -> SocketSession:
        caller = Caller(Tenant(name=tenant))
        return SocketSession(
            store=store, hub=hub, dispatcher=dispatcher, settings=config, caller=caller
        )

    try:
        transport = ScriptedTransport(create(input="Remember papaya"))
        serve(connect("team-a"), transport)
        [first] = transport.finals()
        assert store.get(first["id"]).owner == "team-a"

        theirs = ScriptedTransport(create(input="Which fruit?", previous_response_id=first["id"]))
        serve(connect("team-b"), theirs)
        mine = ScriptedTransport(create(input="Which fruit?", previous_response_id=first["id"]))
        serve(connect("team-a"), mine)
    finally:
        for thread in dispatcher.threads:
            thread.join(timeout=10)

    [error] = theirs.errors()
    assert (error["status"], error["error"]["code"]) == (400, "previous_response_not_found")
    assert theirs.finals() == []
    [second] = mine.finals()
    assert second["previous_response_id"] == first["id"]


def test_session_unexpected_error_is_an_error_event_and_the_session_goes_on(
    make_session: Callable[..., SocketSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make_session(FakeModel([]))
    calls: list[str] = []

    def run(transport: object, message: Any, **_: object) -> None:
        calls.append(message.take()["input"])
        raise RuntimeError("secret internals")

    monkeypatch.setattr(session, "run", run)
    transport = ScriptedTransport(create(input="one"), create(input="two"))

    serve(session, transport)

    assert calls == ["one", "two"]
    assert [event["type"] for event in transport.sent] == ["error", "error"]
    error = transport.sent[0]
    assert (error["status"], error["error"]["type"]) == (500, "server_error")
    assert "secret" not in error["error"]["message"]


@pytest.mark.parametrize("why", ["disk", "replicas"])
def test_session_a_store_refusing_writes_is_a_503_to_retry_and_the_session_goes_on(
    private_redis: PrivateRedis,
    hub: EventHub,
    make_settings: Callable[..., Settings],
    caplog: pytest.LogCaptureFixture,
    why: str,
) -> None:
    """Redis refuses the create's write (its disk, its replicas): an ``error`` event with
    status 503 saying why, as the gateway answers over HTTP, no traceback; the next message is
    served once Redis takes writes. It was a 500, "The server had an error".
    """
    client = redis.Redis.from_url(private_redis.url)
    store = ResponseStore(client, keys=Keys("t:"), ttl_seconds=3600, stream_maxlen=1000)
    config = make_settings(keepalive_seconds=0.2)
    dispatcher = ThreadDispatcher(RunDeps(store=store, provider=answer("Noted."), settings=config))
    session = SocketSession(store=store, hub=hub, dispatcher=dispatcher, settings=config)

    class Recovering(ScriptedTransport):
        def send(self, data: str) -> None:
            super().send(data)
            private_redis.take_writes()  # the error went out: an operator fixes Redis

    transport = Recovering(create(input="one", store=False), create(input="two", store=False))
    private_redis.refuse_writes(why)
    try:
        serve(session, transport)
    finally:
        for thread in dispatcher.threads:
            thread.join(timeout=10)
        client.close()

    [error] = transport.errors()
    assert (error["status"], error["error"]["code"]) == (503, "service_unavailable")
    assert error["error"]["message"].startswith("The server's store ")
    assert "Traceback" not in caplog.text
    assert len(transport.finals()) == 1


class HeldModel(FakeModel):
    """Answers "Done."; a request whose input says "hold" first waits for :attr:`release`."""

    def __init__(self) -> None:
        super().__init__(*answer("Done.").script)
        self.release = threading.Event()

    def stream(self, request: Any) -> Iterator[Any]:
        if "hold" in json.dumps([item.get("content") for item in request.items]):
            assert self.release.wait(60), "never released"  # a bound for a test gone wrong
        yield from super().stream(request)


class LeavingTransport(ScriptedTransport):
    """After its messages, waits until ``ready()`` (the model released meanwhile), then leaves."""

    def __init__(self, *messages: str, ready: Callable[["LeavingTransport"], bool]):
        super().__init__(*messages)
        self.ready = ready
        self.lock = threading.Lock()

    def send(self, data: str) -> None:
        with self.lock:
            super().send(data)

    def receive(self, timeout: float | None = None) -> str | None:
        if not self.messages:
            wait_for(lambda: self.ready(self), timeout=10, what="the transport's moment to leave")
        return super().receive(timeout)

    def of_lane(self, lane: str | None) -> list[dict[str, Any]]:
        with self.lock:
            return [event for event in self.sent if event.get("stream_id") == lane]


class ClosingTransport(ScriptedTransport):
    """A client that closes the connection after its messages: its socket then says so."""

    def __init__(self, *messages: str):
        super().__init__(*messages)
        self.gone = threading.Event()

    def receive(self, timeout: float | None = None) -> str | None:
        if not self.messages:
            self.connected = False
            self.gone.set()
        return super().receive(timeout)


def test_session_stops_following_for_a_client_that_closed(
    make_session: Callable[..., SocketSession],
) -> None:
    """The lane stops at its next keepalive, not when the silent response next speaks."""
    model = HeldModel()
    session = make_session(model)  # keepalives every 0.2 s
    transport = ClosingTransport(create(input="hold on"))
    try:
        serve(session, transport)  # before: until the model gave up waiting (60 s), then failed
    finally:
        model.release.set()  # the response goes on, in the worker

    sent = [event["type"] for event in transport.sent]
    assert sent in (["response.created"], ["response.created", "response.in_progress"])


class ResetTransport(ClosingTransport):
    """A client that leaves once its messages are read, before the first event: every send
    fails, as a closed socket's does (and waits for the client to be gone first)."""

    def send(self, data: str) -> None:
        assert self.gone.wait(10), "the client never left"
        raise ConnectionResetError("the client closed the connection")


def test_session_a_client_gone_mid_stream_is_not_an_error(
    make_session: Callable[..., SocketSession], caplog: pytest.LogCaptureFixture
) -> None:
    """It logged "unexpected error in a WebSocket session", with the send's traceback."""
    session = make_session(answer("Done."))

    serve(session, ResetTransport(create(input="hi")))

    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def completed(transport: LeavingTransport, lane: str | None) -> bool:
    return any(e["type"] == "response.completed" for e in transport.of_lane(lane))


def test_session_lanes_run_side_by_side_each_event_naming_its_lane(
    make_session: Callable[..., SocketSession],
) -> None:
    model = HeldModel()
    session = make_session(model)

    def b_done_then_release_a(transport: LeavingTransport) -> bool:
        if completed(transport, "b"):
            model.release.set()
            return True
        return False

    transport = LeavingTransport(
        create(input="hold on", stream_id="a"),
        create(input="go", stream_id="b"),
        ready=b_done_then_release_a,
    )
    serve(session, transport)  # the client left: what it sent is answered first

    a, b = transport.of_lane("a"), transport.of_lane("b")
    assert len(a) + len(b) == len(transport.sent)  # every event names its lane
    assert transport.sent.index(b[-1]) < transport.sent.index(a[-1])  # b passed a, held
    for events in (a, b):
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1]["response"]["status"] == "completed"
    assert set(session.cached) == {"a", "b"}


def test_session_a_lane_runs_its_messages_in_order_and_a_new_lane_forks(
    make_session: Callable[..., SocketSession],
) -> None:
    model = answer("Noted.")
    session = make_session(model)
    transport = ScriptedTransport(
        create(input="Remember papaya", store=False, stream_id="main"),
        create(input="And kiwi", store=False, stream_id="main"),
    )
    serve(session, transport)
    first, second = transport.finals()
    created = [i for i, e in enumerate(transport.sent) if e["type"] == "response.created"]
    ended = [i for i, e in enumerate(transport.sent) if e["type"] == "response.completed"]
    assert ended[0] < created[1]  # the lane's second began after its first ended

    fork = ScriptedTransport(
        create(input="Which fruit?", store=False, previous_response_id=second["id"], stream_id="f")
    )
    serve(session, fork)

    [forked] = fork.finals()
    assert forked["previous_response_id"] == second["id"]
    texts = [json.dumps(item["content"]) for item in model.requests[-1].items]
    assert "And kiwi" in texts[0] and "Which fruit?" in texts[-1]  # the main lane's conversation
    assert {e["stream_id"] for e in fork.sent} == {"f"}


@pytest.mark.parametrize("stream_id", [5, "", "x" * 65, None])
def test_session_a_bad_stream_id_is_an_error_of_the_default_lane(
    make_session: Callable[..., SocketSession], stream_id: Any
) -> None:
    session = make_session(answer("x"))
    transport = ScriptedTransport(create(input="hi", stream_id=stream_id))

    serve(session, transport)

    [error] = transport.sent
    assert "stream_id" not in error
    assert (error["status"], error["error"]["param"], error["error"]["code"]) == (
        400,
        "stream_id",
        "invalid_value",
    )


def test_session_an_error_in_a_lane_names_its_lane(
    make_session: Callable[..., SocketSession],
) -> None:
    session = make_session(answer("x"))
    transport = ScriptedTransport(create(input="hi", background=True, stream_id="side"))

    serve(session, transport)

    [error] = transport.sent
    assert (error["stream_id"], error["error"]["code"]) == ("side", "unsupported_parameter")


def test_session_reads_no_further_than_its_pending_limit(
    make_session: Callable[..., SocketSession],
) -> None:
    model = HeldModel()
    session = make_session(model, websocket_max_pending=1)
    transport = LeavingTransport(
        create(input="hold on", stream_id="a"),
        create(input="go", stream_id="b"),
        ready=lambda _: True,
    )

    assert unread_while_held(session, model, transport) == 1  # b's create stayed unread
    a, b = transport.of_lane("a"), transport.of_lane("b")
    assert transport.sent.index(a[-1]) < transport.sent.index(b[0])


@pytest.mark.parametrize(("padding", "left_unread"), [(0, 0), (1100, 1)])
def test_session_reads_no_further_than_its_pending_bytes(
    make_session: Callable[..., SocketSession], padding: int, left_unread: int
) -> None:
    """Past ``max_body_bytes`` of pending messages the reader waits (one is always taken): a
    client cannot have sixteen large messages parsed and held at once."""
    model = HeldModel()
    session = make_session(model, max_body_bytes=1024)
    transport = LeavingTransport(
        create(input="hold on " + "x" * padding, stream_id="a"),
        create(input="go", stream_id="b"),
        ready=lambda _: True,
    )

    assert unread_while_held(session, model, transport, reads_on=not left_unread) == left_unread
    assert transport.of_lane("a") and transport.of_lane("b")


def unread_while_held(
    session: SocketSession, model: HeldModel, transport: LeavingTransport, *, reads_on: bool = False
) -> int:
    """How many of ``transport``'s messages stay unread while the first one's model is held.

    ``reads_on``: the reader is expected to read every message meanwhile; it is waited for
    (10 s at most), not given a fixed time, which a busy machine may not be enough.
    """
    unread: list[int] = []

    def look_then_release() -> None:
        wait_for(session.busy, timeout=10, what="the first create taken")
        if reads_on:
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: not transport.messages, timeout=10, what="every message read")
        else:
            time.sleep(0.2)  # room for a reader that would read on
        unread.append(len(transport.messages))
        model.release.set()

    looker = threading.Thread(target=look_then_release)
    looker.start()
    serve(session, transport)
    looker.join(timeout=10)
    [count] = unread
    return count


def test_session_a_large_message_waits_for_the_place_in_its_tenant_s_turn(
    make_session: Callable[..., SocketSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The large-body place is taken in tenants' turns (app.cooperation): as the socket's."""
    place = RecordingTurns()
    monkeypatch.setattr(cooperation, "_LARGE", place)
    session = make_session(answer("Noted."))
    session.caller = Caller(Tenant(name="team-b"))
    transport = ScriptedTransport(create(input="x" * cooperation.LARGE_BYTES))

    serve(session, transport)

    assert [final["status"] for final in transport.finals()] == ["completed"]
    assert place.took == ["team-b"]


def test_session_keeps_no_create_items_while_its_response_runs(
    make_session: Callable[..., SocketSession],
) -> None:
    """Once made a response, a message's items (most of a large one) are let go: its lane's
    queue and the frames relaying its events held them until the response ended."""
    model = HeldModel()
    session = make_session(model)
    probe = {"probe": "keeps-no-items"}
    transport = LeavingTransport(
        create(input=[{"role": "user", "content": "hold on"}], metadata=probe),
        ready=lambda sent: bool(sent.finals()),
    )
    held: list[int] = []

    def look_then_release() -> None:
        wait_for(
            lambda: any(e["type"] == "response.in_progress" for e in list(transport.sent)),
            timeout=10,
            what="the response running",
        )
        held.append(
            sum(
                isinstance(o, dict) and "input" in o and o.get("metadata") == probe
                for o in gc.get_objects()
            )
        )
        model.release.set()

    looker = threading.Thread(target=look_then_release)
    looker.start()
    serve(session, transport)
    looker.join(timeout=10)

    assert [final["status"] for final in transport.finals()] == ["completed"]
    assert held == [0]


def test_session_decodes_two_of_its_tenant_s_large_messages_while_they_wait_for_the_place(
    make_session: Callable[..., SocketSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large message is decoded when its tenant has fewer than two decoded and not yet made
    responses in the process (``app.cooperation.DECODED``): before, every large message of a
    tenant's sockets waited for the place decoded (15.75 MB sent, 110 MB decoded)."""
    place = cooperation.TenantTurns()
    monkeypatch.setattr(cooperation, "_LARGE", place)
    slots = cooperation.TenantSlots(cooperation.DECODED_PER_TENANT)
    monkeypatch.setattr(socket_session, "DECODED", slots)
    session = make_session(answer("Noted."), max_body_bytes=8 * cooperation.LARGE_BYTES)
    session.caller = Caller(Tenant(name="team-a"))
    large = "x" * cooperation.LARGE_BYTES
    transport = LeavingTransport(
        *(create(input=large, stream_id=lane) for lane in "abc"),
        ready=lambda sent: len(sent.finals()) == 3,
    )
    waited: list[int] = []

    def hold_the_place_then_free_it() -> None:
        with place.held("team-b"):
            wait_for(lambda: not transport.messages, timeout=10, what="every message received")
            waiting(place, "team-a", 2)
            time.sleep(0.3)  # room for a third to be decoded, were it let
            waited.append(len(place._waiting.get("team-a", ())))
            waited.append(slots.held("team-a"))

    holder = threading.Thread(target=hold_the_place_then_free_it)
    holder.start()
    serve(session, transport)
    holder.join(timeout=10)

    assert waited == [2, 2]
    assert [final["status"] for final in transport.finals()] == ["completed"] * 3
    assert slots.held("team-a") == 0


def test_session_stops_waiting_for_a_slot_when_its_client_leaves(
    make_session: Callable[..., SocketSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large message waits for its tenant's slot while its client is there: before, a client
    that left was noticed when the connection's time was up (an hour by default), its message
    held meanwhile."""
    slots = cooperation.TenantSlots(1)
    monkeypatch.setattr(socket_session, "DECODED", slots)
    monkeypatch.setattr(socket_session, "SLOT_CHECK_SECONDS", 0.1)
    session = make_session(
        answer("Noted."), max_body_bytes=8 * cooperation.LARGE_BYTES, websocket_max_seconds=600
    )
    held = slots.take(session.caller.tenant.name, timeout=0)  # another socket's large message
    transport = ClosingTransport(create(input="x" * cooperation.LARGE_BYTES))
    served_error: list[BaseException] = []

    def serve_it() -> None:
        try:
            session.serve(transport)
        except BaseException as exc:
            served_error.append(exc)

    served = threading.Thread(target=serve_it, daemon=True)
    served.start()
    wait_for(lambda: not transport.messages, timeout=10, what="the message read")
    time.sleep(0.3)  # waiting for the slot
    transport.connected = False

    served.join(timeout=10)
    assert not served.is_alive()  # before: until the connection's 600 s were up
    assert [type(exc) for exc in served_error] == [ConnectionAbortedError]
    assert transport.sent == [] and slots.held(session.caller.tenant.name) == 1
    assert held is not None
    held()


@pytest.mark.parametrize(
    "message",
    [
        pytest.param("{" + " " * cooperation.LARGE_BYTES, id="not-json"),
        pytest.param(json.dumps({"type": "response.other", "pad": "x" * (1 << 20)}), id="other"),
        pytest.param(create(input="x" * (1 << 20), background=True), id="refused"),
        pytest.param(
            json.dumps(
                {
                    "type": "response.steer",
                    "response_id": "resp_unknown",
                    "input": "x" * (1 << 20),
                }
            ),
            id="steer",
        ),
        pytest.param(create(input="x" * (1 << 20)), id="created"),
    ],
)
def test_session_gives_back_a_large_message_s_slot_however_it_is_answered(
    make_session: Callable[..., SocketSession], monkeypatch: pytest.MonkeyPatch, message: str
) -> None:
    slots = cooperation.TenantSlots(1)
    monkeypatch.setattr(socket_session, "DECODED", slots)
    session = make_session(
        answer("Noted."), max_body_bytes=8 * cooperation.LARGE_BYTES, websocket_max_seconds=5
    )
    transport = ScriptedTransport(message, message)  # the second takes the one slot again

    serve(session, transport)

    answers = [(event["type"], event.get("error", {}).get("code")) for event in transport.sent]
    assert len(answers) >= 2 and answers[: len(answers) // 2] == answers[len(answers) // 2 :]
    assert slots.held(session.caller.tenant.name) == 0
