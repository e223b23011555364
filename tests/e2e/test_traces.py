"""One connected trace per response, across the gateway and two workers (OTLP over HTTP)."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from programs.supervisor import free_port
from tests.e2e.conftest import Fleet
from tests.e2e.helpers import internal
from tests.e2e.own_fleet import own_fleet
from tests.support.serving import serving


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: the protobuf requests, decoded into :class:`Span` s."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Receiver)
        self.spans: list[Span] = []
        self.lock = threading.Lock()

    def of_trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


class _Receiver(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            service=str(resource.get("service.name")),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self.server.lock:
            self.server.spans.extend(found)
        body = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    server = Collector()
    with serving(server):
        yield server


@pytest.fixture(scope="module")
def traced_fleet(
    fleet: Fleet, collector: Collector, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    with own_fleet(
        fleet.env,
        tmp_path_factory.mktemp("traced"),
        loglevel="INFO",
        ANTWORT_LOG_FORMAT="json",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.server_port}",
        OTEL_BSP_SCHEDULE_DELAY="100",
    ) as running:
        yield running


def _whole_trace(collector: Collector, deadline: float) -> list[Span]:
    """The last request's trace once its model calls, its tool call and all their parents are in.

    The exporters batch, and a task's span ends after the model call: each process sends its
    spans in its own time.
    """
    while True:
        with collector.lock:
            roots = [s for s in collector.spans if s.name == "POST /v1/responses"]
        spans = collector.of_trace(roots[-1].trace_id) if roots else []
        ids = {span.span_id for span in spans}
        if (
            len([s for s in spans if s.name.startswith("chat ")]) == 2
            and any(s.name == "execute_tool calculator" for s in spans)
            and all(span.parent_id in ids for span in spans if span.parent_id)
        ):
            return spans
        assert time.monotonic() < deadline, [(s.service, s.name) for s in collector.spans]
        time.sleep(0.1)


def test_an_agentic_response_is_one_connected_trace_across_three_processes(
    traced_fleet: Fleet, collector: Collector
) -> None:
    with openai.OpenAI(base_url=f"{traced_fleet.base_url}/v1", api_key="k", max_retries=0) as sdk:
        response = sdk.responses.create(
            model="antwort-sim",
            input="please use calculator expression=6*7",
            tools=internal("calculator"),  # type: ignore[arg-type]
        )
    assert response.status == "completed"

    deadline = time.monotonic() + 60
    spans = _whole_trace(collector, deadline)

    # one tree: a single root, every other span's parent in the same trace (waited for above)
    assert [span.name for span in spans if not span.parent_id] == ["POST /v1/responses"]
    assert {span.service for span in spans} == {
        "antwort-gateway",
        "antwort-inference",
        "antwort-tools.internal",
    }
    by_name = {span.name: span for span in spans}
    tool = by_name["execute_tool calculator"]
    assert tool.service == "antwort-tools.internal"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.call.id"] == response.output[0].call_id  # type: ignore[union-attr]
    # the model calls follow the GenAI conventions, one per turn, on the inference worker
    chats = sorted(
        (s for s in spans if s.name == "chat antwort-sim"),
        key=lambda s: s.attributes["antwort.turn"],
    )
    assert [c.attributes["antwort.turn"] for c in chats] == [0, 1]
    for chat in chats:
        assert chat.service == "antwort-inference"
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "antwort-sim"
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    # the tool task runs under the turn that asked for it; the next turn under the tool task
    parent = {span.span_id: span for span in spans}
    tool_task = parent[tool.parent_id]
    assert tool_task.service == "antwort-tools.internal"
    turn_of = {chat.attributes["antwort.turn"]: parent[chat.parent_id] for chat in chats}
    # between them at most the send's own span on the inference worker (Celery's send_task,
    # with the speed-ups off, makes one; the direct publish does not)
    between = []
    node = parent[tool_task.parent_id]
    while node.span_id != turn_of[0].span_id:
        between.append(node)
        assert node.parent_id, f"the tool task does not run under turn 0: {between}"
        node = parent[node.parent_id]
    assert len(between) <= 1 and all(s.service == "antwort-inference" for s in between), between
    # the task's JSON log line carries the trace it ran in (written when the task has ended,
    # which may be after the response completed)
    call_id = tool.attributes["gen_ai.tool.call.id"]
    while not (lines := _task_log_lines(traced_fleet, "tools.internal", call_id)):
        assert time.monotonic() < deadline, "the tool task logged no end"
        time.sleep(0.1)
    [line] = lines
    assert line["trace_id"] == tool.trace_id and line["outcome"] == "ok"
    second_turn_ancestors = set()
    node = turn_of[1]
    while node.parent_id:
        node = parent[node.parent_id]
        second_turn_ancestors.add(node.span_id)
    assert tool_task.span_id in second_turn_ancestors


def _task_log_lines(fleet: Fleet, process: str, call_id: str) -> list[dict[str, Any]]:
    """The JSON log lines of the process's tasks for the call that say how they ended."""
    logged = [
        json.loads(line)
        for line in (fleet.log_dir / f"{process}.log").read_text().splitlines()
        if line.startswith("{")
    ]
    return [x for x in logged if x.get("call_id") == call_id and "outcome" in x]


def test_a_turn_the_sweeper_runs_again_joins_the_response_trace(
    traced_fleet: Fleet, collector: Collector
) -> None:
    """The worker running the turn dies; a new worker's sweeper queues the turn again, and its
    run continues the trace the response was created in (the context stored with it)."""
    with collector.lock:
        seen = len(collector.spans)  # the spans of earlier tests
    with openai.OpenAI(base_url=f"{traced_fleet.base_url}/v1", api_key="k", max_retries=0) as sdk:
        response = sdk.responses.create(
            model="antwort-sim",
            input="count slowly [tokens=40] [delay_ms=150]",
            background=True,
        )
        deadline = time.monotonic() + 30
        while sdk.responses.retrieve(response.id).status != "in_progress":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        traced_fleet.stop("inference", signal.SIGKILL)  # its open spans die with it
        traced_fleet.start_worker("inference-2", "inference")
        deadline = time.monotonic() + 60
        while (final := sdk.responses.retrieve(response.id)).status != "completed":
            assert final.status == "in_progress", final.status
            assert time.monotonic() < deadline
            time.sleep(0.1)

    deadline = time.monotonic() + 30
    while not (rerun := [s for s in collector.spans[seen:] if s.name == "chat antwort-sim"]):
        assert time.monotonic() < deadline, [(s.service, s.name) for s in collector.spans[seen:]]
        time.sleep(0.1)
    [chat] = rerun  # the killed worker's call never ended, so never left it
    [root] = [s for s in collector.of_trace(chat.trace_id) if not s.parent_id]
    assert root.name == "POST /v1/responses" and root.service == "antwort-gateway"
    assert root in collector.spans[seen:]  # this response's request, not an earlier one
