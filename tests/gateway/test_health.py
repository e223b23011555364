"""``/healthz``, ``/readyz`` and ``/v1/models``."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from openai.pagination import SyncPage
from openai.types import Model

from app.store import ResponseStore
from programs.supervisor import free_port
from tests.gateway.conftest import error_of


def test_health_healthz_answers_ok(web: FlaskClient) -> None:
    answer = web.get("/healthz")

    assert (answer.status_code, answer.json) == (200, {"status": "ok"})


def test_health_readyz_not_ready_without_an_inference_worker(
    web: FlaskClient, store: ResponseStore
) -> None:
    store.heartbeat_worker("tools", "tools@host")  # a worker, but not on ``inference``

    answer = web.get("/readyz")

    assert answer.status_code == 503
    assert answer.json == {
        "status": "not_ready",
        "checks": {"redis": "ok", "inference_workers": "0"},
    }


def test_health_readyz_ready_with_a_live_inference_worker(
    web: FlaskClient, store: ResponseStore
) -> None:
    store.heartbeat_worker("inference", "inference@host")

    answer = web.get("/readyz")

    assert answer.status_code == 200
    assert answer.json == {"status": "ready", "checks": {"redis": "ok", "inference_workers": "1"}}


def test_health_readyz_not_ready_when_the_heartbeat_is_stale(
    web: FlaskClient, store: ResponseStore, redis_client: redis.Redis
) -> None:
    stale = time.time() - 120
    redis_client.zadd(store.keys.workers("inference"), {"inference@gone": stale})

    assert web.get("/readyz").status_code == 503


def test_health_readyz_not_ready_when_redis_is_unreachable(
    make_app: Callable[..., Flask],
) -> None:
    unreachable = redis.Redis(port=free_port(), socket_connect_timeout=1)
    web = make_app(client=unreachable).test_client()

    answer = web.get("/readyz")

    assert answer.status_code == 503
    assert answer.json is not None
    assert answer.json["status"] == "not_ready"
    assert answer.json["checks"]["redis"].startswith("unreachable")
    unreachable.close()


def test_health_models_lists_the_model_servers_models(web: FlaskClient) -> None:
    answer = web.get("/v1/models")

    assert answer.status_code == 200
    page = SyncPage[Model].model_validate(answer.json)
    assert answer.json is not None and answer.json["object"] == "list"
    assert "antwort-sim" in [model.id for model in page.data]


@pytest.mark.parametrize("model_id", ["antwort-sim", "my-org/my-model"])
def test_health_models_retrieves_one_model_as_the_sdk_reads_it(
    make_app: Callable[..., Flask], model_id: str
) -> None:
    web = make_app(default_model="my-org/my-model").test_client()

    answer = web.get(f"/v1/models/{model_id}")

    assert answer.status_code == 200
    assert Model.model_validate(answer.json).id == model_id


def test_health_models_an_unknown_model_is_404_model_not_found(web: FlaskClient) -> None:
    error = error_of(web.get("/v1/models/no-such-model"), 404)

    assert (error.type, error.code, error.param) == ("not_found", "model_not_found", "model")
    assert "no-such-model" in error.message


def test_health_models_adds_the_default_model(make_app: Callable[..., Flask]) -> None:
    web = make_app(default_model="my-deployment").test_client()

    page = SyncPage[Model].model_validate(web.get("/v1/models").json)

    assert page.data[0] == Model(id="my-deployment", created=0, object="model", owned_by="antwort")
    assert len(page.data) > 1


def test_health_models_model_server_down_is_502(make_app: Callable[..., Flask]) -> None:
    web = make_app(llm_base_url=f"http://127.0.0.1:{free_port()}/v1").test_client()

    error = error_of(web.get("/v1/models"), 502)

    assert (error.type, error.code) == ("model_error", "upstream_error")
