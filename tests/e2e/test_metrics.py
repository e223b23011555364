"""Every process of a real fleet exposes its metrics, and they move as the fleet works."""

from __future__ import annotations

import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import httpx
import openai
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from app.keys import Keys
from app.store.fleet import LIVE_WITHIN_SECONDS
from tests.e2e.conftest import Fleet
from tests.e2e.helpers import internal, wait_until_tool_runs

Samples = Counter[tuple[str, frozenset[tuple[str, str]]]]


def scrape(url: str) -> Samples:
    """One process's samples, by name and labels."""
    found: Samples = Counter()
    text = httpx.get(url, timeout=5).raise_for_status().text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] += sample.value
    return found


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    """The sum of ``metric``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == metric and wanted <= ls)


def worker_urls(fleet: Fleet, client: redis.Redis) -> dict[str, str]:
    """Queue → the metrics URL of the fleet's live worker on it (one each in the e2e fleet)."""
    keys = Keys(fleet.env["ANTWORT_KEY_PREFIX"])
    registered = {k.decode(): v.decode() for k, v in client.hgetall(keys.worker_metrics).items()}
    live = {
        name.decode()
        for queue in ("inference", "tools.internal")
        for name in client.zrangebyscore(
            keys.workers(queue), time.time() - LIVE_WITHIN_SECONDS, "+inf"
        )
    }
    return {name.split("@")[0]: url for name, url in registered.items() if name in live}


@pytest.fixture
def fleet_redis(fleet: Fleet) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(fleet.env["ANTWORT_REDIS_URL"])
    yield client
    client.close()


def test_every_process_metrics_move_with_an_agentic_run_and_a_cancel(
    client: openai.OpenAI, fleet: Fleet, fleet_redis: redis.Redis, counters: redis.Redis
) -> None:
    urls = {"gateway": f"{fleet.base_url}/metrics", **worker_urls(fleet, fleet_redis)}
    assert {"gateway", "inference", "tools.internal"} <= set(urls)
    before = {name: scrape(url) for name, url in urls.items()}

    answered = client.responses.create(
        model="antwort-sim",
        input="please use calculator expression=6*7",
        tools=internal("calculator"),  # type: ignore[arg-type]
    )
    assert answered.status == "completed"
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    slow = client.responses.create(
        model="antwort-sim",
        input=f"counted_gated ({uuid.uuid4().hex})",
        tools=internal("counted_gated"),  # type: ignore[arg-type]
        background=True,
    )
    call_id = wait_until_tool_runs(client, counters, prefix, slow.id)
    assert client.responses.cancel(slow.id).status == "cancelled"
    counters.set(f"{prefix}test:gate:{call_id}", 1)  # the tool ends only once cancelled
    stopped = {"kind": "internal", "name": "counted_gated", "outcome": "cancelled"}

    def cancels_counted(samples: Samples) -> tuple[float, float]:
        return (
            value(samples, "antwort_tool_calls_total", **stopped),
            value(samples, "antwort_cancel_latency_seconds_count", stage="tool"),
        )

    # until the tool worker stopped the cancelled call and counted it (after giving its claim
    # back, a round trip later)
    deadline = time.monotonic() + 30
    counted_before = cancels_counted(before["tools.internal"])
    while any(
        now == then
        for now, then in zip(
            cancels_counted(scrape(urls["tools.internal"])), counted_before, strict=True
        )
    ):
        assert time.monotonic() < deadline, "the cancelled call was never counted"
        time.sleep(0.05)

    after = {name: scrape(url) for name, url in urls.items()}

    def moved(process: str, metric: str, /, **labels: str) -> float:
        return value(after[process], metric, **labels) - value(before[process], metric, **labels)

    def moved_anywhere(metric: str, /, **labels: str) -> float:
        return sum(moved(process, metric, **labels) for process in urls)

    # the gateway: requests by route and status, responses created, the cancel, the queues
    route = {"method": "POST", "route": "/v1/responses", "status": "200"}
    assert moved("gateway", "antwort_http_request_duration_seconds_count", **route) >= 2
    cancel = {"method": "POST", "route": "/v1/responses/<response_id>/cancel"}
    assert moved("gateway", "antwort_http_request_duration_seconds_count", **cancel) == 1
    assert moved("gateway", "antwort_responses_created_total") >= 2
    assert moved("gateway", "antwort_cancellations_total") == 1
    for queue in ("inference", "tools.internal", "tools.mcp", "tools.sandbox"):
        assert ("antwort_queue_depth", frozenset({("queue", queue)})) in after["gateway"]
    assert value(after["gateway"], "antwort_live_workers", queue="inference") >= 1
    # responses ended, wherever the final write happened (a worker, or the gateway's cancel)
    assert moved_anywhere("antwort_responses_ended_total", status="completed") >= 1
    assert moved_anywhere("antwort_responses_ended_total", status="cancelled") >= 1
    # the inference worker: turns, the model, the queue wait, one line per task
    assert moved("inference", "antwort_turn_duration_seconds_count") >= 3
    model = {"model": "antwort-sim"}
    assert moved("inference", "antwort_model_time_to_first_token_seconds_count", **model) >= 3
    assert moved("inference", "antwort_model_tokens_total", direction="output", **model) > 0
    assert moved("inference", "antwort_model_tokens_total", direction="input", **model) > 0
    open_tenant = {"tenant": "open"}  # a fleet without keys has one tenant
    assert moved("inference", "antwort_tenant_tokens_total", direction="input", **open_tenant) > 0
    assert moved("inference", "antwort_queue_wait_seconds_count", queue="inference") >= 3
    assert moved("inference", "antwort_task_duration_seconds_count", task="responses.run_turn") >= 3
    # the tool worker: calls by kind, name and outcome, their duration, the cancel's latency
    ok = {"kind": "internal", "name": "calculator", "outcome": "ok"}
    assert moved("tools.internal", "antwort_tool_calls_total", **ok) == 1
    assert moved("tools.internal", "antwort_tool_call_duration_seconds_count", **ok) == 1
    assert moved("tools.internal", "antwort_tool_calls_total", **stopped) == 1
    assert moved("tools.internal", "antwort_cancel_latency_seconds_count", stage="tool") == 1
    assert moved("tools.internal", "antwort_queue_wait_seconds_count", queue="tools.internal") >= 2
    # labels stay bounded: no response id anywhere
    for samples in after.values():
        assert not [key for key in samples if any(answered.id in v for _, v in key[1])]


def test_a_compactions_and_a_counts_model_calls_are_counted_on_the_inference_worker(
    client: openai.OpenAI, fleet: Fleet, fleet_redis: redis.Redis
) -> None:
    url = worker_urls(fleet, fleet_redis)["inference"]
    model = f"sim-{uuid.uuid4().hex[:8]}"  # the simulator answers any model: only these calls
    before = scrape(url)

    compacted = client.responses.compact(
        model=model, input="Remember: the codeword is papaya. Keep it for later."
    )
    counted = client.responses.input_tokens.count(model=model, input="How long is this?")

    after = scrape(url)

    def moved(metric: str, /, **labels: str) -> float:
        return value(after, metric, **labels) - value(before, metric, **labels)

    assert compacted.usage is not None
    assert moved("antwort_model_tokens_total", model=model, direction="input") == (
        compacted.usage.input_tokens + counted.input_tokens
    )
    assert moved("antwort_model_tokens_total", model=model, direction="output") == (
        compacted.usage.output_tokens + 1  # the count's one token
    )
    assert moved("antwort_tenant_tokens_total", tenant="open", direction="input") >= (
        compacted.usage.input_tokens + counted.input_tokens
    )
    # the summary is timed as a turn is; the count, one token, is not
    assert moved("antwort_model_time_to_first_token_seconds_count", model=model) == 1


def test_gateway_counts_open_streams_across_its_processes(
    client: openai.OpenAI, fleet: Fleet, counters: redis.Redis
) -> None:
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    response = client.responses.create(
        model="antwort-sim",
        input=f"counted_gated ({uuid.uuid4().hex})",
        tools=internal("counted_gated"),  # type: ignore[arg-type]
        background=True,
    )
    call_id = wait_until_tool_runs(client, counters, prefix, response.id)  # runs till let go
    url = f"{fleet.base_url}/v1/responses/{response.id}?stream=true"
    with httpx.stream("GET", url, timeout=30) as stream:
        lines = stream.iter_lines()  # kept: a dropped iterator would close the stream
        assert next(lines) == ": connected"
        scraped = scrape(f"{fleet.base_url}/metrics")
        assert value(scraped, "antwort_open_streams", transport="sse") >= 1
        client.responses.cancel(response.id)
    counters.set(f"{prefix}test:gate:{call_id}", 1)
    deadline = time.monotonic() + 10
    while value(scrape(f"{fleet.base_url}/metrics"), "antwort_open_streams", transport="sse"):
        assert time.monotonic() < deadline, "the closed stream is still counted"
        time.sleep(0.05)


def test_a_prefork_worker_serves_metrics_from_each_pool_process(
    fleet: Fleet, fleet_redis: redis.Redis
) -> None:
    """Each pool child runs tasks, so each serves and registers its own port."""
    proc = fleet.start_worker("prefork-0", "tools.internal", "--pool=prefork", "--concurrency=2")
    keys = Keys(fleet.env["ANTWORT_KEY_PREFIX"])
    try:
        deadline = time.monotonic() + 60
        while True:
            registered = {
                k.decode(): v.decode()
                for k, v in fleet_redis.hgetall(keys.worker_metrics).items()
                if k.decode().endswith(f".{proc.pid}") or f".{proc.pid}/" in k.decode()
            }
            if len(registered) == 3:  # the worker and its two pool children
                break
            assert time.monotonic() < deadline, registered
            time.sleep(0.1)
        main = [url for name, url in registered.items() if "/" not in name]
        children = [url for name, url in registered.items() if "/" in name]
        assert len(main) == 1 and len(set(children)) == 2 and main[0] not in children
        for url in children:
            assert "antwort_tool_calls" in httpx.get(url, timeout=5).text
    finally:
        fleet.stop("prefork-0")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_sandbox_runs_are_counted_by_the_pool_process_that_ran_them(
    client: openai.OpenAI, fleet: Fleet, fleet_redis: redis.Redis
) -> None:
    keys = Keys(fleet.env["ANTWORT_KEY_PREFIX"])

    def children() -> list[str]:  # the live sandbox worker's pool processes
        live = {
            name.decode()
            for name in fleet_redis.zrangebyscore(
                keys.workers("tools.sandbox"), time.time() - LIVE_WITHIN_SECONDS, "+inf"
            )
        }
        urls = fleet_redis.hgetall(keys.worker_metrics)
        return [v.decode() for k, v in urls.items() if k.decode().split("/")[0] in live]

    def runs() -> float:
        return sum(
            value(scrape(url), "antwort_sandbox_runs_total", outcome="ok") for url in children()
        )

    before = runs()
    response = client.responses.create(
        model="antwort-sim",
        input="please use code_interpreter code=```print(6*7)```",
        tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
    )
    assert response.status == "completed"
    assert runs() - before == 1
