"""Per-tenant limits across two gateway apps sharing Redis: OpenAI's 429, its headers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from werkzeug.test import TestResponse

from app.jobs import JobKind, push_result
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


class WaitingJob:
    """A job request sent on a thread: it waits for its answer as a client would."""

    def __init__(self, web: FlaskClient, path: str, headers: dict[str, str], body: dict[str, Any]):
        self.answer: TestResponse | None = None
        self.thread = threading.Thread(target=self._send, args=(web, path, headers, body))
        self.thread.start()

    def _send(
        self, web: FlaskClient, path: str, headers: dict[str, str], body: dict[str, Any]
    ) -> None:
        self.answer = web.post(path, headers=headers, json=body)

    def answered(self, app: Flask, kind: JobKind, result: dict[str, Any]) -> TestResponse:
        """Answer the job as a worker would, once it is queued; the request's answer."""
        queue = app.extensions["antwort.jobs"]
        deadline = time.monotonic() + 30
        while not queue.jobs and time.monotonic() < deadline:
            time.sleep(0.01)
        push_result(app.extensions["antwort"].store, kind, queue.jobs[-1], result)
        self.thread.join(timeout=30)
        assert self.answer is not None
        return self.answer


def queued(app: Flask) -> list[str]:
    return list(app.extensions["antwort.jobs"].jobs)


@pytest.mark.parametrize("path", ["/v1/responses/input_tokens", "/v1/responses/compact"])
def test_rate_limit_a_job_counts_its_tokens_as_a_response_would(
    make_pair: Callable[..., tuple[FlaskClient, FlaskClient]], path: str
) -> None:
    """A count or a compaction is a model call: it spends the tenant's tokens of the minute (a
    job over them is refused at once, not queued and left to time out)."""
    one, two = make_pair(
        rate_limit_tokens_per_minute=300, sync_timeout_seconds=10, tenant_max_running=0
    )
    first = create(one, A, input="x" * 800)  # ~200 tokens of 300
    left = int(first.headers["x-ratelimit-remaining-tokens"])

    refused = two.post(path, headers=A, json={"model": "m", "input": "x" * 800})

    error = error_of(refused, 429)
    assert (error.type, error.code) == ("tokens", "rate_limit_exceeded")
    assert queued(one.application) == queued(two.application) == []
    job = WaitingJob(two, path, A, {"model": "m", "input": "x" * 200})  # ~50 tokens: fits
    kind: JobKind = "input_tokens" if path.endswith("input_tokens") else "compaction"
    answer = job.answered(two.application, kind, {"object": "response.input_tokens"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert 50 <= left - int(answer.headers["x-ratelimit-remaining-tokens"]) <= 60


@pytest.mark.parametrize("path", ["/v1/responses/input_tokens", "/v1/responses/compact"])
def test_rate_limit_a_job_is_charged_what_its_model_call_took(
    make_pair: Callable[..., tuple[FlaskClient, FlaskClient]], path: str
) -> None:
    """Past its estimate: a compaction's usage, a count's prompt and its one output token."""
    one, two = make_pair(
        rate_limit_tokens_per_minute=1000, sync_timeout_seconds=10, tenant_max_running=0
    )
    job = WaitingJob(two, path, A, {"model": "m", "input": "x" * 200})  # ~50 tokens reserved
    if path.endswith("input_tokens"):
        answer = job.answered(two.application, "input_tokens", {"input_tokens": 399})
    else:
        answer = job.answered(two.application, "compaction", {"usage": {"total_tokens": 400}})
    reserved = 1000 - int(answer.headers["x-ratelimit-remaining-tokens"])

    after = create(one, A, input="x" * 40)

    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert 50 <= reserved <= 60
    used = 1000 - int(after.headers["x-ratelimit-remaining-tokens"])
    assert used == 400 + 18  # the job's 400, then the create's own estimate: (40 + 35) // 4


def test_rate_limit_a_job_takes_a_place_in_flight_while_its_gateway_waits(
    make_pair: Callable[..., tuple[FlaskClient, FlaskClient]],
    redis_client: Any,
    key_prefix: str,
) -> None:
    one, two = make_pair(rate_limit_max_in_flight=1, lease_seconds=1.2, tenant_max_running=0)
    now = [NOW]
    for web in (one, two):
        web.application.extensions["antwort"].limiter.clock = lambda: now[0]
    count = {"model": "m", "input": "hi"}
    job = WaitingJob(one, "/v1/responses/input_tokens", A, count)
    deadline = time.monotonic() + 30
    while not queued(one.application):
        assert time.monotonic() < deadline, "the count was never queued"
        time.sleep(0.01)

    refused = [create(two, A), two.post("/v1/responses/input_tokens", headers=A, json=count)]

    for answer in refused:
        error = error_of(answer, 429)
        assert "1 responses queued or running" in error.message
    assert queued(two.application) == []
    # past its admission's reservation, the waiting gateway renews the job's place
    now[0] = NOW + 25
    in_flight, job_id = Keys(key_prefix).in_flight("team-a"), queued(one.application)[0]
    deadline = time.monotonic() + 30
    while redis_client.zscore(in_flight, job_id) != (NOW + 25) * 1000:
        assert time.monotonic() < deadline, "the waiting job's place was not renewed"
        time.sleep(0.05)
    now[0] = NOW + 50
    assert create(two, A).status_code == 429
    answer = job.answered(one.application, "input_tokens", {"input_tokens": 3})
    assert answer.status_code == 200
    assert create(two, A).status_code == 200  # answered: its place is free
