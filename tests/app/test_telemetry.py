"""Telemetry that costs nothing off: tracing asked for by OTEL_*, JSON log lines."""

from __future__ import annotations

import json
import logging

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext

from app.store import ResponseStore
from app.telemetry import logs, tracing


def test_tracing_is_requested_only_by_the_standard_environment() -> None:
    assert not tracing.is_requested({})
    assert tracing.is_requested({"OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing.is_requested({"OTEL_TRACES_EXPORTER": "console"})
    assert tracing.is_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.is_requested({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert not tracing.is_requested(
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    )
    assert not tracing.is_requested({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})


def test_tracing_off_makes_no_spans_and_carries_no_context() -> None:
    assert not tracing.is_enabled()
    with tracing.span("anything", {"a": 1}) as span:
        assert span is None
    assert tracing.carrier() == {}
    with tracing.resumed({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}):
        assert not trace.get_current_span().get_span_context().is_valid


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("antwort.test", logging.INFO, __file__, 1, message, (), None)


def test_json_lines_carry_the_bound_ids_and_the_current_trace() -> None:
    formatter = logs.JsonFormatter()
    context = SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=False)
    with (
        logs.bind(response_id="resp_1", turn=2),
        logs.bind(call_id="call_3"),
        trace.use_span(NonRecordingSpan(context)),
    ):
        line = json.loads(formatter.format(_record("task ended")))
    assert line["message"] == "task ended" and line["level"] == "info"
    assert (line["response_id"], line["turn"], line["call_id"]) == ("resp_1", 2, "call_3")
    assert line["trace_id"] == f"{0xABC:032x}" and line["span_id"] == f"{0xDEF:016x}"
    outside = json.loads(formatter.format(_record("later")))
    assert "response_id" not in outside and "trace_id" not in outside


def test_metrics_urls_of_gone_workers_are_forgotten(store: ResponseStore) -> None:
    store.heartbeat_worker("inference", "inference@live.1")
    store.register_metrics_url("inference@live.1", "http://live:9100/metrics")
    store.register_metrics_url("tools.sandbox@gone.2", "http://gone:9100/metrics")
    store.register_metrics_url("tools.sandbox@gone.2/77", "http://gone:9101/metrics")

    assert store.forget_metrics_urls(["inference", "tools.sandbox"]) == 2

    assert store.metrics_urls() == {"inference@live.1": "http://live:9100/metrics"}
