"""The console at the gateway: its open page, and its JSON behind the keys, tenant by tenant.

Two tenants by ``ANTWORT_API_KEYS``; A's response is created in the background (nothing runs
it here), then its turn and a tool call are opened and finished through the store as workers
do, each under a task stamp (:mod:`app.telemetry.stamps`), so the timeline has what a fleet
records.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.fleet import QUEUES
from app.store import ResponseStore
from tests.gateway.conftest import error_of
from tests.support.stamps import as_task

A = {"Authorization": "Bearer ka"}
B = {"Authorization": "Bearer kb"}


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app(api_keys="team-a:ka, team-b:kb")


@pytest.fixture
def web(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def store(app: Flask) -> ResponseStore:
    store: ResponseStore = app.extensions["antwort"].store
    return store


def _run_one_turn_and_call(store: ResponseStore, rid: str) -> None:
    """What a turn task and a tool task record on their first and last writes."""
    sent = time.time()
    with as_task("infer@host", "inference", sent_at=sent):
        store.open_turn(rid, 0)
    with as_task("tools@host", "tools.internal", sent_at=time.time()):
        opened = store.open_tool_call(rid, "call_1", token="tok", claim_seconds=5)
        assert opened.claim == "claimed"
        assert store.finish_tool_call(rid, "call_1", '{"output": "ok"}', token="tok")


def _create(web: FlaskClient) -> str:
    created = web.post(
        "/v1/responses", headers=A, json={"model": "m", "input": "hi", "background": True}
    )
    assert created.status_code == 200, created.get_data(as_text=True)
    assert created.json is not None
    rid: str = created.json["id"]
    return rid


def test_console_page_and_files_are_served_without_a_key(web: FlaskClient) -> None:
    page = web.get("/console")
    assert page.status_code == 200
    assert page.mimetype == "text/html"
    assert b"/console/static/console.js" in page.data
    for name, mimetype in (("console.js", "text/javascript"), ("console.css", "text/css")):
        served = web.get(f"/console/static/{name}")
        assert served.status_code == 200
        assert served.mimetype == mimetype
        served.close()
    page.close()


def test_console_json_wants_a_key(web: FlaskClient) -> None:
    assert error_of(web.get("/v1/console/fleet"), 401).type == "authentication_error"
    error_of(web.get("/v1/console/responses/resp_x/timeline"), 401)


def test_console_fleet_lists_every_queue_without_tenant_or_operator_data(
    web: FlaskClient, store: ResponseStore
) -> None:
    store.heartbeat_worker("inference", "infer@host")
    store.register_metrics_url("infer@host", "http://infer:9000/metrics")
    _create(web)  # waits in no Redis queue here (the recording dispatcher), but is in flight
    fleet = web.get("/v1/console/fleet", headers=B).json
    assert fleet is not None
    assert fleet["object"] == "console.fleet"
    assert [q["name"] for q in fleet["queues"]] == list(QUEUES)
    inference = fleet["queues"][0]
    assert [w["name"] for w in inference["workers"]] == ["infer@host"]
    assert set(inference["workers"][0]) == {"name", "last_heartbeat_seconds_ago"}
    assert fleet["responses_in_flight"] >= 1
    assert isinstance(fleet["recent_failures"], list)


def test_console_timeline_shows_turns_model_calls_and_tool_calls_with_waits(
    web: FlaskClient, store: ResponseStore
) -> None:
    rid = _create(web)
    _run_one_turn_and_call(store, rid)
    timeline = web.get(f"/v1/console/responses/{rid}/timeline", headers=A).json
    assert timeline is not None
    assert timeline["object"] == "console.timeline"
    assert timeline["status"] == "in_progress"  # the turn's first read started it
    assert timeline["events"] >= 2  # created, in_progress
    bars = timeline["bars"]
    assert [(b["type"], b["turn"]) for b in bars] == [("turn", 0), ("model", 0), ("tool", 0)]
    turn, _model, tool = bars
    assert turn["worker"] == "infer@host" and turn["queue"] == "inference"
    assert turn["queued_at"] <= turn["started_at"] <= tool["queued_at"]
    assert turn["ended_at"] == tool["queued_at"]  # a turn ends sending its tool calls
    assert tool["label"] == "internal · call_1"
    assert tool["worker"] == "tools@host"
    assert tool["started_at"] <= tool["ended_at"] <= timeline["now"]
    assert timeline["started_at"] <= turn["started_at"]


def test_console_timeline_of_another_tenants_response_is_not_found(web: FlaskClient) -> None:
    rid = _create(web)
    error = error_of(web.get(f"/v1/console/responses/{rid}/timeline", headers=B), 404)
    assert error.param == "response_id"
    error_of(web.get("/v1/console/responses/resp_unknown/timeline", headers=A), 404)
    assert web.get(f"/v1/console/responses/{rid}/timeline", headers=A).status_code == 200
