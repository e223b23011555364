"""Per-tenant limits across two gateway apps sharing Redis: OpenAI's 429, its headers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from werkzeug.test import TestResponse

from app.keys import Keys
from app.tenancy import KeyStore
from tests.gateway.conftest import error_of

A = {"Authorization": "Bearer ka"}
B = {"Authorization": "Bearer kb"}
NOW = 1_800_000_010.0
"""Ten seconds into a minute's window: a test never straddles two windows."""


@pytest.fixture
def make_pair(make_app: Callable[..., Flask]) -> Callable[..., tuple[FlaskClient, FlaskClient]]:
    """Two gateway replicas on one Redis prefix, their limiters' clocks fixed."""

    def make(**settings: Any) -> tuple[FlaskClient, FlaskClient]:
        apps = [make_app(api_keys="team-a:ka,team-b:kb", **settings) for _ in range(2)]
        for app in apps:
            app.extensions["antwort"].limiter.clock = lambda: NOW
        return apps[0].test_client(), apps[1].test_client()

    return make


def create(web: FlaskClient, headers: dict[str, str], **body: Any) -> TestResponse:
    return web.post(
        "/v1/responses",
        headers=headers,
        json={"model": "m", "input": "hi", "background": True, **body},
    )


def test_rate_limit_requests_per_minute_hold_across_replicas(
    make_pair: Callable[..., tuple[FlaskClient, FlaskClient]],
) -> None:
    one, two = make_pair(rate_limit_requests_per_minute=3)

    answers = [one.get("/v1/models", headers=A), two.get("/v1/models", headers=A)]
    answers.append(create(one, A))
    refused = two.get("/v1/models", headers=A)

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["2", "1", "0"]
    assert answers[0].headers["x-ratelimit-limit-requests"] == "3"
    assert answers[0].headers["x-ratelimit-reset-requests"] == "50s"
    error = error_of(refused, 429)
    assert (error.type, error.code, error.param) == ("requests", "rate_limit_exceeded", None)
    assert "requests per minute" in error.message
    assert refused.headers["Retry-After"] == "50"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert two.get("/v1/models", headers=B).status_code == 200  # B has a budget of its own
    assert one.get("/healthz").status_code == 200  # probes are never limited


def test_rate_limit_tokens_per_minute_count_the_estimate(
    make_pair: Callable[..., tuple[FlaskClient, FlaskClient]],
) -> None:
    one, two = make_pair(rate_limit_tokens_per_minute=300)

    first = create(one, A, input="x" * 400, max_output_tokens=100)  # ~100 + 100 tokens
    refused = create(two, A, input="x" * 400, max_output_tokens=100)

    assert first.status_code == 200, first.get_data(as_text=True)
    assert first.headers["x-ratelimit-limit-tokens"] == "300"
    used = 300 - int(first.headers["x-ratelimit-remaining-tokens"])
    assert 200 <= used <= 220
    error = error_of(refused, 429)
    assert (error.type, error.code) == ("tokens", "rate_limit_exceeded")
    assert refused.headers["Retry-After"] == "50"
    assert create(two, A, input="short").status_code == 200  # what still fits, fits
    assert create(two, B, input="x" * 400, max_output_tokens=100).status_code == 200


def test_rate_limit_responses_in_flight(
    make_pair: Callable[..., tuple[FlaskClient, FlaskClient]],
) -> None:
    one, two = make_pair(rate_limit_max_in_flight=2)
    first = create(one, A).json
    assert first is not None
    assert create(two, A).status_code == 200

    refused = create(one, A)

    error = error_of(refused, 429)
    assert (error.type, error.code) == ("requests", "rate_limit_exceeded")
    assert "2 responses queued or running" in error.message
    assert refused.headers["Retry-After"] == "1"
    assert create(one, B).status_code == 200
    # a response that ends frees its place, on every replica
    assert two.post(f"/v1/responses/{first['id']}/cancel", headers=A).status_code == 200
    assert create(two, A).status_code == 200
    assert create(one, A).status_code == 429


def test_rate_limit_a_tenants_own_limits_win_over_the_defaults(
    make_pair: Callable[..., tuple[FlaskClient, FlaskClient]],
    make_app: Callable[..., Flask],
    redis_client: Any,
    key_prefix: str,
) -> None:
    store = KeyStore(redis_client, Keys(key_prefix))
    token, _ = store.create("team-c")
    store.set_limits("team-c", {"requests_per_minute": 1})
    one, two = make_pair(rate_limit_requests_per_minute=100)
    c = {"Authorization": f"Bearer {token}"}

    assert one.get("/v1/models", headers=c).headers["x-ratelimit-limit-requests"] == "1"
    assert error_of(two.get("/v1/models", headers=c), 429).code == "rate_limit_exceeded"
    assert one.get("/v1/models", headers=A).headers["x-ratelimit-limit-requests"] == "100"


def test_rate_limit_none_by_default_and_no_headers(web: FlaskClient) -> None:
    answer = create(web, {})

    assert answer.status_code == 200
    assert not [name for name, _ in answer.headers.items() if name.startswith("x-ratelimit")]


def test_metrics_count_creates_and_refusals_per_tenant(make_app: Callable[..., Flask]) -> None:
    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    app = make_app(api_keys="team-m:km", rate_limit_requests_per_minute=1)
    web = app.test_client()
    created = sample("antwort_responses_created_total", tenant="team-m")
    refused = sample("antwort_rate_limited_total", tenant="team-m", limit="requests")
    body = {"model": "m", "input": "hi", "background": True}

    first = web.post("/v1/responses", headers={"Authorization": "Bearer km"}, json=body)
    second = web.post("/v1/responses", headers={"Authorization": "Bearer km"}, json=body)

    assert (first.status_code, second.status_code) == (200, 429)
    assert sample("antwort_responses_created_total", tenant="team-m") == created + 1
    assert sample("antwort_rate_limited_total", tenant="team-m", limit="requests") == refused + 1
