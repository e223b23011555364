"""``ANTWORT_API_KEYS``: every ``/v1`` path wants a right bearer key; the probes stay open."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.gateway.conftest import error_of
from tests.support.dispatch import RecordingDispatcher

V1_REQUESTS = [
    ("POST", "/v1/responses"),
    ("GET", "/v1/responses/resp_x"),
    ("GET", "/v1/responses/resp_x?stream=true"),
    ("POST", "/v1/responses/resp_x/cancel"),
    ("DELETE", "/v1/responses/resp_x"),
    ("GET", "/v1/responses/resp_x/input_items"),
    ("POST", "/v1/responses/compact"),
    ("GET", "/v1/models"),
    ("GET", "/v1/nowhere"),
]
WRONG_AUTHORIZATIONS = [
    None,
    "",
    "Bearer",
    "Bearer wrong",
    "Basic sekrit",
    "sekrit",
    "Bearer sekri",
]


@pytest.fixture
def guarded(make_app: Callable[..., Flask]) -> FlaskClient:
    return make_app(api_keys="sekrit, other").test_client()


@pytest.mark.parametrize(("method", "path"), V1_REQUESTS)
@pytest.mark.parametrize("authorization", WRONG_AUTHORIZATIONS)
def test_auth_missing_or_wrong_key_is_401_on_every_v1_path(
    guarded: FlaskClient,
    dispatcher: RecordingDispatcher,
    method: str,
    path: str,
    authorization: str | None,
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    body = {"model": "m", "input": "hi", "background": True}

    error = error_of(guarded.open(path, method=method, headers=headers, json=body), 401)

    assert (error.type, error.code, error.param) == (
        "authentication_error",
        "invalid_api_key",
        None,
    )
    assert dispatcher.turns == []


@pytest.mark.parametrize(
    ("path", "status"),
    [("/healthz", 200), ("/readyz", 503), ("/metrics", 200)],  # /readyz: no worker here
)
def test_auth_probes_stay_open(guarded: FlaskClient, path: str, status: int) -> None:
    assert guarded.get(path).status_code == status


@pytest.mark.parametrize("key", ["sekrit", "other"])
def test_auth_right_key_passes(
    guarded: FlaskClient, dispatcher: RecordingDispatcher, key: str
) -> None:
    headers = {"Authorization": f"bearer  {key} "}  # scheme in any case, spaces around the key
    created = guarded.post(
        "/v1/responses", headers=headers, json={"model": "m", "input": "hi", "background": True}
    )

    assert created.status_code == 200, created.get_data(as_text=True)
    assert created.json is not None
    assert dispatcher.turns == [(created.json["id"], 0)]
    error = error_of(guarded.get("/v1/responses/resp_unknown", headers=headers), 404)
    assert error.type == "not_found"  # past auth, to the route


def test_auth_open_when_no_keys_are_set(web: FlaskClient) -> None:
    assert error_of(web.get("/v1/responses/resp_unknown"), 404).type == "not_found"
