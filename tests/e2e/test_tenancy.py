"""Tenancy through real processes: a gunicorn gateway with two tenants' keys on the e2e fleet,
and two gateway replicas that share one tenant's rate limit."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import redis

from programs.supervisor import free_port
from tests.conftest import delete_prefix
from tests.e2e.conftest import Fleet, fleet_env, wait_ready
from tests.e2e.helpers import assert_error_body, tool_runs, wait_for_status
from tests.e2e.test_metrics import scrape, value, worker_urls
from tests.e2e.test_websocket import open_socket, receive_response, socket_error


@pytest.fixture(scope="module")
def tenants_gateway(fleet: Fleet) -> Iterator[str]:
    """A second gateway of the fleet with two tenants' keys and a metrics key."""
    keys = {"ANTWORT_API_KEYS": "team-a:ka,team-b:kb", "ANTWORT_METRICS_KEY": "scrape"}
    with fleet.extra_gateway("gateway-tenants", **keys) as base_url:
        yield base_url


def sdk(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)


def test_tenancy_e2e_another_tenant_cannot_see_stream_or_continue(tenants_gateway: str) -> None:
    a, b = sdk(tenants_gateway, "ka"), sdk(tenants_gateway, "kb")
    response = a.responses.create(model="antwort-sim", input="A's secret plan")
    assert response.status == "completed"
    rid = response.id

    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(rid)
    with pytest.raises(openai.NotFoundError):
        b.responses.retrieve(rid, stream=True, starting_after=0)
    with pytest.raises(openai.NotFoundError):
        b.responses.input_items.list(rid)
    with pytest.raises(openai.NotFoundError):
        b.responses.cancel(rid)
    with pytest.raises(openai.NotFoundError):
        b.responses.delete(rid)
    with pytest.raises(openai.BadRequestError) as refused:
        b.responses.create(model="antwort-sim", input="and then?", previous_response_id=rid)
    assert refused.value.code == "previous_response_not_found"

    assert a.responses.retrieve(rid).output_text == response.output_text
    events = list(a.responses.retrieve(rid, stream=True, starting_after=0))
    assert events[-1].type == "response.completed"
    again = a.responses.create(model="antwort-sim", input="and then?", previous_response_id=rid)
    assert again.status == "completed"


def test_tenancy_e2e_websocket_continues_only_its_tenants_responses(tenants_gateway: str) -> None:
    rid = sdk(tenants_gateway, "ka").responses.create(model="antwort-sim", input="hi").id
    message = {"model": "antwort-sim", "input": "go on", "previous_response_id": rid}

    with open_socket(tenants_gateway, Authorization="Bearer kb") as ws:
        ws.send(_create(message))
        error = socket_error(receive_response(ws))
    with open_socket(tenants_gateway, Authorization="Bearer ka") as ws:
        ws.send(_create(message))
        mine = receive_response(ws)

    assert (error["status"], error["code"]) == (400, "previous_response_not_found")
    assert mine[-1]["type"] == "response.completed"


def test_tenancy_e2e_tokens_per_minute_count_what_a_chain_took_from_the_model(fleet: Fleet) -> None:
    """A chain sends its history to the model again: a create reserves the estimate of its own
    input, its run charges what the model took beyond it, and the next create waits; what passed
    the limit is carried into the next minute."""
    limits = {"ANTWORT_API_KEYS": "team-tpm:kt", "ANTWORT_RATE_LIMIT_TOKENS_PER_MINUTE": "2000"}
    fleet_redis = redis.Redis.from_url(fleet.env["ANTWORT_REDIS_URL"])
    inference = worker_urls(fleet, fleet_redis)["inference"]
    fleet_redis.close()
    with fleet.extra_gateway("gateway-tpm", **limits) as base_url:
        client = sdk(base_url, "kt")
        seconds_left = 60 - time.time() % 60
        if seconds_left < 20:  # the chain in one minute's window
            time.sleep(seconds_left + 0.5)
        first = client.responses.create(model="antwort-sim", input="a " * 1500)  # ~760 reserved
        second = client.responses.with_raw_response.create(
            model="antwort-sim", input="go on", previous_response_id=first.id
        )
        with pytest.raises(openai.RateLimitError) as refused:
            client.responses.create(
                model="antwort-sim", input="and on", previous_response_id=second.parse().id
            )

    # the simulator counts a word a token: each response took over 1,500
    took = [first.usage.total_tokens, second.parse().usage.total_tokens]
    assert all(1_500 < tokens < 1_700 for tokens in took), took
    assert 2_000 - int(second.headers["x-ratelimit-remaining-tokens"]) == took[0] + 10  # "go on"
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "tokens", error
    refusal = refused.value.response.headers
    assert refusal["x-ratelimit-remaining-tokens"] == "0"
    # ~3,200 of 2,000: ~1,200 carried into the next minute, which leaves "and on" room; the
    # tenant's tokens are back to none only the minute after
    assert int(refusal["Retry-After"]) <= 60 < int(refusal["x-ratelimit-reset-tokens"][:-1]) <= 120
    # the inference worker counts the tenant's tokens (the metrics of a shared fleet)
    counted = scrape(inference)
    for direction in ("input", "output"):
        tokens = value(
            counted, "antwort_tenant_tokens_total", tenant="team-tpm", direction=direction
        )
        usages = [first.usage, second.parse().usage]
        assert tokens == sum(getattr(usage, f"{direction}_tokens") for usage in usages)


def _create(body: dict[str, object]) -> str:
    return json.dumps({"type": "response.create", **body})


def test_tenancy_e2e_a_utf8_bearer_token_is_a_401(tenants_gateway: str) -> None:
    with httpx.Client(base_url=tenants_gateway) as http:
        for token in ("clé".encode(), "ключ".encode(), b"\xff\xfe"):
            answer = http.get("/v1/models", headers={b"Authorization": b"Bearer " + token})
            error = assert_error_body(answer, 401)
            assert error["code"] == "invalid_api_key"
        assert http.get("/metrics").status_code == 401
        assert http.get("/metrics", headers={"Authorization": "Bearer scrape"}).status_code == 200
        assert http.get("/healthz").status_code == 200


@pytest.fixture
def limited_pair(
    redis_url: str,
    sim_url: str,
    process_environ: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str]]:
    """Two gunicorn gateways on a prefix of their own, one tenant limited to 3 requests/min."""
    prefix = f"antwort-e2e-limits-{uuid.uuid4().hex[:8]}:"
    ports = [free_port(), free_port()]
    env = fleet_env(
        process_environ,
        redis_url=redis_url,
        prefix=prefix,
        llm_base_url=sim_url,
        model=None,
        ANTWORT_API_KEYS="team-c:kc",
        ANTWORT_RATE_LIMIT_REQUESTS_PER_MINUTE="3",
    )
    fleet = Fleet(base_url="", env=env, log_dir=tmp_path_factory.mktemp("rl"))
    for index, port in enumerate(ports):
        fleet.spawn(
            f"gateway-{index}",
            [sys.executable, "-m", "programs.cli", "gateway"],
            ANTWORT_PORT=str(port),
        )
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        for url in urls:
            _wait_healthy(url)
        yield urls[0], urls[1]
    finally:
        fleet.stop_all()
        client = redis.Redis.from_url(redis_url)
        delete_prefix(client, prefix)
        client.close()


def _wait_healthy(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not come up"
        time.sleep(0.1)


def test_tenancy_e2e_rate_limit_holds_across_two_gateway_processes(
    limited_pair: tuple[str, str],
) -> None:
    one, two = limited_pair
    key = {"Authorization": "Bearer kc"}
    first = httpx.get(f"{one}/v1/models", headers=key)
    reset = int(first.headers["x-ratelimit-reset-requests"].rstrip("s"))
    if reset < 10:  # too close to the minute's end: start in the next window
        time.sleep(reset + 0.5)
        first = httpx.get(f"{one}/v1/models", headers=key)

    answers = [first, httpx.get(f"{two}/v1/models", headers=key)]
    answers.append(httpx.get(f"{one}/v1/models", headers=key))
    refused = httpx.get(f"{two}/v1/models", headers=key)

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    error = assert_error_body(refused, 429)
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert 0 < int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-limit-requests"] == "3"


@contextmanager
def fleet_of_two_tenants(
    redis_url: str,
    sim_url: str,
    process_environ: dict[str, str],
    log_dir: Path,
    *,
    prefix: str | None = None,
    tool_threads: int | None = None,
    **settings: str,
) -> Iterator[str]:
    """A gateway and an inference worker of their own, keys for two tenants, ``settings``.

    ``tool_threads``: an internal-tools worker of that many threads too. ``prefix``: the keys'.
    """
    prefix = prefix or f"antwort-e2e-fair-{uuid.uuid4().hex[:8]}:"
    port = free_port()
    env = fleet_env(
        {k: v for k, v in process_environ.items() if k != "ANTWORT_TENANT_MAX_RUNNING"},
        redis_url=redis_url,
        prefix=prefix,
        llm_base_url=sim_url,
        port=port,
        ANTWORT_API_KEYS="team-a:ka,team-b:kb",
    )
    env.update(settings)
    fleet = Fleet(base_url=f"http://127.0.0.1:{port}", env=env, log_dir=log_dir)
    fleet.spawn("gateway", [sys.executable, "-m", "programs.cli", "gateway"])
    fleet.start_worker("worker")
    if tool_threads is not None:
        fleet.start_worker("tools", "tools.internal", f"--concurrency={tool_threads}")
    try:
        wait_ready(fleet.base_url)
        yield fleet.base_url
    finally:
        fleet.stop_all()
        client = redis.Redis.from_url(redis_url)
        delete_prefix(client, prefix)
        client.close()


@pytest.fixture
def fair_fleet(
    redis_url: str,
    sim_url: str,
    process_environ: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """One response per tenant at a time (``ANTWORT_TENANT_MAX_RUNNING=1``), 4 threads."""
    with fleet_of_two_tenants(
        redis_url,
        sim_url,
        process_environ,
        tmp_path_factory.mktemp("f"),
        ANTWORT_TENANT_MAX_RUNNING="1",
        ANTWORT_INFERENCE_CONCURRENCY="4",
    ) as base_url:
        yield base_url


@pytest.fixture
def default_fair_fleet(
    redis_url: str,
    sim_url: str,
    process_environ: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The fair share as it is by default (unset), on a worker of 2 threads: 1 per tenant."""
    with fleet_of_two_tenants(
        redis_url,
        sim_url,
        process_environ,
        tmp_path_factory.mktemp("f"),
        ANTWORT_INFERENCE_CONCURRENCY="2",
    ) as base_url:
        yield base_url


def test_tenancy_e2e_a_flood_waits_its_turn_and_another_tenant_goes_first(fair_fleet: str) -> None:
    a, b = sdk(fair_fleet, "ka"), sdk(fair_fleet, "kb")
    flood = [
        a.responses.create(model="antwort-sim", input=text, background=True).id
        for text in ("slow [ttft_ms=10000]", "slow [ttft_ms=1500]", "slow [ttft_ms=1500]")
    ]

    theirs = b.responses.create(model="antwort-sim", input="quick")

    assert theirs.status == "completed"
    # A's third can start only once its first two have ended (≥ 11.5 s: B's create and this
    # look take a few hundred ms, seconds on a busy machine): it still waits
    assert a.responses.retrieve(flood[2]).status == "queued"
    for rid in flood:  # each started by the end of the one before it, on the worker
        assert wait_for_status(a, rid, ["completed"], timeout=60).status == "completed"


def test_tenancy_e2e_by_default_another_tenant_starts_while_a_flood_is_parked(
    default_fair_fleet: str,
) -> None:
    a, b = sdk(default_fair_fleet, "ka"), sdk(default_fair_fleet, "kb")
    flood = [
        a.responses.create(model="antwort-sim", input=text, background=True).id
        for text in ("slow [ttft_ms=10000]", "slow [ttft_ms=3000]", "slow [ttft_ms=3000]")
    ]

    theirs = b.responses.create(model="antwort-sim", input="quick")

    assert theirs.status == "completed"
    # without the fair share A's first two took both threads, and B waited behind its third
    first = a.responses.retrieve(flood[0])  # still in its 10 s
    assert first.status == "in_progress"  # B went on the thread A's flood left free
    assert [a.responses.retrieve(rid).status for rid in flood[1:]] == ["queued", "queued"]
    for rid in flood:  # each started by the end of the one before it, on the worker
        assert wait_for_status(a, rid, ["completed"], timeout=60).status == "completed"


def test_tenancy_e2e_a_flood_of_jobs_waits_its_turn_too(default_fair_fleet: str) -> None:
    """Token counts (and compactions) are model calls on the same threads: one tenant's flood
    of them takes its share, parked in Redis, not every thread before another tenant."""
    a, b = sdk(default_fair_fleet, "ka"), sdk(default_fair_fleet, "kb")
    counted: list[int] = []

    def count() -> None:
        answer = a.responses.input_tokens.count(model="antwort-sim", input="slow [ttft_ms=8000]")
        counted.append(answer.input_tokens)

    flood = [threading.Thread(target=count) for _ in range(2)]
    for thread in flood:
        thread.start()
    time.sleep(0.5)  # both sent; a share is one thread of the worker's two

    theirs = b.responses.create(model="antwort-sim", input="quick")

    assert theirs.status == "completed"
    # without it A's two counts took both threads: B ran once they were answered (8 s)
    assert counted == []
    for thread in flood:
        thread.join(timeout=60)
    assert len(counted) == 2 and counted[0] > 0 and counted[0] == counted[1]


@dataclass(frozen=True)
class ToolFairFleet:
    base_url: str
    prefix: str
    counters: redis.Redis


@pytest.fixture
def tool_fair_fleet(
    redis_url: str,
    sim_url: str,
    process_environ: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ToolFairFleet]:
    """The fair shares as they are by default (unset), with an internal-tools worker of 4
    threads: 2 per tenant on its queue."""
    prefix = f"antwort-e2e-fair-{uuid.uuid4().hex[:8]}:"
    with fleet_of_two_tenants(
        redis_url,
        sim_url,
        {k: v for k, v in process_environ.items() if k != "ANTWORT_TENANT_MAX_TOOL_CALLS"},
        tmp_path_factory.mktemp("f"),
        prefix=prefix,
        tool_threads=4,
        ANTWORT_INTERNAL_TOOL_MODULES="tests.support.tools",
    ) as base_url:
        counters = redis.Redis.from_url(redis_url, decode_responses=True)
        try:
            yield ToolFairFleet(base_url, prefix, counters)
        finally:
            counters.close()


def test_tenancy_e2e_a_flood_of_tool_calls_leaves_another_tenant_a_thread(
    tool_fair_fleet: ToolFairFleet,
) -> None:
    """A's one response calls a tool four times at once and holds each call (their gates stay
    shut) on a tools worker of four threads; B's call runs meanwhile, on a thread A's share
    left free. Before the tool share A's four calls took every thread, and B's waited for them
    (seen in the tools' own counters, not the clock)."""
    fleet = tool_fair_fleet
    a, b = sdk(fleet.base_url, "ka"), sdk(fleet.base_url, "kb")
    tag = uuid.uuid4().hex  # call ids hash the input
    flood = a.responses.create(
        model="antwort-sim",
        input=" ".join(f'[call counted_gated {{"note": "{n} {tag}"}}]' for n in "abcd"),
        tools=[{"type": "internal", "name": "counted_gated"}],  # type: ignore[list-item]
        background=True,
    )
    deadline = time.monotonic() + 40  # the gates' own 50 s would end the calls anyway
    calls: list[str] = []
    while len(calls) < 4 or sum(tool_runs(fleet.counters, fleet.prefix, c)[0] for c in calls) < 2:
        current = a.responses.retrieve(flood.id)
        assert current.status in ("queued", "in_progress"), current.output  # not ended
        assert time.monotonic() < deadline, "A's calls never started"
        calls = [item.call_id for item in current.output if item.type == "function_call"]  # type: ignore[union-attr]
        time.sleep(0.05)

    theirs = b.responses.create(
        model="antwort-sim",
        input="[call fast_echo {}]",
        tools=[{"type": "internal", "name": "fast_echo"}],  # type: ignore[list-item]
    )

    assert theirs.status == "completed" and theirs.output_text == "Tool results: fast_echo done"
    runs = [tool_runs(fleet.counters, fleet.prefix, call) for call in calls]
    assert sorted(runs) == [(0, 0), (0, 0), (1, 0), (1, 0)]  # A's two places, its calls held
    for call in calls:
        fleet.counters.set(f"{fleet.prefix}test:gate:{call}", 1)
    current = wait_for_status(a, flood.id, ["completed", "failed"], timeout=60)
    assert current.status == "completed", current.error
    assert current.output_text == "Tool results: " + "; ".join(["counted_gated done"] * 4)
