"""WebSocket mode of ``/v1/responses`` through a real WebSocket client, against the fleet."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import openresponses_types
import pytest
import websockets.asyncio.client
from openai.types.responses.responses_server_event import ResponseWsError
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Ping, Request, TextMessage

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import check_sequence, raw_events, validate_event

LOCAL_MCP: Any = {"type": "mcp", "server_label": "local", "require_approval": "never"}
"""The fleet's configured stdio MCP server (tests/support/mcp_servers.py: ``slow`` sleeps)."""
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete"})
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def socket_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://", 1) + "/v1/responses"


def open_socket(base_url: str, **headers: str) -> ClientConnection:
    return connect(socket_url(base_url), additional_headers=headers, proxy=None, open_timeout=10)


@pytest.fixture
def ws(fleet: Fleet) -> Iterator[ClientConnection]:
    with open_socket(fleet.base_url) as connection:
        yield connection


def receive(connection: ClientConnection) -> dict[str, Any]:
    message = connection.recv(timeout=30)
    assert isinstance(message, str), message
    event: dict[str, Any] = json.loads(message)
    return event


def create(connection: ClientConnection, **body: Any) -> list[dict[str, Any]]:
    """Send one ``response.create``; the events until the terminal one (or a socket error)."""
    connection.send(json.dumps({"type": "response.create", **body}))
    return receive_response(connection)


def receive_response(connection: ClientConnection) -> list[dict[str, Any]]:
    events = []
    while True:
        event = receive(connection)
        events.append(event)
        if event["type"] in TERMINAL or is_socket_error(event):
            return events


def is_socket_error(event: dict[str, Any]) -> bool:
    return event["type"] == "error" and "status" in event


def check_response_events(events: list[dict[str, Any]], status: str = "completed") -> dict:
    """Every event is the spec's, numbered from 0; returns the final response."""
    for event in events:
        validate_event(event)
    check_sequence(events)
    assert events[0]["type"] == "response.created"
    assert events[-1]["response"]["status"] == status, events[-1]
    final: dict[str, Any] = events[-1]["response"]
    return final


def socket_error(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The single socket-level error these events are; validated against the spec."""
    [event] = events
    openresponses_types.WebSocketErrorEvent.model_validate(event)
    ResponseWsError.model_validate(event)  # the SDK's shape of a socket error
    assert set(event) == {"type", "status", "error"}, event
    assert set(event["error"]) == {"type", "code", "message", "param"}, event
    error: dict[str, Any] = event["error"]
    return {**error, "status": event["status"]}


def test_websocket_sequential_responses_match_their_sse_replay(
    fleet: Fleet, ws: ClientConnection
) -> None:
    first = check_response_events(events := create(ws, input="Say hello"))
    second_events = create(ws, input="And again", previous_response_id=first["id"])
    second = check_response_events(second_events)

    assert second["previous_response_id"] == first["id"]
    assert [e["type"] for e in events][-1] == "response.completed"
    assert "response.output_text.delta" in {e["type"] for e in events}
    for final, socket_events in ((first, events), (second, second_events)):
        replay = httpx.get(
            f"{fleet.base_url}/v1/responses/{final['id']}", params={"stream": "true"}, timeout=30
        )
        assert raw_events(replay) == socket_events


def test_websocket_processes_back_to_back_messages_one_after_another(
    ws: ClientConnection,
) -> None:
    ws.send(json.dumps({"type": "response.create", "input": "first [tokens=40]"}))
    ws.send(json.dumps({"type": "response.create", "input": "second"}))

    first = check_response_events(receive_response(ws))
    second = check_response_events(receive_response(ws))

    assert first["output"][0]["content"][0]["text"].startswith("Simulated answer to: first")
    assert second["output"][0]["content"][0]["text"].startswith("Simulated answer to: second")
    assert first["id"] != second["id"]


def test_websocket_store_false_continues_on_its_connection_only(
    fleet: Fleet, ws: ClientConnection, client: openai.OpenAI
) -> None:
    first = check_response_events(create(ws, input="Remember the word papaya", store=False))
    alone = check_response_events(create(ws, input="Which word?", store=False))
    chained = check_response_events(
        create(ws, input="Which word?", store=False, previous_response_id=alone["id"])
    )

    assert chained["previous_response_id"] == alone["id"]
    # The model saw the earlier turn: its input is longer by that turn's messages.
    assert chained["usage"]["input_tokens"] > 2 * alone["usage"]["input_tokens"]
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(input="again", previous_response_id=chained["id"])
    assert raised.value.code == "previous_response_not_found"
    # Only the most recent response is kept: the first one is gone.
    error = socket_error(create(ws, input="x", store=False, previous_response_id=first["id"]))
    assert (error["status"], error["code"]) == (400, "previous_response_not_found")


def test_websocket_chain_of_unstored_responses_keeps_the_whole_conversation(
    ws: ClientConnection,
) -> None:
    previous = None
    inputs = []
    for word in ("one", "two", "three"):
        final = check_response_events(
            create(ws, input=f"word {word}", store=False, previous_response_id=previous)
        )
        previous = final["id"]
        inputs.append(final["usage"]["input_tokens"])

    assert inputs[0] < inputs[1] < inputs[2]


def test_websocket_previous_response_not_found_for_unknown_id_and_after_reconnect(
    fleet: Fleet, ws: ClientConnection
) -> None:
    error = socket_error(create(ws, input="hi", previous_response_id="resp_missing"))
    assert error == {
        "type": "invalid_request_error",
        "code": "previous_response_not_found",
        "message": "Previous response with id 'resp_missing' not found.",
        "param": "previous_response_id",
        "status": 400,
    }
    final = check_response_events(create(ws, input="still here", store=False))

    with open_socket(fleet.base_url) as again:
        error = socket_error(create(again, input="go on", previous_response_id=final["id"]))
    assert error["code"] == "previous_response_not_found"
    # The first connection still holds it.
    check_response_events(create(ws, input="go on", previous_response_id=final["id"]))


def test_websocket_failed_continuation_evicts_the_cached_response(ws: ClientConnection) -> None:
    paused = check_response_events(
        create(ws, input="get_weather city=Paris", tools=[WEATHER_TOOL], store=False)
    )
    [call] = paused["output"]
    assert call["type"] == "function_call"

    wrong = {"type": "function_call_output", "call_id": "call_nothing", "output": "sunny"}
    error = socket_error(
        create(ws, input=[wrong], tools=[WEATHER_TOOL], previous_response_id=paused["id"])
    )
    assert (error["code"], error["param"]) == ("invalid_value", "input.0.call_id")

    right = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    error = socket_error(
        create(ws, input=[right], tools=[WEATHER_TOOL], previous_response_id=paused["id"])
    )
    assert error["code"] == "previous_response_not_found"


def test_websocket_function_call_round_trip_on_unstored_responses(ws: ClientConnection) -> None:
    paused = check_response_events(
        create(ws, input="get_weather city=Paris", tools=[WEATHER_TOOL], store=False)
    )
    [call] = paused["output"]
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}

    final = check_response_events(
        create(
            ws, input=[output], tools=[WEATHER_TOOL], store=False, previous_response_id=paused["id"]
        )
    )

    assert final["output"][-1]["content"][0]["text"] == "Tool results: sunny"


@pytest.mark.parametrize(
    ("message", "code", "param"),
    [
        ("not json", "invalid_json", None),
        ('["a list"]', "invalid_event", None),
        ('{"type": "response.cancel"}', "invalid_event_type", "type"),
        (
            '{"type": "response.create", "input": "x", "stream": false}',
            "invalid_value",
            "stream",
        ),
        ('{"type": "response.create", "generate": 0}', "invalid_value", "generate"),
        ('{"type": "response.create", "background": true}', "unsupported_parameter", "background"),
        (
            '{"type": "response.create", "input": "x", "temperature": 9}',
            "invalid_value",
            "temperature",
        ),
        ('{"type": "response.create", "bogus": 1}', "unknown_parameter", "bogus"),
    ],
)
def test_websocket_bad_messages_are_error_events_and_the_socket_stays_open(
    ws: ClientConnection, message: str, code: str, param: str | None
) -> None:
    ws.send(message)
    error = socket_error([receive(ws)])
    assert (error["status"], error["code"], error["param"]) == (400, code, param)

    check_response_events(create(ws, input="after the error"))


def test_websocket_failed_response_relays_error_and_response_failed(ws: ClientConnection) -> None:
    events = create(ws, input="boom [error=500]")

    final = check_response_events(events, status="failed")
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert final["error"]["code"] == "server_error"


def test_websocket_new_chain_from_compact_output(fleet: Fleet, ws: ClientConnection) -> None:
    compacted = httpx.post(
        f"{fleet.base_url}/v1/responses/compact",
        json={"model": "antwort-sim", "input": "We launch on Tuesday [tokens=30]"},
        timeout=60,
    )
    assert compacted.status_code == 200, compacted.text
    output = compacted.json()["output"]
    message = {"type": "message", "role": "user", "content": "When do we launch?"}

    final = check_response_events(create(ws, input=[*output, message], store=False))

    assert final["previous_response_id"] is None
    follow_up = check_response_events(
        create(ws, input="and who?", store=False, previous_response_id=final["id"])
    )
    assert follow_up["usage"]["input_tokens"] > final["usage"]["input_tokens"]


# openai 3.51 opens its socket with websockets' connect() outside a ``with``, which newer websockets
# (17.x) deprecate: not ours to fix.
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")
@pytest.mark.parametrize(
    "extra",
    [{}, {"stream": True, "stream_options": {"include_obfuscation": False}}],
    ids=["bare", "stream-options"],
)
def test_websocket_with_the_openai_sdk(
    fleet: Fleet, client: openai.OpenAI, extra: dict[str, Any]
) -> None:
    with client.responses.connect() as connection:
        connection.response.create(model="antwort-sim", input="Hello from the SDK", **extra)
        types = []
        for event in connection:
            types.append(event.type)
            if event.type == "response.completed":
                text = event.response.output_text
                break

    assert types[:2] == ["response.created", "response.in_progress"]
    assert text.startswith("Simulated answer to: Hello from the SDK")


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")
def test_websocket_generate_false_prepares_a_response_the_next_continues(
    fleet: Fleet, client: openai.OpenAI
) -> None:
    """The SDK's ``generate: false``: stored state, no output; its successor sees its input."""
    with client.responses.connect() as connection:
        connection.response.create(
            model="antwort-sim", input="The code word is papaya", generate=False, stream=True
        )
        warm = [event.to_dict() for event in until_terminal(connection)]
        connection.response.create(
            model="antwort-sim", input="Say it", previous_response_id=warm[-1]["response"]["id"]
        )
        final = check_response_events([event.to_dict() for event in until_terminal(connection)])
        connection.response.create(model="antwort-sim", input="Say it")
        alone = check_response_events([event.to_dict() for event in until_terminal(connection)])

    prepared = check_response_events(warm)
    assert [e["type"] for e in warm] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert prepared["output"] == []
    stored = client.responses.retrieve(prepared["id"])
    assert (stored.status, stored.output) == ("completed", [])
    assert final["previous_response_id"] == prepared["id"]
    # the model saw the prepared input before "Say it"
    assert final["usage"]["input_tokens"] > alone["usage"]["input_tokens"]


def test_websocket_lanes_with_the_openai_sdk(client: openai.OpenAI) -> None:
    """OpenAI's guide: ``stream_id`` lanes on one socket, side by side, a third forking one."""
    with client.responses.connect() as connection:
        connection.response.create(
            model="antwort-sim", input="slowly [tokens=40] [delay_ms=50]", stream_id="slow"
        )
        connection.response.create(model="antwort-sim", input="Hello", stream_id="main")
        lanes: dict[str, list[dict[str, Any]]] = {"slow": [], "main": []}
        finished: list[str] = []
        while len(finished) < 2:
            event = next(iter(connection)).to_dict()
            lane = event.pop("stream_id")
            lanes[lane].append(event)
            if event["type"] in TERMINAL:
                finished.append(lane)
        connection.response.create(
            model="antwort-sim",
            input="And then?",
            previous_response_id=lanes["main"][-1]["response"]["id"],
            stream_id="fork",
        )
        fork = [event.to_dict() for event in until_terminal(connection)]

    assert finished == ["main", "slow"]  # the short answer did not wait for the long one
    for events in lanes.values():
        check_response_events(events)
    assert {event.pop("stream_id") for event in fork} == {"fork"}
    forked = check_response_events(fork)
    assert forked["previous_response_id"] == lanes["main"][-1]["response"]["id"]


def test_steering_a_running_response_with_the_openai_sdk(client: openai.OpenAI) -> None:
    """``connection.response.steer`` while the response runs an MCP tool: it stops after the
    tool (``incomplete``, ``steered``) and a successor answers the steering input."""
    events: list[dict[str, Any]] = []
    with client.responses.connect() as connection:
        connection.response.create(
            model="antwort-sim",
            input="use slow seconds=1",
            tools=[LOCAL_MCP],
            stream_id="agent",
        )
        for event in connection:
            events.append(event.to_dict())
            if event.type == "response.created" and len(events) == 1:
                connection.response.steer(
                    previous_response_id=event.response.id, input="Answer in one word."
                )
            if event.type == "response.completed":
                break

    assert {event.pop("stream_id") for event in events} == {"agent"}
    steering = [e for e in events if e["type"].startswith("response.steer")]
    [accepted] = steering
    assert accepted["type"] == "response.steer.accepted"
    responses = [e for e in events if not e["type"].startswith("response.steer")]
    cut = next(i for i, e in enumerate(responses) if e["type"] == "response.incomplete") + 1
    for events_of_one in (responses[:cut], responses[cut:]):  # the SDK parsed each already
        check_sequence(events_of_one)
        assert events_of_one[0]["type"] == "response.created"
    first, second = responses[cut - 1]["response"], responses[-1]["response"]
    assert accepted["steer"]["previous_response_id"] == first["id"]
    assert first["incomplete_details"] == {"reason": "steered"}
    assert [item["type"] for item in first["output"]] == ["mcp_list_tools", "mcp_call"]
    assert second["previous_response_id"] == first["id"]
    assert second["output"][-1]["content"][0]["text"].startswith(
        "Simulated answer to: Answer in one word."
    )
    assert [i.role for i in client.responses.input_items.list(second["id"])] == ["user"]  # type: ignore[union-attr]


def until_terminal(connection: Any) -> Iterator[Any]:
    """The SDK connection's events until the response's terminal one."""
    for event in connection:
        yield event
        if event.type in TERMINAL or event.type == "error":
            return


@pytest.fixture(scope="module")
def guarded_gateway(fleet: Fleet) -> Iterator[str]:
    """A second gateway of the fleet with a bearer key and a 3-second connection limit."""
    limits = {"ANTWORT_API_KEYS": "sekrit", "ANTWORT_WEBSOCKET_MAX_SECONDS": "3"}
    with fleet.extra_gateway("gateway-guarded", **limits) as base_url:
        yield base_url


def test_websocket_handshake_needs_the_bearer_key(guarded_gateway: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(InvalidStatus) as refused:
            open_socket(guarded_gateway, **headers)
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body or b"")["error"]["code"] == (
            "invalid_api_key"
        )

    with open_socket(guarded_gateway, Authorization="Bearer sekrit") as ws:
        # A message answered at once (no fleet work that could outlast the short time limit).
        ws.send("not json")
        assert socket_error([receive(ws)])["code"] == "invalid_json"


def test_websocket_connection_limit_reached_ends_the_connection(guarded_gateway: str) -> None:
    with open_socket(guarded_gateway, Authorization="Bearer sekrit") as ws:
        error = socket_error([receive(ws)])
        assert (error["status"], error["code"]) == (400, "websocket_connection_limit_reached")
        with pytest.raises(ConnectionClosedOK) as closed:
            ws.recv(timeout=30)
    # A closing handshake the server saw to its end: its close frame, then no reset of the socket.
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (
        1000,
        "websocket_connection_limit_reached",
    )
    assert closed.value.__cause__ is None


@pytest.fixture(scope="module")
def idle_gateway(fleet: Fleet) -> Iterator[str]:
    """A second gateway of the fleet that closes a socket idle for 1 s."""
    with fleet.extra_gateway("gateway-idle", ANTWORT_WEBSOCKET_IDLE_SECONDS="1") as base_url:
        yield base_url


def test_websocket_idle_connection_is_closed(idle_gateway: str) -> None:
    with open_socket(idle_gateway) as ws:  # connected, and then nothing is said
        error = socket_error([receive(ws)])
        assert (error["status"], error["code"]) == (400, "websocket_idle_timeout")
        with pytest.raises(ConnectionClosedOK) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "websocket_idle_timeout")


class SilentClient:
    """A WebSocket client spoken with wsproto over a plain socket that never answers a ping.

    It reads only when told to: nothing of the socket is read meanwhile.
    """

    def __init__(self, base_url: str) -> None:
        split = urlsplit(base_url)
        host, port = split.hostname or "127.0.0.1", split.port or 80
        self.sock = socket.create_connection((host, port), timeout=30)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pings = 0
        self.close_code: int | None = None
        self.accepted = False
        self.messages: list[str] = []
        self._parts: list[str] = []
        self.sock.sendall(self.ws.send(Request(host=f"{host}:{port}", target="/v1/responses")))
        while not self.accepted:
            self.read()

    def read(self) -> None:
        """One read from the socket, every event in it noted."""
        data = self.sock.recv(65536)
        self.ws.receive_data(data or None)
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                self.accepted = True
            elif isinstance(event, Ping):
                self.pings += 1
            elif isinstance(event, CloseConnection):
                self.close_code = event.code
            elif isinstance(event, TextMessage):
                self._parts.append(event.data)
                if event.message_finished:
                    self.messages.append("".join(self._parts))
                    self._parts.clear()
        if not data and self.close_code is None:
            self.close_code = -1  # the server closed the socket without a close frame

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(self.ws.send(TextMessage(data=json.dumps(message))))


def test_websocket_client_that_stops_answering_pings_is_closed(fleet: Fleet) -> None:
    # The fleet's keepalive is 1 s: a ping, none answered, and at the next the server gives up.
    client = SilentClient(fleet.base_url)
    try:
        while client.close_code is None:
            client.read()
    finally:
        client.sock.close()

    assert client.close_code == 1008  # policy violation: the ping went unanswered
    assert client.pings == 1


@pytest.fixture(scope="module")
def patient_gateway(fleet: Fleet) -> Iterator[str]:
    """A second gateway of the fleet whose keepalive lets a client read nothing for 30 s."""
    with fleet.extra_gateway("gateway-patient", ANTWORT_KEEPALIVE_SECONDS="30") as base_url:
        yield base_url


def test_websocket_large_events_reach_a_client_that_reads_late_whole(patient_gateway: str) -> None:
    """Three long answers (the last events of each ~640 KB) while the client reads nothing.

    The socket's buffers fill up and a frame meets one with less room than it needs: it must go
    out whole all the same (one ``send`` under gevent took what fitted; the rest was lost and
    the stream garbage from there on).
    """
    client = SilentClient(patient_gateway)
    try:
        for _ in range(3):
            client.send(
                {"type": "response.create", "model": "antwort-sim", "input": "long [tokens=100000]"}
            )
        time.sleep(3)  # the fleet writes on; nothing is read
        events: list[dict[str, Any]] = []
        while sum(event["type"] in TERMINAL for event in events) < 3:
            assert client.close_code is None, client.close_code
            client.read()
            events += [json.loads(message) for message in client.messages[len(events) :]]
    finally:
        client.sock.close()

    finals = [event["response"] for event in events if event["type"] in TERMINAL]
    assert [final["status"] for final in finals] == ["completed"] * 3
    assert all(len(final["output"][0]["content"][0]["text"].split()) == 100_000 for final in finals)


def test_websocket_client_flooding_large_messages_waits_in_its_socket_and_loses_none(
    fleet: Fleet,
) -> None:
    """While its responses run, a socket's messages wait unread in the gateway up to
    ``max_body_bytes``; then the client's sends wait (TCP's back-pressure) until the session
    takes one. Before, the gateway's reader read and kept all of them: 40 messages of 2 MB,
    80 MB, while one response ran. Each is answered in order once its turn comes."""
    flood = 40
    large = json.dumps({"type": "response.create", "bogus": 1, "input": "y" * (2 << 20)})
    held = json.dumps(
        {"type": "response.create", "model": "antwort-sim", "input": "x [ttft_ms=4000]"}
    )

    async def client(url: str) -> tuple[int, list[str]]:
        async with websockets.asyncio.client.connect(url, max_size=None, proxy=None) as ws:
            await ws.send(held)
            sent = 0

            async def send_all() -> None:
                nonlocal sent
                for _ in range(flood):
                    await ws.send(large)
                    sent += 1

            sending = asyncio.create_task(send_all())
            await asyncio.sleep(2.5)  # the response still held
            sent_while_held = sent
            answers: list[str] = []
            while len(answers) < flood + 1:
                event = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
                if event["type"] in TERMINAL or is_socket_error(event):
                    answers.append(
                        event["type"] if event["type"] in TERMINAL else event["error"]["code"]
                    )
            await sending
            return sent_while_held, answers

    with fleet.extra_gateway("gateway-read-ahead", ANTWORT_WEBSOCKET_MAX_PENDING="1") as base:
        sent_while_held, answers = asyncio.run(client(socket_url(base)))

    # the gateway held at most max_body_bytes (16 MB) unread, and the sockets' own buffers some
    assert sent_while_held < 20, sent_while_held  # before: all 40
    assert answers == ["response.completed"] + ["unknown_parameter"] * flood
