"""The ``/v1/responses`` routes in-process: create in background, retrieve, cancel, delete."""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask, request
from flask.testing import FlaskClient
from openai.types.responses import (
    Response,
    ResponseInputMessageItem,
    ResponseInputText,
    ResponseItemList,
)
from werkzeug.test import TestResponse

from app import cooperation
from app.protocol.response import ResponseStatus
from app.store import ResponseStore
from app.store.status import FINISH
from gateway.responses import in_turn
from tests.app.test_cooperation import RecordingTurns, waiting
from tests.gateway.conftest import error_of
from tests.support.dispatch import RecordingDispatcher
from tests.support.responses import stored_response
from tests.support.sentinel import wait_for

UNKNOWN_ID_REQUESTS = [
    ("GET", "/v1/responses/resp_unknown"),
    ("GET", "/v1/responses/resp_unknown?stream=true"),
    ("GET", "/v1/responses/resp_unknown?stream=true&starting_after=3"),
    ("POST", "/v1/responses/resp_unknown/cancel"),
    ("DELETE", "/v1/responses/resp_unknown"),
    ("GET", "/v1/responses/resp_unknown/input_items"),
]


def create_in_background(web: FlaskClient, **body: Any) -> Response:
    answer = web.post(
        "/v1/responses", json={"model": "m", "input": "Hello there", "background": True, **body}
    )
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return Response.model_validate(answer.json)


def test_responses_create_in_background_queues_turn_zero(
    web: FlaskClient, dispatcher: RecordingDispatcher
) -> None:
    created = create_in_background(web, instructions="Be brief.", metadata={"k": "v"})

    assert (created.status, created.background, created.model) == ("queued", True, "m")
    assert (created.instructions, created.metadata) == ("Be brief.", {"k": "v"})
    assert created.output == []
    assert dispatcher.turns == [(created.id, 0)]
    retrieved = web.get(f"/v1/responses/{created.id}")
    assert retrieved.status_code == 200
    assert Response.model_validate(retrieved.json) == created


def test_responses_create_uses_the_default_model(
    web: FlaskClient, dispatcher: RecordingDispatcher
) -> None:
    answer = web.post("/v1/responses", json={"input": "hi", "background": True})

    assert Response.model_validate(answer.json).model == "antwort-sim"


def test_responses_input_items_lists_the_request_input(web: FlaskClient) -> None:
    created = create_in_background(
        web,
        input=[
            {"role": "user", "content": "first"},
            {"role": "user", "content": "second"},
        ],
    )

    newest_first = ResponseItemList.model_validate(
        web.get(f"/v1/responses/{created.id}/input_items").json
    )
    oldest_one = ResponseItemList.model_validate(
        web.get(f"/v1/responses/{created.id}/input_items?order=asc&limit=1").json
    )

    messages = [item for item in newest_first.data if isinstance(item, ResponseInputMessageItem)]
    assert [message.content for message in messages] == [
        [ResponseInputText(type="input_text", text="second")],
        [ResponseInputText(type="input_text", text="first")],
    ]
    assert newest_first.has_more is False
    assert [item.id for item in oldest_one.data] == [newest_first.last_id]
    assert oldest_one.has_more is True


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=101", "limit"), ("limit=ten", "limit"), ("order=up", "order")],
)
def test_responses_input_items_bad_query_is_400(web: FlaskClient, query: str, param: str) -> None:
    created = create_in_background(web)

    error = error_of(web.get(f"/v1/responses/{created.id}/input_items?{query}"), 400)

    assert (error.type, error.param, error.code) == (
        "invalid_request_error",
        param,
        "invalid_value",
    )


def test_responses_input_items_unknown_after_is_400(web: FlaskClient) -> None:
    created = create_in_background(web)

    error = error_of(web.get(f"/v1/responses/{created.id}/input_items?after=msg_nope"), 400)

    assert error.param == "after"


@pytest.mark.parametrize("starting_after", ["abc", "-2", "1.5"])
def test_responses_stream_bad_starting_after_is_400(web: FlaskClient, starting_after: str) -> None:
    created = create_in_background(web)

    answer = web.get(f"/v1/responses/{created.id}?stream=true&starting_after={starting_after}")

    assert error_of(answer, 400).param == "starting_after"


ECHOED_SCHEMA = {
    "type": "object",
    "description": 'Ünïcode é, a line\u2028separator, an emoji 🦜, a quote " and </script>',
    "properties": {
        "count": {"type": "integer", "maximum": 2**70, "minimum": -(2**63)},
        "ratio": {"type": "number", "multipleOf": 1e-07, "maximum": 1.5e300},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["count"],
    "additionalProperties": False,
}


def test_a_create_echoes_its_request_alike_in_its_answer_events_record_and_cancel(
    web: FlaskClient, store: ResponseStore
) -> None:
    text = {"format": {"type": "json_schema", "name": "r", "schema": ECHOED_SCHEMA}}
    body = {"model": "m", "input": "Hi", "instructions": "Be é.", "text": text}

    answer = web.post("/v1/responses", json={**body, "background": True})

    assert answer.status_code == 200 and answer.mimetype == "application/json"
    assert answer.get_data(as_text=True).endswith("}\n")  # as jsonify writes it
    created = answer.get_json()
    assert created["text"]["format"]["schema"] == ECHOED_SCHEMA
    Response.model_validate(created)
    events = [json.loads(e.data) for e in store.events_after(created["id"], -1)]
    assert [e["type"] for e in events] == ["response.created", "response.queued"]
    assert [e["sequence_number"] for e in events] == [0, 1]
    assert all(e["response"] == created for e in events)
    assert web.get(f"/v1/responses/{created['id']}").get_json() == created
    cancelled = web.post(f"/v1/responses/{created['id']}/cancel").get_json()
    assert cancelled == {**created, "status": "cancelled"}


def test_responses_cancel_of_a_queued_response(
    web: FlaskClient, dispatcher: RecordingDispatcher
) -> None:
    created = create_in_background(web)

    cancelled = web.post(f"/v1/responses/{created.id}/cancel")

    assert cancelled.status_code == 200
    assert Response.model_validate(cancelled.json).status == "cancelled"
    assert dispatcher.revoked == [(created.id, 0)]
    assert Response.model_validate(web.get(f"/v1/responses/{created.id}").json).status == (
        "cancelled"
    )
    again = web.post(f"/v1/responses/{created.id}/cancel")  # finished: unchanged, nothing revoked
    assert Response.model_validate(again.json).status == "cancelled"
    assert dispatcher.revoked == [(created.id, 0)]


def test_responses_cancel_of_a_foreground_response_is_400(
    web: FlaskClient, store: ResponseStore, dispatcher: RecordingDispatcher
) -> None:
    response = stored_response(store, background=False)

    error = error_of(web.post(f"/v1/responses/{response.id}/cancel"), 400)

    assert (error.type, error.param) == ("invalid_request_error", "response_id")
    assert dispatcher.revoked == []


def test_responses_cancel_while_an_mcp_call_runs(
    web: FlaskClient, store: ResponseStore, dispatcher: RecordingDispatcher
) -> None:
    call = {"id": "mcp_1", "type": "mcp_call", "status": "in_progress", "server_label": "local"}
    call.update(name="slow", arguments='{"seconds": 30}')
    response = stored_response(store, background=True, output=[call])

    cancelled = web.post(f"/v1/responses/{response.id}/cancel")  # was a 500: KeyError 'call_id'

    assert Response.model_validate(cancelled.json).status == "cancelled"
    assert dispatcher.revoked_calls == ["mcp_1"]


def test_responses_delete_removes_the_response_and_its_items(web: FlaskClient) -> None:
    created = create_in_background(web)

    deleted = web.delete(f"/v1/responses/{created.id}")

    assert deleted.status_code == 200
    assert deleted.json == {"id": created.id, "object": "response.deleted", "deleted": True}
    for path in (f"/v1/responses/{created.id}", f"/v1/responses/{created.id}/input_items"):
        assert error_of(web.get(path), 404).param == "response_id"
    assert error_of(web.delete(f"/v1/responses/{created.id}"), 404).type == "not_found"


@pytest.mark.parametrize(("method", "path"), UNKNOWN_ID_REQUESTS)
def test_responses_unknown_id_is_404(web: FlaskClient, method: str, path: str) -> None:
    error = error_of(web.open(path, method=method), 404)

    assert (error.type, error.code) == ("not_found", "not_found")
    assert "resp_unknown" in error.message


CODEX_REQUEST = Path(__file__).parents[1] / "support" / "codex_request.json"


def codex_body() -> dict[str, Any]:
    """Codex CLI's first request, in the background (Codex streams; nothing runs turns here)."""
    body: dict[str, Any] = json.loads(CODEX_REQUEST.read_text())
    return {**body, "stream": False, "store": True, "background": True}


def test_responses_create_accepts_codexs_first_request(web: FlaskClient) -> None:
    answer = web.post("/v1/responses", json=codex_body())

    assert answer.status_code == 200, answer.get_data(as_text=True)
    created = Response.model_validate(answer.json)
    assert "web_search" not in [tool.type for tool in created.tools]  # dropped by default


def test_responses_create_refuses_hosted_tools_when_the_policy_says_reject(
    make_app: Callable[..., Flask],
) -> None:
    web = make_app(unavailable_hosted_tools="reject").test_client()

    error = error_of(web.post("/v1/responses", json=codex_body()), 400)

    assert (error.type, error.code) == ("invalid_request_error", "unsupported_tool")
    assert error.param == f"tools.{len(codex_body()['tools']) - 1}"
    assert "web_search" in error.message


def _delta(n: int) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "item_id": "msg_1", "delta": str(n)}


def test_responses_stream_writes_the_events_found_waiting_in_one_chunk(
    web: FlaskClient, store: ResponseStore
) -> None:
    response = stored_response(store, background=True)
    store.emit(response.id, [_delta(i) for i in range(3)])
    answer = web.get(f"/v1/responses/{response.id}?stream=true", buffered=False)
    chunks = answer.iter_encoded()

    connected, replay = next(chunks), next(chunks)
    store.emit(response.id, [_delta(i) for i in range(3, 6)])  # one publish
    live = next(chunks)
    done = response.model_copy(update={"status": ResponseStatus.COMPLETED})
    store.write(done, transition=FINISH, events=[{"type": "response.completed"}])
    rest = list(chunks)
    answer.close()

    assert connected == b": connected\n\n"
    assert _sequence_numbers(replay) == [0, 1, 2]
    assert _sequence_numbers(live) == [3, 4, 5]
    assert [_sequence_numbers(chunk) for chunk in rest] == [[6], []]
    assert rest[-1] == b"data: [DONE]\n\n"


def _sequence_numbers(chunk: bytes) -> list[int]:
    """The sequence numbers of the events in one written chunk, in order."""
    return [
        json.loads(line.removeprefix("data: "))["sequence_number"]
        for line in chunk.decode().split("\n")
        if line.startswith("data: {")
    ]


class _Recording(redis.Connection):
    """Records the command names this gateway's client sends (pipelines: each command)."""

    sent: list[str] = []

    def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> None:
        packed = b"".join(command) if isinstance(command, list) else command
        _Recording.sent += [
            packed.split(b"\r\n")[index + 2].decode().upper()
            for index, line in enumerate(packed.split(b"\r\n"))
            if line.startswith(b"*") and index + 2 < len(packed.split(b"\r\n"))
        ]
        super().send_packed_command(command, *args, **kwargs)


def test_a_streamed_create_relays_its_first_events_without_reading_them_back(
    make_app: Callable[..., Flask], redis_url: str, store: ResponseStore
) -> None:
    """The create listens from before the first turn is queued: no read of the log or status.

    It used to read the events it had just written, and the status, back from Redis (a round
    trip per streamed or sync create).
    """
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=_Recording)
    client = redis.Redis.from_pool(pool)
    app = make_app(client=client)
    app.extensions["antwort"].hub.start()  # subscribed before the count starts
    web = app.test_client()
    warm = web.post("/v1/responses", json={"model": "m", "input": "hi", "background": True})
    assert warm.status_code == 200  # connections made, scripts loaded
    _Recording.sent = []

    answer = web.post(
        "/v1/responses", json={"model": "m", "input": "hi", "stream": True}, buffered=False
    )
    chunks = answer.iter_encoded()
    assert next(chunks) == b": connected\n\n"
    created = next(chunks)
    sent_by_create = list(_Recording.sent)
    rid = json.loads(created.decode().split("data: ", 1)[1])["response"]["id"]
    store.open_turn(rid, 0)  # what a run's start does: in_progress, and its event
    done = store.get(rid).response.model_copy(update={"status": ResponseStatus.COMPLETED})
    store.write(done, transition=FINISH, events=[{"type": "response.completed"}])
    rest = list(chunks)
    answer.close()

    assert _sequence_numbers(created) == [0]
    assert [_sequence_numbers(chunk) for chunk in rest if chunk] in ([[1], [2], []], [[1, 2], []])
    assert "XRANGE" not in sent_by_create and "HGET" not in sent_by_create, sent_by_create
    assert sent_by_create == ["EVALSHA"]  # the create's own write, nothing else


def test_a_create_followed_by_nobody_leaves_no_listener(
    make_app: Callable[..., Flask], dispatcher: RecordingDispatcher
) -> None:
    """A client gone before the first byte, a background create, a create that failed after
    storing: none leaves an inbox listening in the hub."""
    app = make_app()
    web, hub = app.test_client(), app.extensions["antwort"].hub

    answer = web.post(
        "/v1/responses", json={"model": "m", "input": "hi", "stream": True}, buffered=False
    )
    [(gone, _)] = dispatcher.turns
    assert hub.listening(gone) == 1
    answer.close()  # before reading a byte
    assert hub.listening(gone) == 0

    background = create_in_background(web)
    assert hub.listening(background.id) == 0

    def refuse(response_id: str, turn: int, *, retry: bool = False) -> None:
        dispatcher.turns.append((response_id, turn))
        raise RuntimeError("the broker is away")

    dispatcher.enqueue_turn = refuse  # type: ignore[method-assign]
    failed = web.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
    assert failed.status_code == 500
    assert hub.listening(dispatcher.turns[-1][0]) == 0


def test_a_large_body_waits_for_the_process_s_place_and_a_small_one_does_not(
    web: FlaskClient,
) -> None:
    """Large bodies are made responses one at a time in a process (their items take many times
    their size meanwhile); the others go on."""
    large = {"model": "m", "background": True, "input": "x" * cooperation.LARGE_BYTES}
    answers: dict[str, TestResponse] = {}

    def post_large() -> None:
        answers["large"] = web.post("/v1/responses", json=large)

    with cooperation.one_large_at_a_time(
        cooperation.LARGE_BYTES, tenant="other"
    ):  # another one's place
        thread = threading.Thread(target=post_large)
        thread.start()
        small = web.post("/v1/responses", json={"model": "m", "background": True, "input": "hi"})
        assert small.status_code == 200
        thread.join(0.5)  # time enough to be answered, were the place not taken
        assert "large" not in answers

    thread.join(30)
    assert answers["large"].status_code == 200


def test_tenants_large_bodies_take_the_process_s_place_in_turn(
    make_app: Callable[..., Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant with two large bodies waiting holds another tenant's back by one, not both."""
    app = make_app(api_keys="team-a:ka, team-b:kb")
    large = {"model": "m", "background": True, "input": "x" * cooperation.LARGE_BYTES}
    place = RecordingTurns()
    monkeypatch.setattr(cooperation, "_LARGE", place)

    def post(key: str) -> threading.Thread:
        headers = {"Authorization": f"Bearer {key}"}
        thread = threading.Thread(
            target=lambda: app.test_client().post("/v1/responses", json=large, headers=headers)
        )
        thread.start()
        return thread

    with cooperation.one_large_at_a_time(cooperation.LARGE_BYTES, tenant="team-a"):
        threads = [post("ka")]
        waiting(place, "team-a", 1)
        threads.append(post("ka"))
        waiting(place, "team-a", 2)
        threads.append(post("kb"))
        waiting(place, "team-b", 1)
    for thread in threads:
        thread.join(60)

    assert place.took == ["team-a", "team-b", "team-a", "team-a"]  # the test's place first


def test_a_sync_create_keeps_no_request_items_while_it_waits(
    make_app: Callable[..., Flask], dispatcher: RecordingDispatcher, store: ResponseStore
) -> None:
    """A sync create waits for its answer, minutes maybe, holding none of its request's items
    (15.75 MB of one-word messages are 110 MB decoded): they are in the store."""
    app = make_app()
    app.extensions["antwort"].hub.start()
    web = app.test_client()
    probe = {"probe": "sync-keeps-no-items"}
    body = json.dumps({"model": "m", "input": "hi", "metadata": probe})  # the test holds no dict
    answers: list[TestResponse] = []
    sync = threading.Thread(
        target=lambda: answers.append(
            web.post("/v1/responses", data=body, content_type="application/json")
        )
    )
    sync.start()
    wait_for(lambda: bool(dispatcher.turns), timeout=10, what="the create's first turn queued")
    held = sum(
        isinstance(o, dict) and "input" in o and o.get("metadata") == probe
        for o in gc.get_objects()
    )
    [(rid, _)] = dispatcher.turns
    store.open_turn(rid, 0)
    done = store.get(rid).response.model_copy(update={"status": ResponseStatus.COMPLETED})
    completed = {"type": "response.completed", "response": done.wire()}
    store.write(done, transition=FINISH, events=[completed])
    sync.join(timeout=10)

    assert [answer.status_code for answer in answers] == [200]
    assert held == 0
    # the answer is the object as the terminal event carries it
    assert answers[0].mimetype == "application/json"
    assert answers[0].get_data(as_text=True) == done.model_dump_json() + "\n"


def test_a_body_decoded_in_its_turn_is_not_kept_on_the_request(
    make_app: Callable[..., Flask],
) -> None:
    """A create's body bytes go once decoded (16 MB while a sync create waits for its answer);
    before, the request cached them until it ended."""
    sent = {"model": "m", "input": "hi"}
    with make_app().test_request_context(
        "/v1/responses", method="POST", data=json.dumps(sent), content_type="application/json"
    ):
        assert in_turn(lambda body: body) == sent
        assert request.get_data() == b""
