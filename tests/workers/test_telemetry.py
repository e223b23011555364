"""A worker's task record when one task id runs twice at once in the same process.

After the broker connection drops, Celery hands an unacknowledged message out again, and it
may reach the very worker still running it (the lease then keeps the second run from
acting). Each run must close its own record: its duration, its log line, its context.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from celery import Celery, signals
from celery.app.trace import build_tracer
from celery.exceptions import Retry
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.telemetry import logs, stamps, tracing
from broker.telemetry import instrument_celery, uninstrument_celery
from workers.telemetry import TaskRecorder


@pytest.fixture
def recorder() -> Iterator[TaskRecorder]:
    recorder = TaskRecorder()
    recorder.install()
    yield recorder
    signals.task_prerun.disconnect(dispatch_uid="antwort.prerun")
    signals.task_postrun.disconnect(dispatch_uid="antwort.postrun")


_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on, as ``tracing.setup`` turns it on, into memory (one provider a process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    monkeypatch.setattr(tracing, "_enabled", True)
    instrument_celery()
    _EXPORTER.clear()
    yield _EXPORTER
    uninstrument_celery()


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_two_runs_of_one_task_id_each_close_their_own_record(
    recorder: TaskRecorder,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
    traced: bool,
) -> None:
    exported = request.getfixturevalue("spans") if traced else None
    celery = Celery("telemetry-test", set_as_current=False)
    entered = {"first": threading.Event(), "second": threading.Event()}
    leave = {"first": threading.Event(), "second": threading.Event()}
    inside: dict[str, str] = {}
    after: dict[str, tuple[str, dict[str, object]]] = {}
    current: dict[str, bool] = {}

    @celery.task(name="antwort.test_task", shared=False)
    def task(which: str) -> str:
        inside[which] = stamps.current_json()
        entered[which].set()
        assert leave[which].wait(10)
        return "ok"

    def run(which: str) -> None:
        task.apply(args=(which,), task_id="same-task-id")
        after[which] = (stamps.current_json(), logs.context())
        current[which] = trace.get_current_span().get_span_context().is_valid

    threads = {which: threading.Thread(target=run, args=(which,)) for which in entered}
    caplog.set_level(logging.INFO)
    threads["first"].start()
    assert entered["first"].wait(10)
    threads["second"].start()  # the redelivery, while the first run still holds its thread
    assert entered["second"].wait(10)
    leave["first"].set()  # the first run ends first
    threads["first"].join(10)
    leave["second"].set()
    threads["second"].join(10)

    assert all(inside[which] for which in entered)  # each run had its stamp
    assert after == {"first": ("", {}), "second": ("", {})}  # and each put its context back
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert problems == []
    ended = [r for r in caplog.records if r.name == "antwort.task"]
    assert [r.outcome for r in ended] == ["ok", "ok"]  # type: ignore[attr-defined]
    assert current == {"first": False, "second": False}  # no span left current in the thread
    if exported is not None:  # each run's span ended, in its order, and none other
        runs: tuple[ReadableSpan, ...] = exported.get_finished_spans()
        assert [span.name for span in runs] == ["run/antwort.test_task"] * 2
        first, second = runs
        assert first.start_time < second.start_time and first.end_time < second.end_time
        assert first.context.span_id != second.context.span_id


PARENT = trace.SpanContext(
    trace_id=0x0AF7651916CD43DD8448EB211C80319C,
    span_id=0xB7AD6B7169203331,
    is_remote=True,
    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
)
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class SpanOfLines(logging.Handler):
    """The span current as each line was logged (the JSON lines carry its trace id)."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[trace.SpanContext] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.spans.append(trace.get_current_span().get_span_context())


def test_a_task_runs_in_a_span_under_the_trace_its_message_carries(
    recorder: TaskRecorder, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker's request has a message's headers as attributes (protocol 2); the run's span is
    the child of the one that sent it, its log line in it, and a failure marks it."""
    celery = Celery("telemetry-test", set_as_current=False)
    seen: list[trace.SpanContext] = []

    @celery.task(name="antwort.test_task", shared=False)
    def task(outcome: str) -> str:
        seen.append(trace.get_current_span().get_span_context())
        if outcome == "fail":
            raise RuntimeError("the tool broke")
        if outcome == "retry":
            raise Retry("again later")
        return "ok"

    run = build_tracer(task.name, task, eager=True, propagate=False, app=celery)
    caplog.set_level(logging.INFO)
    lines = SpanOfLines()
    logging.getLogger("antwort.task").addHandler(lines)
    try:
        for task_id in ("ok", "fail", "retry"):
            request = {
                "id": task_id,
                "traceparent": TRACEPARENT,
                "delivery_info": {"routing_key": "q"},
            }
            run(task_id, (task_id,), {}, request)
    finally:
        logging.getLogger("antwort.task").removeHandler(lines)

    ok, failed, retried = spans.get_finished_spans()
    for span, context, line in zip((ok, failed, retried), seen, lines.spans, strict=True):
        assert span.name == "run/antwort.test_task" and span.kind == trace.SpanKind.CONSUMER
        assert span.parent == PARENT and span.context == context == line  # current while it ran
        assert span.attributes is not None and span.attributes["messaging.destination.name"] == "q"
    assert ok.status.status_code == retried.status.status_code == trace.StatusCode.UNSET
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert [e.attributes["exception.message"] for e in failed.events] == ["the tool broke"]  # type: ignore[index]
    assert failed.attributes is not None and failed.attributes["celery.state"] == "FAILURE"
    assert not trace.get_current_span().get_span_context().is_valid
    ended = [r for r in caplog.records if r.name == "antwort.task"]
    assert [r.outcome for r in ended] == ["ok", "failure", "retry"]  # type: ignore[attr-defined]
