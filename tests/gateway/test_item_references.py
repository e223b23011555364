"""``item_reference`` input items at the gateway: the stored item takes the reference's place.

Two tenants by ``ANTWORT_API_KEYS``; team A's earlier response is a record written here, its
output made of items with the fleet's ids (the recording dispatcher runs no turn).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.protocol.items import function_call_item, item_id, message_item, reasoning_item
from app.protocol.response import ResponseObject, ResponseStatus
from app.responses import new_response_id
from app.store import ResponseStore
from gateway import jobs
from tests.gateway.conftest import error_of
from tests.support.dispatch import RecordingDispatcher

A = {"Authorization": "Bearer ka"}
B = {"Authorization": "Bearer kb"}
QUESTION = {"type": "message", "role": "user", "content": "What is the weather?"}


@pytest.fixture
def web(make_app: Callable[..., Flask]) -> FlaskClient:
    return make_app(api_keys="team-a:ka, team-b:kb").test_client()


@pytest.fixture
def store(web: FlaskClient) -> ResponseStore:
    return web.application.extensions["antwort"].store


def earlier_response(store: ResponseStore, /, *, owner: str = "team-a", **fields: Any) -> list[Any]:
    """A completed response of ``owner``'s whose output is reasoning, a message and a call."""
    rid = new_response_id()
    output = [
        reasoning_item(
            item_id("rs", rid, 0, 0), text="They ask about weather.", status="completed"
        ),
        message_item(item_id("msg", rid, 0, 1), text="Let me look.", status="completed"),
        function_call_item(
            item_id("fc", rid, 0, 2),
            call_id="call_1",
            name="weather",
            arguments='{"city": "Oslo"}',
            status="completed",
        ),
    ]
    response = ResponseObject(
        id=rid,
        created_at=int(time.time()),
        status=ResponseStatus.COMPLETED,
        model="m",
        output=output,
        **fields,
    )
    store.create(response, inputs=[], extra={}, events=[], owner=owner)
    return output


def create(web: FlaskClient, headers: dict[str, str], items: list[Any]) -> Any:
    return web.post(
        "/v1/responses",
        headers=headers,
        json={"model": "m", "input": items, "background": True},
    )


def input_items(web: FlaskClient, response_id: str) -> list[dict[str, Any]]:
    listed = web.get(f"/v1/responses/{response_id}/input_items?order=asc", headers=A)
    assert listed.status_code == 200 and listed.json is not None
    return listed.json["data"]


def test_a_reference_is_the_item_it_names_as_if_the_client_had_sent_it(
    web: FlaskClient, store: ResponseStore, dispatcher: RecordingDispatcher
) -> None:
    reasoning, message, call = earlier_response(store)
    references = [{"type": "item_reference", "id": item["id"]} for item in (reasoning, message)]
    answer = {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}
    # the SDK's type is optional: an item of an id alone is a reference
    items = [QUESTION, *references, {"id": call["id"]}, answer]

    created = create(web, A, items)

    assert created.status_code == 200, created.get_data(as_text=True)
    assert dispatcher.turns  # queued to run
    listed = input_items(web, created.json["id"])
    assert [item["id"] for item in listed[1:4]] == [reasoning["id"], message["id"], call["id"]]
    assert listed[1]["content"] == reasoning["content"]
    assert listed[2]["content"][0]["text"] == "Let me look."
    assert (listed[3]["name"], listed[3]["arguments"]) == ("weather", '{"city": "Oslo"}')
    assert [item["type"] for item in listed] == [
        "message", "reasoning", "message", "function_call", "function_call_output"
    ]  # fmt: skip


def test_a_conversation_takes_a_referenced_item_as_the_item(
    web: FlaskClient, store: ResponseStore
) -> None:
    _, message, _ = earlier_response(store)
    made = web.post("/v1/conversations", headers=A, json={"items": [QUESTION]})
    assert made.status_code == 200, made.get_data(as_text=True)
    conversation = made.json["id"]

    added = web.post(
        f"/v1/conversations/{conversation}/items",
        headers=A,
        json={"items": [{"type": "item_reference", "id": message["id"]}]},
    )

    assert added.status_code == 200, added.get_data(as_text=True)
    [item] = added.json["data"]
    assert (item["id"], item["role"]) == (message["id"], "assistant")
    assert item["content"][0]["text"] == "Let me look."


def test_a_compaction_takes_a_referenced_item(
    web: FlaskClient, store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, message, _ = earlier_response(store)
    jobs_items: list[Any] = []

    def answered(_store: Any, _queue: Any, _settings: Any, kind: str, job_id: str, **_: Any) -> Any:
        job = json.loads(store.redis.get(store.keys.job(kind, job_id)))
        jobs_items.append(job["items"])
        return {"id": job_id, "object": "response.compaction", "output": []}

    monkeypatch.setattr(jobs, "wait_for_answer", answered)
    items = [QUESTION, {"type": "item_reference", "id": message["id"]}]

    started = web.post("/v1/responses/compact", headers=A, json={"model": "m", "input": items})

    assert started.status_code == 200, started.get_data(as_text=True)
    [[question, referenced]] = jobs_items
    assert referenced == {**message, "content": [{**message["content"][0]}]}


def unknown(earlier: list[Any]) -> str:
    return earlier[1]["id"].replace("msg_", "msg_0", 1)[:-1]


@pytest.mark.parametrize(
    ("case", "hint"),
    [
        ("another tenant's", False),
        ("not stored", True),
        ("not in the output", False),
        ("names no response", False),
        ("response deleted", False),
    ],
)
def test_a_reference_to_no_item_the_caller_can_read_is_openai_s_404(
    web: FlaskClient, store: ResponseStore, dispatcher: RecordingDispatcher, case: str, hint: bool
) -> None:
    earlier = earlier_response(
        store,
        owner="team-b" if case == "another tenant's" else "team-a",
        store=case != "not stored",
    )
    item = earlier[1]["id"]
    rid = "resp_" + item[-48:]
    if case == "not in the output":
        item = item_id("msg", rid, 0, 7)
    elif case == "names no response":
        item = "msg_" + "ab" * 16
    elif case == "response deleted":
        store.delete(rid)

    refused = create(web, A, [QUESTION, {"type": "item_reference", "id": item}])

    error = error_of(refused, 404)
    hinted = " Items are not persisted when `store` is set to false." if hint else ""
    assert error.message.startswith(f"Item with id '{item}' not found.{hinted}")
    assert error.param == "input"
    assert not dispatcher.turns


def test_a_bad_reference_is_a_400_naming_it(web: FlaskClient) -> None:
    refused = create(web, A, [QUESTION, {"type": "item_reference", "id": ""}])

    assert error_of(refused, 400).param == "input.1.id"


def an_earlier_input(web: FlaskClient, headers: dict[str, str], **fields: Any) -> dict[str, Any]:
    """The user message of a response made here from a question sent without an id."""
    made = web.post(
        "/v1/responses",
        headers=headers,
        json={"model": "m", "input": [QUESTION], "background": True, **fields},
    )
    assert made.status_code == 200, made.get_data(as_text=True)
    listed = web.get(f"/v1/responses/{made.json['id']}/input_items", headers=headers)
    assert listed.status_code == 200 and listed.json is not None
    [question] = listed.json["data"]
    return question


def test_an_input_item_sent_without_an_id_can_be_referenced(web: FlaskClient) -> None:
    question = an_earlier_input(web, A)
    answer = {"type": "message", "role": "assistant", "content": "Sunny."}
    reference = {"type": "item_reference", "id": question["id"]}

    created = create(web, A, [reference, answer, {"role": "user", "content": "And tomorrow?"}])

    assert created.status_code == 200, created.get_data(as_text=True)
    first, _, last = input_items(web, created.json["id"])
    assert first == question
    assert first["content"] == [{"type": "input_text", "text": "What is the weather?"}]
    # the new input's own id-less items name their new place
    assert last["id"] != question["id"] and last["id"][-48:] == created.json["id"][-48:]


@pytest.mark.parametrize("case", ["another tenant's", "not stored", "no such place", "deleted"])
def test_a_reference_to_an_input_item_no_one_can_read_is_openai_s_404(
    web: FlaskClient, store: ResponseStore, case: str
) -> None:
    question = an_earlier_input(
        web, B if case == "another tenant's" else A, store=case != "not stored"
    )
    item = question["id"]
    if case == "no such place":  # the place after the question's: the list ends before it
        item = item[: item.index("_") + 1] + "00000001" + item[-48:]
    elif case == "deleted":
        assert web.delete(f"/v1/responses/resp_{item[-48:]}", headers=A).status_code == 200

    refused = create(web, A, [{"type": "item_reference", "id": item}])

    error = error_of(refused, 404)
    assert error.message.startswith(f"Item with id '{item}' not found.")
    assert ("`store` is set to false" in error.message) == (case == "not stored")
    assert error.param == "input"


def test_a_reference_names_an_input_item_by_its_id_not_by_its_place_alone(
    web: FlaskClient,
) -> None:
    own = {**QUESTION, "id": "msg_own"}  # its own id: the place is named by no id of the fleet's
    made = create(web, A, [own])
    assert made.status_code == 200, made.get_data(as_text=True)
    placed = "msg_00000000" + made.json["id"][-48:]

    refused = create(web, A, [{"type": "item_reference", "id": placed}])

    assert error_of(refused, 404).message.startswith(f"Item with id '{placed}' not found.")


def conversation_items(web: FlaskClient, headers: dict[str, str]) -> tuple[str, list[Any]]:
    """A conversation made with the question, then an answer added: its id and its two items."""
    made = web.post("/v1/conversations", headers=headers, json={"items": [QUESTION]})
    assert made.status_code == 200, made.get_data(as_text=True)
    conversation = made.json["id"]
    answer = {"type": "message", "role": "assistant", "content": "Sunny."}
    added = web.post(
        f"/v1/conversations/{conversation}/items", headers=headers, json={"items": [answer]}
    )
    assert added.status_code == 200, added.get_data(as_text=True)
    listed = web.get(f"/v1/conversations/{conversation}/items?order=asc", headers=headers)
    assert listed.status_code == 200 and listed.json is not None
    return conversation, listed.json["data"]


def test_an_item_added_to_a_conversation_can_be_referenced(web: FlaskClient) -> None:
    """Its id names the conversation. Before, it was random: a reference to it was a 404."""
    conversation, (question, answer) = conversation_items(web, A)
    assert question["id"][-48:] == answer["id"][-48:] == conversation[-48:]
    references = [{"type": "item_reference", "id": item["id"]} for item in (question, answer)]

    created = create(web, A, [*references, {"role": "user", "content": "And tomorrow?"}])

    assert created.status_code == 200, created.get_data(as_text=True)
    first, second, _ = input_items(web, created.json["id"])
    assert (first, second) == (question, answer)
    assert second["content"] == [
        {"type": "output_text", "text": "Sunny.", "annotations": [], "logprobs": []}
    ]


@pytest.mark.parametrize("case", ["another tenant's", "deleted item", "deleted conversation"])
def test_a_reference_to_a_conversation_item_no_one_can_read_is_openai_s_404(
    web: FlaskClient, case: str
) -> None:
    conversation, (question, _) = conversation_items(web, B if case == "another tenant's" else A)
    if case == "deleted item":
        path = f"/v1/conversations/{conversation}/items/{question['id']}"
        assert web.delete(path, headers=A).status_code == 200
    elif case == "deleted conversation":
        assert web.delete(f"/v1/conversations/{conversation}", headers=A).status_code == 200

    refused = create(web, A, [{"type": "item_reference", "id": question["id"]}])

    error = error_of(refused, 404)
    assert error.message == f"Item with id '{question['id']}' not found."
    assert error.param == "input"
