"""The gateway's request span: the root of a response's trace (when tracing is on).

A small pair of Flask hooks rather than opentelemetry-instrumentation-flask, which has no
release for the OpenTelemetry API this tree pins. A caller's own ``traceparent`` is honoured:
the request's span becomes its child.
"""

from __future__ import annotations

from flask import Flask, Response, g, request
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from app.telemetry import tracing


def register(app: Flask) -> None:
    """Open a server span per request when this process traces."""
    if not tracing.is_enabled():
        return

    @app.before_request
    def _open() -> None:
        route = request.url_rule.rule if request.url_rule else "unmatched"
        parent = propagate.extract(dict(request.headers))
        span = tracing.TRACER.start_span(
            f"{request.method} {route}",
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": request.method, "http.route": route},
        )
        g.antwort_span = span
        g.antwort_span_token = otel_context.attach(trace.set_span_in_context(span, parent))

    @app.after_request
    def _status(response: Response) -> Response:
        span = g.get("antwort_span")
        if span is not None:
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                span.set_status(trace.StatusCode.ERROR)
        return response

    @app.teardown_request
    def _close(_: BaseException | None) -> None:
        span = g.pop("antwort_span", None)
        token = g.pop("antwort_span_token", None)
        if token is not None:
            otel_context.detach(token)
        if span is not None:
            span.end()
