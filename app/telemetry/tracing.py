"""OpenTelemetry traces: one trace per response, gateway → turns → tools.

Off unless the standard environment asks for it (``OTEL_TRACES_EXPORTER`` = ``otlp`` or
``console``, or an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``; ``OTEL_TRACES_EXPORTER=none`` keeps
it off): then :func:`setup` installs the SDK's tracer provider with a batching exporter (OTLP
over HTTP/protobuf, the SDK reading the other ``OTEL_*`` variables itself). Off, :func:`span`
is a shared null context: a flag test per span, nothing else.

The context travels as W3C ``traceparent``: in the Celery task headers (:mod:`broker.publish`
for our sends, :func:`broker.telemetry.instrument_celery` for Celery's own) and with the response
(:func:`carrier`, stored in its ``extra`` at create), so a turn the sweeper queues again joins
the response's trace (:func:`resumed`). A worker runs each task in a span under the context its
message carried (:func:`enter`, from :class:`workers.telemetry.TaskRecorder`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Status, StatusCode

TRACER = trace.get_tracer("antwort")
_NULL: AbstractContextManager[None] = contextlib.nullcontext()
_enabled = False


def is_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for traces."""
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return exporter in ("otlp", "console") or bool(endpoint)


def setup(service: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Install the tracer provider if the environment asks for traces; whether it did."""
    global _enabled
    if not is_requested(environ):
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    exporter: SpanExporter
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    name = environ.get("OTEL_SERVICE_NAME") or service
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _enabled = True
    return True


def shutdown() -> None:
    """Export what is buffered (a process that stops)."""
    provider = trace.get_tracer_provider()
    stop = getattr(provider, "shutdown", None)
    if _enabled and stop is not None:
        stop()


def is_enabled() -> bool:
    """Whether this process records spans."""
    return _enabled


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
) -> AbstractContextManager[Any]:
    """A span under the current one (a null context when tracing is off)."""
    if not _enabled:
        return _NULL
    return TRACER.start_as_current_span(name, kind=kind, attributes=dict(attributes or {}))


def annotate(attributes: Mapping[str, Any]) -> None:
    """Set attributes on the current span (nothing when tracing is off)."""
    if _enabled:
        trace.get_current_span().set_attributes(attributes)


def carrier() -> dict[str, str]:
    """The current context as W3C headers (empty when tracing is off or no span is current)."""
    headers: dict[str, str] = {}
    if _enabled:
        propagate.inject(headers)
    return headers


@contextlib.contextmanager
def resumed(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Make the context ``headers`` carry current (a stored response's), if any."""
    if not _enabled or not headers:
        yield
        return
    token = otel_context.attach(propagate.extract(dict(headers)))
    try:
        yield
    finally:
        otel_context.detach(token)


@dataclass(frozen=True, slots=True)
class Entered:
    """A span made current by :func:`enter`; :meth:`leave` ends it and puts the context back."""

    span: trace.Span
    token: object

    def leave(self, error: BaseException | None = None) -> None:
        """End the span (marked failed by ``error``, if any) and detach its context."""
        if error is not None:
            self.span.record_exception(error)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        otel_context.detach(self.token)  # type: ignore[arg-type]
        self.span.end()


def enter(
    name: str,
    lookup: Callable[[str], object],
    attributes: Mapping[str, Any],
    *,
    kind: trace.SpanKind = trace.SpanKind.CONSUMER,
) -> Entered | None:
    """A span under the context ``lookup`` (a message's headers) carries, current till it leaves.

    None when tracing is off. The caller keeps what this returns in its own context, not by a
    message's id: one message may run twice at once in one process, each run ending its own span.
    """
    if not _enabled:
        return None
    headers = {
        field: value
        for field in propagate.get_global_textmap().fields
        if isinstance(value := lookup(field), str)
    }
    parent = propagate.extract(headers)
    span = TRACER.start_span(name, context=parent, kind=kind, attributes=dict(attributes))
    return Entered(span, otel_context.attach(trace.set_span_in_context(span, parent)))
