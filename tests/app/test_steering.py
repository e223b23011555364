"""``response.steer`` on a WebSocket session: the run stops at a safe boundary and the session
continues in a successor; the refusals; a paused response keeps the input for its client."""

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponsesServerEvent

from app import socket_session
from app.providers.chunks import Chunk, Finish, TextDelta, ToolCallDelta, UsageReport
from app.socket_session import SocketSession
from app.steering import MAX_STEERS, parse_steer, required_input, with_queued
from app.store import ResponseStore
from tests.app import test_socket_session
from tests.app.test_run import USAGE, WEATHER_TOOL
from tests.app.test_socket_session import LeavingTransport, ScriptedTransport, create
from tests.support.sentinel import wait_for

hub = test_socket_session.hub  # the running EventHub fixture, shared
make_session = test_socket_session.make_session
SERVER_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponsesServerEvent)


def text(words: str) -> list[Chunk]:
    return [TextDelta(text=words), Finish(reason="stop"), UsageReport(usage=USAGE)]


def calls(name: str) -> list[Chunk]:
    return [
        ToolCallDelta(index=0, call_id="call_1", name=name, arguments="{}"),
        Finish(reason="tool_calls"),
        UsageReport(usage=USAGE),
    ]


class StepModel:
    """Answers its calls with ``answers`` in turn (the last one after that); the first call
    waits for :attr:`release`."""

    def __init__(self, *answers: list[Chunk]):
        self.answers = answers
        self.requests: list[Any] = []
        self.release = threading.Event()

    def stream(self, request: Any) -> Iterator[Chunk]:
        self.requests.append(request)
        if len(self.requests) == 1:
            assert self.release.wait(10), "never released"
        yield from self.answers[min(len(self.requests), len(self.answers)) - 1]

    def texts(self, call: int) -> list[str]:
        return [json.dumps(item.get("content")) for item in self.requests[call].items]


class Client(LeavingTransport):
    """A message may be a function of what was sent so far: the reader waits until it gives
    one (not None). Leaves once ``ready``."""

    def receive(self, timeout: float | None = None) -> str | None:
        if self.messages and callable(self.messages[0]):
            make: Any = self.messages.pop(0)
            made: list[str] = []

            def has_made() -> bool:
                message = make(self)
                if message:
                    made.append(message)
                return bool(message)

            wait_for(has_made, timeout=10, what="the client's next message")
            return made[0]
        return super().receive(timeout)

    def types(self) -> list[str]:
        with self.lock:
            return [event["type"] for event in self.sent]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [event for event in self.sent if event["type"] == kind]


def steer(**event: Any) -> str:
    return json.dumps({"type": "response.steer", **event})


def steer_the_first(words: Any = "Use Celsius.", **extra: Any) -> Callable[[Client], str | None]:
    """A steer of the first response, once it was created."""

    def make(client: Client) -> str | None:
        created = client.of_type("response.created")
        if not created:
            return None
        target = created[0]["response"]["id"]
        return steer(previous_response_id=target, input=words, **extra)

    return make


def ended(count: int, *kinds: str) -> Callable[[Client], bool]:
    terminal = kinds or ("response.completed", "response.incomplete", "response.failed")
    return lambda client: sum(t in terminal for t in client.types()) >= count


def release_once_accepted(
    model: StepModel, then: Callable[[Client], bool]
) -> Callable[[Client], bool]:
    """Releases the model once a steer was accepted; ready when ``then`` holds."""

    def ready(client: Client) -> bool:
        if client.of_type("response.steer.accepted"):
            model.release.set()
        return then(client)

    return ready


def validated(events: list[dict[str, Any]]) -> None:
    for event in events:
        SERVER_EVENT.validate_python(event)


def test_a_steered_response_stops_after_its_turn_and_a_successor_takes_the_input(
    make_session: Callable[..., SocketSession], store: ResponseStore
) -> None:
    model = StepModel(calls("nope"), text("Done."))  # turn 0 ends in a call the fleet answers
    session = make_session(model)

    client = Client(
        create(input="hold on", stream_id="main"),
        steer_the_first(),
        ready=release_once_accepted(model, ended(2)),
    )
    serve_until_left(session, client)

    [accepted] = client.of_type("response.steer.accepted")
    first, second = (e["response"] for e in client.of_type("response.created"))
    [stopped] = client.of_type("response.incomplete")
    [done] = client.of_type("response.completed")
    assert accepted["steer"]["previous_response_id"] == first["id"]
    assert accepted["steer"]["id"].startswith("steer_") and accepted["stream_id"] == "main"
    assert stopped["response"]["id"] == first["id"]
    assert stopped["response"]["incomplete_details"] == {"reason": "steered"}
    assert [i["type"] for i in stopped["response"]["output"]] == [
        "function_call",
        "function_call_output",
    ]
    assert second["previous_response_id"] == first["id"]
    assert done["response"]["id"] == second["id"]
    assert done["response"]["output"][-1]["content"][0]["text"] == "Done."
    assert len(model.requests) == 2  # the steered response called the model once
    assert "Use Celsius." in model.texts(1)[-1]  # after the call and its result
    assert "hold on" in model.texts(1)[0]
    [steered_in] = store.inputs(second["id"])
    assert (steered_in["role"], steered_in["content"]) == (
        "user",
        [{"type": "input_text", "text": "Use Celsius."}],
    )
    assert {e.get("stream_id") for e in client.sent} == {"main"}
    assert not store.redis.exists(store.keys.steered(first["id"]))  # gone with its final write
    validated(client.sent)


@pytest.mark.parametrize("is_stored", [True, False], ids=["stored", "unstored"])
def test_a_response_that_completes_first_is_followed_by_a_successor(
    make_session: Callable[..., SocketSession], is_stored: bool
) -> None:
    model = StepModel(text("Sunny."), text("In Celsius: 20."))
    session = make_session(model)

    client = Client(
        create(input="hold on", store=is_stored),
        steer_the_first(),
        ready=release_once_accepted(model, ended(2)),
    )
    serve_until_left(session, client)

    first, second = (e["response"] for e in client.of_type("response.completed"))
    assert second["previous_response_id"] == first["id"]
    assert second["store"] is is_stored
    assert second["output"][0]["content"][0]["text"] == "In Celsius: 20."
    said = ["hold on", "Sunny.", "Use Celsius."]  # the whole conversation reached the model
    assert [json.loads(text)[0]["text"] for text in model.texts(1)] == said
    assert session.cached[None].response_id == second["id"]
    validated(client.sent)


def test_a_paused_response_keeps_the_input_for_its_clients_continuation(
    make_session: Callable[..., SocketSession],
) -> None:
    model = StepModel(calls("get_weather"), text("Noted."))
    session = make_session(model)
    model.release.set()

    def continuation(client: Client) -> str | None:
        pending = client.of_type("response.steer.pending")
        if not pending:
            return None
        [stub] = pending[0]["required_input"]
        result = {**stub, "output": "20 C"}
        return create(
            previous_response_id=pending[0]["steer"]["previous_response_id"],
            input=[result],
            tools=[WEATHER_TOOL],
        )

    def steer_when_paused(client: Client) -> str | None:
        if not client.of_type("response.completed"):
            return None
        target = client.of_type("response.completed")[0]["response"]["id"]
        return steer(previous_response_id=target, input="Also tomorrow?")

    client = Client(
        create(input="weather?", tools=[WEATHER_TOOL]),
        steer_when_paused,
        continuation,
        steer_when_paused,  # the paused response was continued: it takes no more
        ready=lambda c: (
            ended(2, "response.completed")(c) and bool(c.of_type("response.steer.failed"))
        ),
    )
    serve_until_left(session, client)

    [pending] = client.of_type("response.steer.pending")
    assert pending["reason"] == "waiting_for_required_input"
    assert pending["required_input"] == [
        {"type": "function_call_output", "call_id": "call_1", "name": "get_weather"}
    ]
    kinds = [item["type"] for item in model.requests[1].items]
    assert kinds[-2:] == ["function_call_output", "message"]  # the steer after the result
    assert "Also tomorrow?" in model.texts(1)[-1]
    [late] = client.of_type("response.steer.failed")
    assert late["error"]["code"] == "response_already_completed"
    validated(client.sent)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (steer(previous_response_id="resp_elsewhere", input="x"), "response_not_found"),
        (
            steer(previous_response_id="resp_x", input=[{"role": "assistant", "content": "x"}]),
            "invalid_input",
        ),
        (steer(previous_response_id="resp_x", input=""), "invalid_input"),
        (steer(previous_response_id="resp_x", input="x", stream_id="a"), "invalid_input"),
    ],
    ids=["elsewhere", "not-user", "empty", "stream-id"],
)
def test_a_steer_that_cannot_be_taken_is_returned(
    make_session: Callable[..., SocketSession], message: str, code: str
) -> None:
    session = make_session(StepModel(text("x")))
    transport = ScriptedTransport(message)

    serve_until_left(session, transport)

    [failed] = transport.sent
    assert failed["type"] == "response.steer.failed"
    assert failed["error"]["code"] == code
    assert "id" not in failed["steer"]  # none was given out
    assert failed["steer"]["input"] == json.loads(message)["input"]  # returned as it came
    if code != "invalid_input":  # the SDK's schema has no room for input it would not send
        SERVER_EVENT.validate_python(failed)


def test_a_steer_without_a_response_id_is_an_error(
    make_session: Callable[..., SocketSession],
) -> None:
    session = make_session(StepModel(text("x")))
    transport = ScriptedTransport(steer(input="x"))

    serve_until_left(session, transport)

    [error] = transport.sent
    assert (error["type"], error["error"]["param"]) == ("error", "previous_response_id")


@pytest.mark.parametrize("bound", ["messages", "bytes"])
def test_a_response_takes_a_bounded_amount_of_steering(
    make_session: Callable[..., SocketSession], monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    model = StepModel(text("Sunny."), text("Later."))
    session = make_session(model)
    taken = MAX_STEERS
    if bound == "bytes":  # room for two and a half messages on the connection
        size = len(steer(previous_response_id="resp_" + "0" * 48, input="note 0"))
        monkeypatch.setattr(socket_session, "MAX_STEER_BYTES", size * 5 // 2)
        taken = 2
    steers = [steer_the_first(f"note {n}") for n in range(taken + 1)]

    def answered_then_release(client: Client) -> bool:
        kinds = client.types()
        if kinds.count("response.steer.accepted") + kinds.count("response.steer.failed") > taken:
            model.release.set()
        return ended(2)(client)

    client = Client(create(input="hold on"), *steers, ready=answered_then_release)
    serve_until_left(session, client)

    assert len(client.of_type("response.steer.accepted")) == taken
    [refused] = client.of_type("response.steer.failed")
    assert refused["error"]["code"] == "too_many_pending_steers"
    successor_input = json.dumps(model.texts(1))
    assert f"note {taken - 1}" in successor_input and f"note {taken}" not in successor_input
    numbers = [e["sequence_number"] for e in client.sent if e["type"].startswith("response.steer")]
    assert numbers == list(range(taken + 1))  # the connection's own series


def test_required_input_names_what_the_client_owes() -> None:
    output = [
        {"type": "function_call", "call_id": "a", "name": "f"},
        {"type": "function_call", "call_id": "b", "name": "g"},
        {"type": "function_call_output", "call_id": "b", "output": "done by the fleet"},
        {"type": "custom_tool_call", "call_id": "c", "name": "h", "input": ""},
        {"type": "mcp_approval_request", "id": "mcpr_1", "name": "x", "server_label": "s"},
        {"type": "tool_search_call", "call_id": "d", "arguments": {}, "execution": "client"},
    ]
    assert required_input(output) == [
        {"type": "function_call_output", "call_id": "a", "name": "f"},
        {"type": "custom_tool_call_output", "call_id": "c"},
        {"type": "mcp_approval_response", "approval_request_id": "mcpr_1"},
        {"type": "tool_search_output", "call_id": "d", "execution": "client"},
    ]


def test_parse_steer_takes_user_messages_as_items() -> None:
    parts = [{"type": "input_text", "text": "Celsius"}]
    parsed = parse_steer(
        {
            "type": "response.steer",
            "previous_response_id": "resp_1",
            "input": [{"type": "message", "role": "user", "content": parts}],
        }
    )
    assert parsed.items == [{"type": "message", "role": "user", "content": parts}]


def serve_until_left(session: SocketSession, transport: ScriptedTransport) -> None:
    with pytest.raises(ConnectionAbortedError):
        session.serve(transport)


def test_queued_input_goes_after_the_results_a_continuation_starts_with() -> None:
    steer = parse_steer({"type": "response.steer", "previous_response_id": "r", "input": "Hi"})
    result = {"type": "function_call_output", "call_id": "c", "output": "20 C"}
    approval = {"type": "mcp_approval_response", "approval_request_id": "a", "approve": True}
    own = {"role": "user", "content": "Go on."}

    def roles(input_: Any) -> list[str]:
        items = with_queued({"input": input_}, [steer])["input"]
        return [item.get("role") or item["type"] for item in items]

    assert roles([result, approval, own]) == [
        "function_call_output",
        "mcp_approval_response",
        "user",
        "user",
    ]
    assert with_queued({"input": [result, own]}, [steer])["input"][1] == steer.items[0]
    assert roles("Go on.") == ["user", "user"]  # no results: the steer first, as OpenAI has it
