"""Tenancy at the gateway: every path gives another tenant's object the answer of an unknown id.

Two tenants by ``ANTWORT_API_KEYS`` (``team-a:ka``, ``team-b:kb``); A's response is created in
the background (the recording dispatcher runs nothing, so it stays ``queued``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from app.protocol import events as ev
from app.protocol.response import ResponseStatus
from app.sealing import CompactedState, fleet_sealer
from app.store.status import FAIL
from programs.cli import main as antwort
from tests.gateway.conftest import error_of
from tests.support.dispatch import RecordingDispatcher

A = {"Authorization": "Bearer ka"}
B = {"Authorization": "Bearer kb"}
UNKNOWN = "resp_" + "0" * 48


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app(api_keys="team-a:ka, team-b:kb")


@pytest.fixture
def web(app: Flask) -> FlaskClient:
    return app.test_client()


def create(web: FlaskClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    created = web.post(
        "/v1/responses",
        headers=headers,
        json={"model": "m", "input": "hi", "background": True, **body},
    )
    assert created.status_code == 200, created.get_data(as_text=True)
    assert created.json is not None
    return created.json


def request_on(web: FlaskClient, path: str, headers: dict[str, str], rid: str) -> TestResponse:
    """One of the paths that name a response, for ``rid``."""
    method, _, template = path.partition(" ")
    body: dict[str, Any] = {"model": "m", "input": "more", "previous_response_id": rid}
    if template == "/v1/responses":
        body["background"] = True  # answered at once: nothing runs the turn here
    return web.open(template.format(rid=rid), method=method, headers=headers, json=body)


PATHS = [
    "GET /v1/responses/{rid}",
    "GET /v1/responses/{rid}?stream=true",
    "GET /v1/responses/{rid}?stream=true&starting_after=0",
    "POST /v1/responses/{rid}/cancel",
    "DELETE /v1/responses/{rid}",
    "GET /v1/responses/{rid}/input_items",
    "POST /v1/responses",  # previous_response_id
    "POST /v1/responses/compact",  # previous_response_id
]


@pytest.mark.parametrize("path", PATHS)
def test_tenancy_another_tenants_response_is_unknown_on_every_path(
    web: FlaskClient, dispatcher: RecordingDispatcher, path: str
) -> None:
    rid = create(web, A)["id"]
    turns = list(dispatcher.turns)

    theirs = request_on(web, path, B, rid)
    unknown = request_on(web, path, B, UNKNOWN)

    error = error_of(theirs, unknown.status_code)
    assert theirs.status_code in (400, 404)
    assert error.model_dump() == {
        **error_of(unknown, unknown.status_code).model_dump(),
        "message": error.message,
    }
    assert error.message == error_of(unknown, unknown.status_code).message.replace(UNKNOWN, rid)
    assert dispatcher.turns == turns  # nothing was queued for B
    mine = web.get(f"/v1/responses/{rid}", headers=A)
    assert mine.status_code == 200 and mine.json is not None
    assert mine.json["status"] == "queued"  # B's cancel or delete did nothing


@pytest.mark.parametrize("path", PATHS[:-1])  # compact waits for a worker: not here
def test_tenancy_the_owner_passes_every_path(web: FlaskClient, app: Flask, path: str) -> None:
    rid = create(web, A)["id"]
    if "stream=true" in path or path.startswith("POST /v1/responses"):
        store = app.extensions["antwort"].store
        update = {"status": ResponseStatus.FAILED}
        finished = store.get(rid).response.model_copy(update=update)
        done = [ev.response_event("response.failed", finished)]
        # a stream that ends, a chain to go on
        assert store.write(finished, transition=FAIL, events=done).ok
    answered = request_on(web, path, A, rid)
    assert answered.status_code == 200, answered.get_data(as_text=True)


def test_tenancy_keys_of_one_tenant_share_its_objects(make_app: Callable[..., Flask]) -> None:
    web = make_app(api_keys="team-a:ka,team-a:ka2").test_client()
    rid = create(web, A)["id"]

    other_key = {"Authorization": "Bearer ka2"}
    assert web.get(f"/v1/responses/{rid}", headers=other_key).status_code == 200


def test_tenancy_a_container_of_another_tenant_is_unknown(web: FlaskClient) -> None:
    tool = {"type": "code_interpreter", "container": "cntr_team_a"}
    create(web, A, tools=[tool])

    error = error_of(
        web.post("/v1/responses", headers=B, json={"model": "m", "input": "hi", "tools": [tool]}),
        404,
    )

    assert (error.type, error.param) == ("not_found", "tools.0.container")
    assert "cntr_team_a" in error.message
    create(web, A, tools=[tool])  # still A's


def test_tenancy_a_container_named_by_a_forged_item_is_unknown(web: FlaskClient) -> None:
    create(web, A, tools=[{"type": "code_interpreter", "container": "cntr_team_a2"}])
    forged = {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "status": "completed",
        "code": "print(1)",
        "container_id": "cntr_team_a2",
        "outputs": [],
    }
    body = {
        "model": "m",
        "input": [forged, {"role": "user", "content": "go on"}],
        "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}],
    }

    error = error_of(web.post("/v1/responses", headers=B, json=body), 404)

    assert error.param == "tools.0.container"


def test_tenancy_a_compaction_item_of_another_tenant_is_refused(
    web: FlaskClient, app: Flask
) -> None:
    gw = app.extensions["antwort"]
    sealer = fleet_sealer(gw.store, gw.settings)
    state = CompactedState(summary="A's secrets", model="m", created_at=1, owner="team-a")
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": sealer.seal(state)}
    body = {"model": "m", "input": [item, {"role": "user", "content": "go on"}]}

    error = error_of(web.post("/v1/responses", headers=B, json=body), 400)

    assert (error.code, error.param) == ("invalid_encrypted_content", "input.0.encrypted_content")
    mine = web.post("/v1/responses", headers=A, json={**body, "background": True})
    assert mine.status_code == 200


@pytest.mark.parametrize(
    "token",
    ["clé", "ÿþ\x80", "\x00", "k a"],
)
def test_tenancy_a_non_ascii_bearer_token_is_a_401(web: FlaskClient, token: str) -> None:
    error = error_of(web.get("/v1/models", headers={"Authorization": f"Bearer {token}"}), 401)

    assert (error.type, error.code) == ("authentication_error", "invalid_api_key")


def test_tenancy_metrics_can_want_their_own_key(make_app: Callable[..., Flask]) -> None:
    web = make_app(api_keys="team-a:ka", metrics_key="scrape-key").test_client()

    assert error_of(web.get("/metrics"), 401).type == "authentication_error"
    assert error_of(web.get("/metrics", headers=A), 401).type == "authentication_error"
    assert web.get("/metrics", headers={"Authorization": "Bearer scrape-key"}).status_code == 200
    assert web.get("/healthz").status_code == 200
    assert web.get("/readyz").status_code == 503  # open (no worker here)
    assert error_of(web.get("/v1/models", headers={"Authorization": "Bearer scrape-key"}), 401)


def test_tenancy_keys_made_by_the_cli_work_without_a_restart(
    make_app: Callable[..., Flask],
    redis_url: str,
    key_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    web = make_app(key_cache_seconds=0.2).test_client()
    assert web.get("/v1/models").status_code == 200  # nothing configured: open
    monkeypatch.setenv("ANTWORT_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTWORT_KEY_PREFIX", key_prefix)

    assert antwort(["keys", "create", "--tenant", "team-c", "--max-in-flight", "5"]) == 0
    printed = capsys.readouterr().out
    key_id = printed.split()[0]
    token = printed.rsplit(" ", 1)[1].strip()
    wait_for(lambda: web.get("/v1/models").status_code == 401)  # auth on within the cache time
    bearer = {"Authorization": f"Bearer {token}"}
    assert web.get("/v1/models", headers=bearer).status_code == 200
    assert antwort(["keys", "list"]) == 0
    listed = capsys.readouterr().out
    assert key_id in listed and "team-c" in listed and token not in listed

    assert antwort(["keys", "revoke", key_id]) == 0
    wait_for(lambda: web.get("/v1/models", headers=bearer).status_code == 401)
    assert antwort(["keys", "revoke", key_id]) == 1
    assert web.get("/v1/models").status_code == 401  # revoking the last key opens nothing


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


CONVERSATION_PATHS = [
    ("GET", "/v1/conversations/{cid}", None),
    ("POST", "/v1/conversations/{cid}", {"metadata": {"k": "v"}}),
    ("DELETE", "/v1/conversations/{cid}", None),
    ("GET", "/v1/conversations/{cid}/items", None),
    ("POST", "/v1/conversations/{cid}/items", {"items": [{"role": "user", "content": "x"}]}),
    ("GET", "/v1/conversations/{cid}/items/{iid}", None),
    ("DELETE", "/v1/conversations/{cid}/items/{iid}", None),
    ("POST", "/v1/responses", {"model": "m", "input": "hi", "conversation": "{cid}"}),
]


@pytest.mark.parametrize(("method", "template", "body"), CONVERSATION_PATHS)
def test_tenancy_another_tenants_conversation_is_unknown_on_every_path(
    web: FlaskClient, method: str, template: str, body: dict[str, Any] | None
) -> None:
    created = web.post(
        "/v1/conversations", headers=A, json={"items": [{"role": "user", "content": "mine"}]}
    )
    assert created.status_code == 200, created.get_data(as_text=True)
    cid = created.json["id"]  # type: ignore[index]
    items = web.get(f"/v1/conversations/{cid}/items", headers=A).json
    iid = items["data"][0]["id"]  # type: ignore[index]
    path = template.format(cid=cid, iid=iid)
    if body is not None and body.get("conversation"):
        body = {**body, "conversation": cid}

    other = "conv_" + "0" * 48
    theirs = web.open(path, method=method, headers=B, json=body)
    unknown_body = body and {k: other if v == cid else v for k, v in body.items()}
    unknown = web.open(path.replace(cid, other), method=method, headers=B, json=unknown_body)

    mine_error, unknown_error = error_of(theirs, 404), error_of(unknown, 404)
    assert mine_error.model_dump() == {
        **unknown_error.model_dump(),
        "message": unknown_error.message.replace(other, cid),
    }
    mine = web.get(f"/v1/conversations/{cid}/items", headers=A).json
    assert [item["content"] for item in mine["data"]] == [  # type: ignore[index]
        [{"type": "input_text", "text": "mine"}]
    ]
    assert "owner" not in web.get(f"/v1/conversations/{cid}", headers=A).json  # type: ignore[operator]


@pytest.mark.parametrize("suffix", [":order", ":items", ":x"])
@pytest.mark.parametrize(("method", "template", "body"), CONVERSATION_PATHS)
def test_tenancy_a_malformed_conversation_id_is_unknown_on_every_path(
    web: FlaskClient, method: str, template: str, body: dict[str, Any] | None, suffix: str
) -> None:
    """An id not of the fleet's format names no key: its owner and another tenant both get the
    answer of an unknown id (a key of the conversation's, ``conv:<id>:order``, is never read)."""
    created = web.post(
        "/v1/conversations", headers=A, json={"items": [{"role": "user", "content": "mine"}]}
    )
    assert created.status_code == 200, created.get_data(as_text=True)
    cid = created.json["id"]  # type: ignore[index]
    iid = web.get(f"/v1/conversations/{cid}/items", headers=A).json["data"][0]["id"]  # type: ignore[index]
    malformed, other = cid + suffix, "conv_" + "0" * 48

    def ask(conversation_id: str, headers: dict[str, str]) -> TestResponse:
        path = template.format(cid=conversation_id, iid=iid)
        sent = body and {k: conversation_id if v == "{cid}" else v for k, v in body.items()}
        return web.open(path, method=method, headers=headers, json=sent)

    unknown_error = error_of(ask(other, B), 404)
    for headers in (A, B):
        error = error_of(ask(malformed, headers), 404)
        assert error.model_dump() == {
            **unknown_error.model_dump(),
            "message": unknown_error.message.replace(other, malformed),
        }
    mine = web.get(f"/v1/conversations/{cid}/items", headers=A).json
    assert [item["id"] for item in mine["data"]] == [iid]  # type: ignore[index]


def test_tenancy_by_default_a_flood_is_parked_and_another_tenant_goes_first(
    app: Flask, dispatcher: RecordingDispatcher
) -> None:
    store = app.extensions["antwort"].store
    store.heartbeat_worker("inference", "inference@host", threads=2)  # half of it: 1 a tenant
    web = app.test_client()
    flood = [create(web, A)["id"] for _ in range(3)]

    theirs = create(web, B)["id"]

    assert [rid for rid, _ in dispatcher.turns] == [flood[0], theirs]
    parked = store.redis.zrange(store.keys.tenant_parked("team-a"), 0, -1)
    assert [raw.decode() for raw in parked] == flood[1:]
    assert {web.get(f"/v1/responses/{rid}", headers=A).json["status"] for rid in flood} == {
        "queued"
    }
