"""The fleet's Prometheus metrics, recorded where the work happens.

Labels stay bounded: queues, routes, statuses, tool kinds and names, model names, tenants (the
operator's own list); never a response id. What a client picks (a request's method, a model's
name, an MCP server's tool names) is bounded here: :func:`method_label`, :class:`FirstValues`.
Recording is in-process (a lock and an add, or an mmap write in the gateway's multiprocess
mode): no metric costs a Redis round trip. What lives in Redis (queue depths, live workers) is
read at scrape time by :class:`FleetCollector`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import redis
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SLOW = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


OTHER = "other"
"""The label value of a method, a model or a tool name past what a family labels by name."""

_HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def method_label(method: str) -> str:
    """A request's method as a label: a standard one by name, any other :data:`OTHER`.

    A client picks its method (gunicorn takes any token): each new one would be a new series.
    """
    return method if method in _HTTP_METHODS else OTHER


class FirstValues:
    """Label values as they come, up to ``limit`` distinct ones a process; later ones :data:`OTHER`.

    A model's name comes from the request, and a model server that answers to any name
    (llama.cpp's) would make a series of each; an MCP server names its own tools. The first
    ``limit`` keep their names, which an operator's fleet does not outgrow.
    """

    def __init__(self, limit: int):
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        """``value``, or :data:`OTHER` once ``limit`` others were labelled by name."""
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(value)
                return value
        return OTHER


model_label = FirstValues(100)
tool_name_label = FirstValues(500)


def tenant_label(tenant: str) -> str:
    """A tenant's label value: its name, or ``open`` for the one tenant of a fleet without keys."""
    return tenant or "open"


HTTP_REQUEST_SECONDS = Histogram(
    "antwort_http_request_duration_seconds",
    "HTTP requests by method, route and status: time to the response's headers.",
    ["method", "route", "status"],
    buckets=_FAST,
)
OPEN_STREAMS = Gauge(
    "antwort_open_streams",
    "Event streams the gateway holds open, by transport (sse, websocket).",
    ["transport"],
    multiprocess_mode="livesum",
)
RESPONSES_CREATED = Counter(
    "antwort_responses_created", "Responses created, by tenant ('open': auth off).", ["tenant"]
)
TENANT_TOKENS = Counter(
    "antwort_tenant_tokens",
    "Tokens the model took for a tenant's responses and jobs, by direction (input, output).",
    ["tenant", "direction"],
)
RATE_LIMITED = Counter(
    "antwort_rate_limited",
    "Requests refused with 429 by a tenant's limit (requests, tokens, in_flight).",
    ["tenant", "limit"],
)
RESPONSES_ENDED = Counter(
    "antwort_responses_ended", "Responses that reached a final status, by status.", ["status"]
)
QUEUE_WAIT_SECONDS = Histogram(
    "antwort_queue_wait_seconds",
    "Time a task waited in its queue: sent until a worker started it.",
    ["queue"],
    buckets=_FAST,
)
TASK_SECONDS = Histogram(
    "antwort_task_duration_seconds",
    "Celery tasks by name and outcome (the task's result, or 'error').",
    ["task", "outcome"],
    buckets=_SLOW,
)
TURN_SECONDS = Histogram(
    "antwort_turn_duration_seconds",
    "Steps of the agentic loop that held a response's lease, by outcome.",
    ["outcome"],
    buckets=_SLOW,
)
MODEL_TTFT_SECONDS = Histogram(
    "antwort_model_time_to_first_token_seconds",
    "Time from the model call to its first streamed chunk, by model.",
    ["model"],
    buckets=_FAST,
)
MODEL_TOKENS_PER_SECOND = Histogram(
    "antwort_model_output_tokens_per_second",
    "Output tokens per second after the first token, by model.",
    ["model"],
    buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000),
)
MODEL_TOKENS = Counter(
    "antwort_model_tokens", "Tokens by model and direction (input, output).", ["model", "direction"]
)
TOOL_CALLS = Counter(
    "antwort_tool_calls",
    "Tool calls run by kind, tool name and outcome.",
    ["kind", "name", "outcome"],
)
TOOL_CALL_SECONDS = Histogram(
    "antwort_tool_call_duration_seconds",
    "Time tool calls ran, by kind, tool name and outcome.",
    ["kind", "name", "outcome"],
    buckets=_SLOW,
)
CANCELLATIONS = Counter("antwort_cancellations", "Background responses cancelled by a client.")
CANCEL_LATENCY_SECONDS = Histogram(
    "antwort_cancel_latency_seconds",
    "Time from a client's cancel until a worker stopped the work, by what stopped (turn, tool).",
    ["stage"],
    buckets=_FAST,
)
LEASE_TAKEOVERS = Counter(
    "antwort_lease_takeovers",
    "Runs that took over a turn whose previous run died or stalled (its start count above one).",
)
LEASES_LOST = Counter(
    "antwort_leases_lost", "Runs that stopped because another run took their lease over."
)
SWEEPER_RERUNS = Counter(
    "antwort_sweeper_reruns",
    "Turns the sweeper queued again, by the status the response had (queued, in_progress).",
    ["status"],
)
JOB_REQUEUES = Counter(
    "antwort_job_requeues",
    "Jobs a waiting gateway queued again (compaction, input_tokens), by kind and why "
    "(worker_died, not_started, redis_lost).",
    ["kind", "reason"],
)
TASK_REDELIVERIES = Counter(
    "antwort_task_redeliveries",
    "Tasks a worker received again (the broker redelivered them), by task name.",
    ["task"],
)
SANDBOX_RUNS = Counter("antwort_sandbox_runs", "Sandbox runs by outcome.", ["outcome"])
SANDBOX_KILLS = Counter(
    "antwort_sandbox_kills", "Sandbox runs killed, by reason (timeout).", ["reason"]
)


class FleetCollector(Collector):
    """What lives in Redis, read at scrape time: queue depths and live workers per queue."""

    def __init__(
        self,
        *,
        queue_depths: Callable[[], dict[str, int]],
        live_workers: Callable[[], dict[str, int]],
    ):
        self._queue_depths = queue_depths
        self._live_workers = live_workers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Read Redis; a failed read leaves the family out rather than failing the scrape."""
        depth = GaugeMetricFamily(
            "antwort_queue_depth", "Messages waiting in each queue.", labels=["queue"]
        )
        workers = GaugeMetricFamily(
            "antwort_live_workers", "Workers with a recent heartbeat, by queue.", labels=["queue"]
        )
        for family, read in ((depth, self._queue_depths), (workers, self._live_workers)):
            try:
                values = read()
            except redis.RedisError:  # Redis away: the rest of the scrape still answers
                continue
            for queue, value in values.items():
                family.add_metric([queue], value)
            yield family


class ModelCallTimer:
    """Times one streamed model call: time to first chunk, then output tokens per second.

    Counts its tokens by model, and by ``tenant``: whose response it is ("": the open tenant).
    """

    def __init__(self, model: str, *, tenant: str = ""):
        self._model = model
        self._tenant = tenant
        self._started = time.perf_counter()
        self._first: float | None = None

    def first_chunk(self) -> None:
        """The first chunk arrived."""
        self._first = time.perf_counter()
        MODEL_TTFT_SECONDS.labels(model_label(self._model)).observe(self._first - self._started)

    def done(self, *, input_tokens: int, output_tokens: int) -> None:
        """The call ended with this usage."""
        count_model_tokens(
            self._model, self._tenant, input_tokens=input_tokens, output_tokens=output_tokens
        )
        if self._first is None:
            return
        streaming = time.perf_counter() - self._first
        if output_tokens and streaming > 0:
            MODEL_TOKENS_PER_SECOND.labels(model_label(self._model)).observe(
                output_tokens / streaming
            )


def count_model_tokens(model: str, tenant: str, *, input_tokens: int, output_tokens: int) -> None:
    """A model call's tokens, by model and by ``tenant`` (its name, or ""/``open``: the open one).

    A timed call counts them through :class:`ModelCallTimer`; a call of one token (a count, a
    measure against ``compact_threshold``) only here, as it says nothing of the model's speed.
    """
    label, model = tenant_label(tenant), model_label(model)
    MODEL_TOKENS.labels(model, "input").inc(input_tokens)
    MODEL_TOKENS.labels(model, "output").inc(output_tokens)
    TENANT_TOKENS.labels(label, "input").inc(input_tokens)
    TENANT_TOKENS.labels(label, "output").inc(output_tokens)


def observe_cancel(stage: str, since: float | None) -> None:
    """Work (``stage``: turn, tool) stopped ``since`` seconds after a client's cancel."""
    if since is not None:
        CANCEL_LATENCY_SECONDS.labels(stage).observe(since)
