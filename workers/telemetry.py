"""A worker's observability: its metrics port, and one timed, logged record per task.

Celery's task signals mark each task's start and end, so the tasks stay thin: the start
observes the queue wait (from the ``antwort_sent_at`` header, :mod:`broker.telemetry`) and
redeliveries, binds the task's ids to the log context and, when tracing is on, starts the task's
span under the trace its message carries; the end observes the task's duration by outcome, logs
one line with both (in the task's span) and ends the span.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from contextvars import ContextVar, Token
from typing import Any

from celery import Task, signals, states
from prometheus_client import start_http_server

from app.config import Settings
from app.store import ResponseStore
from app.telemetry import logs, stamps, tracing
from app.telemetry import metrics as m
from broker import telemetry
from broker.routing import RUN_TOOL_CALL, RUN_TURN
from broker.telemetry import SENT_AT

logger = logging.getLogger("antwort.task")

_StampToken = Token[stamps.TaskStamp | None]
_Running = tuple[float, Token[dict[str, Any] | None], _StampToken, tracing.Entered | None]

_RUNNING: ContextVar[_Running | None] = ContextVar("antwort_task_running", default=None)
"""The task this context runs: when it started, the tokens that undo its context, its span.

Kept in the context, not by task id: Celery may hand a message out again to the worker still
running it (after the broker connection dropped), and both runs then share one id.
"""

_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


class MetricsServer:
    """One process's Prometheus endpoint; its URL registered in Redis for ``antwort status``."""

    def __init__(self, settings: Settings, *, port: int):
        self._server, self._thread = start_http_server(port, addr=settings.metrics_host)
        host = settings.metrics_host
        if host in _WILDCARD_HOSTS:
            host = socket.gethostname()
        self.url = f"http://{host}:{self._server.server_port}/metrics"

    def register(self, store: ResponseStore, process: str) -> None:
        """Say where this process's metrics are (``process``: hostname[/pid])."""
        store.register_metrics_url(process, self.url)

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def child_port(settings: Settings, index: int) -> int:
    """The metrics port of a prefork pool's child ``index`` (0 based): base + 1 + index."""
    return settings.metrics_port + 1 + index if settings.metrics_port else 0


def _ids(task: Task, args: tuple[Any, ...]) -> dict[str, Any]:  # type: ignore[type-arg]
    """The log context of a task: what it works on, from its arguments."""
    if task.name == RUN_TURN and len(args) == 2:
        return {"response_id": args[0], "turn": args[1]}
    if task.name == RUN_TOOL_CALL and len(args) == 2:
        return {"response_id": args[0], "call_id": args[1]}
    return {}


class TaskRecorder:
    """Connects to Celery's task signals; one per worker process."""

    def install(self) -> None:
        """Start recording tasks in this process."""
        signals.task_prerun.connect(self.started, weak=False, dispatch_uid="antwort.prerun")
        signals.task_postrun.connect(self.ended, weak=False, dispatch_uid="antwort.postrun")

    def started(
        self,
        task: Task | None = None,  # type: ignore[type-arg]
        args: Any = (),
        **_: Any,
    ) -> None:
        """A task starts: its queue wait, a redelivery, its log context."""
        if task is None:
            return
        request = task.request
        delivery = request.delivery_info or {}
        sent_at = request.get(SENT_AT)
        queue = str(delivery.get("routing_key") or "unknown")
        now = telemetry.now()  # the clock the send was stamped by (the fleet's)
        if isinstance(sent_at, int | float):
            m.QUEUE_WAIT_SECONDS.labels(queue).observe(max(0.0, now - sent_at))
        if delivery.get("redelivered"):
            m.TASK_REDELIVERIES.labels(task.name).inc()
        token = logs.push({"task": task.name, **_ids(task, tuple(args or ()))})
        stamp = stamps.push(
            stamps.TaskStamp(
                worker=str(request.hostname or socket.gethostname()),
                queue=queue,
                sent_at=float(sent_at) if isinstance(sent_at, int | float) else None,
                started_at=now,
            )
        )
        span = tracing.enter(
            f"run/{task.name}",
            request.get,  # protocol 2 headers are the request's attributes
            {
                "messaging.system": "celery",
                "messaging.operation.type": "process",
                "messaging.message.id": str(request.id),
                "messaging.destination.name": queue,
                "celery.task_name": task.name,
            },
        )
        _RUNNING.set((time.perf_counter(), token, stamp, span))

    def ended(
        self,
        task: Task | None = None,  # type: ignore[type-arg]
        retval: Any = None,
        state: str | None = None,
        **_: Any,
    ) -> None:
        """A task ended: its duration by outcome, and its one log line."""
        running = _RUNNING.get()
        if task is None or running is None:
            return
        _RUNNING.set(None)
        started, token, stamp, span = running
        seconds = time.perf_counter() - started
        outcome = retval if isinstance(retval, str) else str(state or "unknown").lower()
        m.TASK_SECONDS.labels(task.name, outcome).observe(seconds)
        logger.info(
            "task %s %s in %.1f ms",
            task.name,
            outcome,
            seconds * 1000,
            extra={"outcome": outcome, "duration_ms": round(seconds * 1000, 1)},
        )
        if span is not None:  # after the line, which carries its trace id
            span.span.set_attribute("celery.state", str(state))
            failed = state == states.FAILURE and isinstance(retval, BaseException)
            span.leave(retval if failed else None)  # a retry is not a failure
        stamps.pop(stamp)
        logs.pop(token)


def process_name(hostname: str) -> str:
    """How a pool child names itself among its worker's processes."""
    return f"{hostname}/{os.getpid()}"
