"""One tool call: the unit of work of the ``tools.<kind>`` queues.

A call's result is stored under ``(response_id, call_id)`` before the task is acknowledged; a
redelivered task whose result is stored returns at once, so no tool runs twice for one call.
A delivery that arrives while another one still runs the call (Celery requeued it after a pool
child died, or the sweeper dispatched it again) finds that delivery's claim in Redis and waits
for its result instead of running the tool a second time; the claim lapses with the tool's
deadline, so a claim whose holder died blocks the call no longer than the call could have run.
The call runs in a helper thread under a deadline; the task watches the response meanwhile and
abandons the call when the response is cancelled.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass

from app.config import Settings
from app.conversation import history_of
from app.errors import AppError
from app.protocol.response import ACTIVE_STATUSES
from app.store import RedeliveredTooOftenError, ResponseStore, StoredResponse
from app.tools import presenters
from app.tools.base import (
    ExecutorRegistry,
    SubmittingExecutor,
    ToolCall,
    ToolDefinition,
    ToolResult,
    cap_output,
)
from app.tools.catalog import definitions
from app.tools.internal import Registry

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.1
CLAIM_GRACE_SECONDS = 5.0
"""A claim outlives the tool's deadline by this much (storing the result, clock skew)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDeps:
    """The collaborators of a tool worker process."""

    store: ResponseStore
    executors: ExecutorRegistry
    settings: Settings
    internal_tools: Registry | None = None
    """The internal tools behind the executors, shut down when the worker stops."""


def run_tool_call(
    deps: ToolDeps, response_id: str, call_id: str, *, delivery: str | None = None
) -> str:
    """Execute one call of a response and store its result; returns what happened.

    ``delivery`` names the task delivery to count against ``max_task_deliveries`` (the count
    rides on the first round trip). ``"busy"``: another delivery kept the call claimed longer
    than one claim can last (it was claimed again meanwhile); the caller should requeue this
    delivery.

    Raises:
        RedeliveredTooOftenError: this call was delivered more often than allowed.
    """
    store = deps.store
    default_ttl = deps.settings.tool_timeout_seconds + CLAIM_GRACE_SECONDS
    for attempt in range(2):  # a claim whose holder died lapses once; then this one takes over
        token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        # One round trip: count the delivery, look for a stored result, read the record, and
        # claim the call (for the default deadline; a tool with its own is adjusted below).
        opened = store.open_tool_call(
            response_id,
            call_id,
            delivery=None if attempt else delivery,
            token=token,
            claim_seconds=default_ttl,
        )
        claimed = opened.claim == "claimed"
        if opened.deliveries > deps.settings.max_task_deliveries:
            if claimed:
                store.release_tool_claim(response_id, call_id, token=token)
            raise RedeliveredTooOftenError(opened.deliveries)
        if opened.claim == "stored":
            return "stored"
        found = _find_call(store, opened.stored, call_id)
        if found is None:
            if claimed:
                store.release_tool_claim(response_id, call_id, token=token)
            return "skipped"
        call, tool = found
        ttl = _timeout(deps, tool) + CLAIM_GRACE_SECONDS
        if claimed:
            if ttl != default_ttl:
                store.extend_tool_claim(response_id, call_id, token=token, ttl_seconds=ttl)
            return _run_claimed(deps, response_id, call, tool, token=token)
        outcome = _await_other_delivery(store, response_id, call_id, within=ttl + 1.0)
        if outcome is not None:
            return outcome
    return "busy"


def _find_call(
    store: ResponseStore, stored: StoredResponse | None, call_id: str
) -> tuple[ToolCall, ToolDefinition | None] | None:
    """The call and its tool, or None when the response or the call is gone or inactive."""
    if stored is None or stored.response.status not in ACTIVE_STATUSES:
        return None
    found = presenters.find_call(stored.response.output, call_id)
    if found is None:
        return None
    presenter = presenters.for_item(found[1])
    assert presenter is not None
    call = presenter.call_of(found[1])
    return call, _definition(store, stored, call.name)


def _definition(store: ResponseStore, stored: StoredResponse, name: str) -> ToolDefinition | None:
    """The called tool; MCP tools listed earlier in the chain need the chain to be found."""
    response, sealed = stored.response, stored.extra.get("mcp_sealed")
    tool = definitions(response.tools, response.output, sealed=sealed).get(name)
    if tool is not None or (
        response.previous_response_id is None and "context" not in stored.extra
    ):
        return tool
    try:
        history = history_of(store, stored)
    except AppError:
        return None
    return definitions(response.tools, [*history, *response.output], sealed=sealed).get(name)


def _timeout(deps: ToolDeps, tool: ToolDefinition | None) -> float:
    timeout = tool.timeout_seconds if tool is not None else None
    return timeout or deps.settings.tool_timeout_seconds


def _await_other_delivery(
    store: ResponseStore, response_id: str, call_id: str, *, within: float
) -> str | None:
    """Wait while another delivery holds the call's claim.

    Returns ``"stored"`` when its result arrives, ``"cancelled"`` when the response stops,
    None when the claim lapsed without a result (its holder died), ``"busy"`` after ``within``.
    """
    logger.info("call %s of %s is running elsewhere; waiting for its result", call_id, response_id)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if store.has_tool_result(response_id, call_id):
            return "stored"
        if store.status(response_id) not in ACTIVE_STATUSES:
            return "cancelled"
        if not store.is_tool_call_claimed(response_id, call_id):
            # released just now with its result, or lapsed because its holder died
            return "stored" if store.has_tool_result(response_id, call_id) else None
        time.sleep(_POLL_SECONDS)
    return "busy"


def _run_claimed(
    deps: ToolDeps, response_id: str, call: ToolCall, tool: ToolDefinition | None, *, token: str
) -> str:
    """Run a call this delivery holds the claim of, store its result, give the claim back."""
    store = deps.store
    try:
        result = _execute(deps, response_id, call, tool)
    except BaseException:
        store.release_tool_claim(response_id, call.id, token=token)
        raise
    if result is None:
        store.release_tool_claim(response_id, call.id, token=token)
        return "cancelled"
    result = ToolResult(
        call_id=call.id,
        output=cap_output(result.output, deps.settings.tool_output_max_chars),
        is_error=result.is_error,
        data=result.data,
    )
    if not store.finish_tool_call(response_id, call.id, result.to_json(), token=token):
        return "cancelled"  # a result that arrives after a cancel is discarded
    return "error" if result.is_error else "ok"


def _execute(
    deps: ToolDeps, response_id: str, call: ToolCall, tool: ToolDefinition | None
) -> ToolResult | None:
    if tool is None:
        return ToolResult(call_id=call.id, output=f"Unknown tool '{call.name}'.", is_error=True)
    executor = deps.executors.for_tool(tool)
    if executor is None:
        message = f"No executor for {tool.kind} tool '{tool.name}' on this worker."
        return ToolResult(call_id=call.id, output=message, is_error=True)
    timeout = _timeout(deps, tool)

    def run() -> ToolResult:
        try:
            return executor.execute(call, tool)
        except Exception as exc:  # a failing tool is data for the model
            logger.warning("tool %s raised", tool.name, exc_info=True)
            return ToolResult(call_id=call.id, output=f"Error: {exc}", is_error=True)

    if isinstance(executor, SubmittingExecutor):
        future = executor.submit(call, tool)
    else:
        future = _RUNNERS.submit(run)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return future.result(timeout=_POLL_SECONDS)
        except FutureTimeoutError:
            pass
        except CancelledError:
            return ToolResult(
                call_id=call.id, output="Error: the call was cancelled.", is_error=True
            )
        if deps.store.status(response_id) not in ACTIVE_STATUSES:
            future.cancel()
            return None
        if time.monotonic() > deadline and not future.done():
            future.cancel()
            return ToolResult(
                call_id=call.id,
                output=f"Error: tool '{tool.name}' timed out after {timeout:g} s.",
                is_error=True,
            )


class _Runners:
    """Daemon threads that run tool calls, reused from call to call.

    A call runs beside its task so the task can watch the response (a cancel) and the deadline.
    Starting a thread per call cost a busy worker several milliseconds (the new thread has to win
    the GIL before ``start()`` returns); an idle runner is handed the call through a queue instead.
    A runner exists for each call running at once and leaves after ``idle_seconds`` without work;
    one stuck in a tool past its deadline is simply not idle, and being a daemon it never holds up
    the worker's exit.
    """

    def __init__(self, idle_seconds: float = 60.0):
        self._jobs: queue.SimpleQueue[tuple[Callable[[], ToolResult], Future[ToolResult]]] = (
            queue.SimpleQueue()
        )
        self._idle = 0
        self._lock = threading.Lock()
        self._idle_seconds = idle_seconds

    def submit(self, fn: Callable[[], ToolResult]) -> Future[ToolResult]:
        future: Future[ToolResult] = Future()
        with self._lock:
            if self._idle:
                self._idle -= 1  # that runner is this job's
            else:
                threading.Thread(target=self._run, name="tool-runner", daemon=True).start()
        self._jobs.put((fn, future))
        return future

    def _run(self) -> None:
        while True:
            try:
                fn, future = self._jobs.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self._idle:  # nobody counted on this runner: leave
                        self._idle -= 1
                        return
                continue  # a job is on its way to this runner
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # fn turns exceptions into results; not these
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1


_RUNNERS = _Runners()
