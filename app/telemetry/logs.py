"""Structured logs: JSON lines (``ANTWORT_LOG_FORMAT=json``) with the work's context.

A task or a request binds what it works on (:func:`bind`: ``response_id``, ``turn``,
``call_id``) for the thread or greenlet running it; every line logged meanwhile carries those
fields, and the ``trace_id`` of the current OpenTelemetry span when tracing is on. Lines carry
the message as logged: the code logs ids and outcomes, never request bodies, model or tool
payloads or keys (STYLE.md, rule 28).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import trace

_CONTEXT: ContextVar[dict[str, Any] | None] = ContextVar("antwort_log_context", default=None)
_FIELDS = ("response_id", "turn", "call_id")
_EXTRA = ("task", "queue", "outcome", "duration_ms", "method", "route", "status")
"""Fields a log call may pass with ``extra=`` that the JSON line keeps."""


@contextmanager
def bind(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every line logged inside the block (by this thread or greenlet)."""
    token = push(fields)
    try:
        yield
    finally:
        pop(token)


def push(fields: dict[str, Any]) -> Token[dict[str, Any] | None]:
    """Add ``fields`` until :func:`pop` (for hooks that open and close in two calls)."""
    return _CONTEXT.set({**(_CONTEXT.get() or {}), **fields})


def pop(token: Token[dict[str, Any] | None]) -> None:
    """Take back what :func:`push` added."""
    _CONTEXT.reset(token)


def context() -> dict[str, Any]:
    """The fields bound now."""
    return dict(_CONTEXT.get() or {})


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the bound fields, trace_id."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(context())
        for name in _EXTRA:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            line["trace_id"] = f"{span.trace_id:032x}"
            line["span_id"] = f"{span.span_id:016x}"
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(log_format: str, level: str | int = logging.INFO) -> None:
    """Log to stderr as ``log_format`` says (``json`` or ``text``), replacing root's handlers."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("[%(asctime)s: %(levelname)s/%(name)s] %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.captureWarnings(True)  # a library's warning is a line like the others


def gunicorn_config(log_format: str, level: str = "info") -> dict[str, Any] | None:
    """Gunicorn's ``logconfig_dict`` for ``log_format`` at ``level``; None: gunicorn's own.

    Gunicorn's own is plain text at its ``loglevel``; a ``logconfig_dict`` sets the levels itself.
    """
    if log_format != "json":
        return None
    level = level.upper()
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {"console": handler},
        "loggers": {
            name: {"level": level, "handlers": ["console"], "propagate": False}
            for name in ("gunicorn.error", "gunicorn.access")
        },
        "root": {"level": level, "handlers": ["console"]},
    }
