"""One tool call: the unit of work of the ``tools.<kind>`` queues.

A call's result is stored under ``(response_id, call_id)`` before the task is acknowledged; a
redelivered task whose result is stored returns at once, so no tool runs twice for one call.
A delivery that arrives while another one still runs the call (Celery requeued it after a pool
child died, or the sweeper dispatched it again) finds that delivery's claim in Redis and waits
for its result instead of running the tool a second time. A claim lasts ``claim_seconds``
(1.5 s) and the task running the call renews it every third of that, in the round trip in which
it looks at the response's status anyway, so a claim whose holder died lapses within a second
or two: the sweeper then sends the response's turn round
again, which dispatches the call anew (``app.lease.sweep``), and the next delivery takes it
over. Each claim taken counts as a start of the call; past ``max_task_deliveries`` starts the
response fails (a call that kills its worker). Every call gets an idempotency key, the same
for all its runs (:func:`app.tools.base.idempotency_key`), so a tool can tell a re-run.
The call runs in a helper thread under a deadline; the task watches the response meanwhile and
abandons the call when the response is cancelled. That thread is a reused runner
(:class:`_Runners`) unless ``ANTWORT_TOOL_RUNNER_POOL=false``, which starts a new one per call.
"""

from __future__ import annotations

import contextvars
import dataclasses
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
from enum import StrEnum

from redis import RedisError

from app.config import Settings
from app.conversation import history_of
from app.dispatch import Dispatcher, QueueUnavailableError
from app.errors import AppError
from app.protocol.response import ACTIVE_STATUSES
from app.refusals import described
from app.store import RedeliveredTooOftenError, ResponseStore, StoredResponse
from app.telemetry import metrics, tracing
from app.tool_share import TOOL_SHARE_EXTRA, ToolShare
from app.tools.base import (
    ExecutorRegistry,
    SubmittingExecutor,
    ToolCall,
    ToolDefinition,
    ToolResult,
    cap_output,
    idempotency_key,
)
from app.tools.internal import Registry
from app.tools.kinds import ToolKinds
from app.tools.registry import KINDS

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.1
CLAIM_GRACE_SECONDS = 5.0
"""How much longer than the tool's deadline a waiting delivery waits for the claim's holder
(storing the result, clock skew)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDeps:
    """The collaborators of a tool worker process."""

    store: ResponseStore
    executors: ExecutorRegistry
    settings: Settings
    internal_tools: Registry | None = None
    """The internal tools behind the executors, shut down when the worker stops."""
    kinds: ToolKinds = KINDS
    """The tool kinds: how a call's item is read, and which tool it calls."""
    dispatcher: Dispatcher | None = None
    """Queues again the turns of responses parked for a place on a tool queue
    (:mod:`app.tool_share`); None: the sweeper does, on its next look."""


class CallOutcome(StrEnum):
    """What :func:`run_tool_call` did (the task's result)."""

    OK = "ok"
    """The call ran and its result is stored."""
    ERROR = "error"
    """The call ran and failed; its ``is_error`` result is stored (the model sees it)."""
    STORED = "stored"
    """The result was stored already (a redelivery, or another delivery ran it meanwhile)."""
    SKIPPED = "skipped"
    """Nothing to do: the response or the call is gone or no longer active."""
    CANCELLED = "cancelled"
    """The response stopped while the call ran; its result, if any, was discarded."""
    BUSY = "busy"
    """Another delivery holds the call longer than a claim lasts: requeue this one."""


def run_tool_call(
    deps: ToolDeps, response_id: str, call_id: str, *, counts_start: bool = False
) -> CallOutcome:
    """Execute one call of a response and store its result; returns what happened.

    ``counts_start``: a claim this delivery takes counts as a start of the call against
    ``max_task_deliveries`` (per response and call, however the call was delivered).

    Raises:
        RedeliveredTooOftenError: this call was started more often than allowed.
    """
    store = deps.store
    claim_seconds = deps.settings.claim_seconds
    for _ in range(2):  # a claim whose holder died lapses once; then this one takes over
        token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        # One round trip: look for a stored result, read the record, claim the call (renewed
        # while it runs) and count the start.
        opened = store.open_tool_call(
            response_id,
            call_id,
            counts_start=counts_start,
            token=token,
            claim_seconds=claim_seconds,
        )
        claimed = opened.claim == "claimed"
        if opened.starts > deps.settings.max_task_deliveries:
            store.release_tool_claim(response_id, call_id, token=token)
            raise RedeliveredTooOftenError(opened.starts)
        if opened.claim == "stored":
            return CallOutcome.STORED
        found = _find_call(deps, opened.stored, call_id)
        if found is None:
            if claimed:
                store.release_tool_claim(response_id, call_id, token=token)
            return CallOutcome.SKIPPED
        call, tool = found
        call = dataclasses.replace(call, idempotency_key=idempotency_key(response_id, call.id))
        if claimed:
            ran = _run_claimed(deps, response_id, call, tool, token=token)
            _give_place_back(deps, opened.stored, call_id, tool)
            return ran
        within = _timeout(deps, tool) + CLAIM_GRACE_SECONDS
        outcome = _await_other_delivery(store, response_id, call_id, within=within)
        if outcome is not None:
            return outcome
    return CallOutcome.BUSY


def _give_place_back(
    deps: ToolDeps, stored: StoredResponse | None, call_id: str, tool: ToolDefinition | None
) -> None:
    """The call ran: its place in its tenant's share of the queue goes to who waits for one.

    Only a response created with the tool share on holds one (:mod:`app.tool_share`). A worker
    without a dispatcher leaves it to the sweeper's next look.
    """
    if stored is None or stored.extra.get(TOOL_SHARE_EXTRA) is None or tool is None:
        return
    queue = deps.kinds.queue_of(tool)
    if queue is None or deps.dispatcher is None:
        return
    try:
        ToolShare(deps.store).end(deps.dispatcher, stored.owner, queue, stored.response.id, call_id)
    except (RedisError, QueueUnavailableError) as exc:  # its result is stored: the call is done
        logger.warning(
            "call %s of %s could not give its place back (the sweeper will): %s",
            call_id,
            stored.response.id,
            described(exc),
        )


def _find_call(
    deps: ToolDeps, stored: StoredResponse | None, call_id: str
) -> tuple[ToolCall, ToolDefinition | None] | None:
    """The call and its tool, or None when the response or the call is gone or inactive."""
    if stored is None or stored.response.status not in ACTIVE_STATUSES:
        return None
    found = deps.kinds.presenters.find_call(stored.response.output, call_id)
    if found is None:
        return None
    call = deps.kinds.presenters.call_of(found[1])
    return call, _definition(deps, stored, call.name)


def _definition(deps: ToolDeps, stored: StoredResponse, name: str) -> ToolDefinition | None:
    """The called tool; tools listed earlier in the chain (MCP's) need the chain to be found."""
    response, kinds = stored.response, deps.kinds
    tool = kinds.definitions(response.tools, response.output, extra=stored.extra).get(name)
    if tool is not None or (
        response.previous_response_id is None
        and stored.history is None
        and "context" not in stored.extra
    ):
        return tool
    try:
        history = history_of(deps.store, stored)
    except AppError:
        return None
    chain = [*history, *response.output]
    return kinds.definitions(response.tools, chain, extra=stored.extra).get(name)


def _timeout(deps: ToolDeps, tool: ToolDefinition | None) -> float:
    timeout = tool.timeout_seconds if tool is not None else None
    return timeout or deps.settings.tool_timeout_seconds


def _await_other_delivery(
    store: ResponseStore, response_id: str, call_id: str, *, within: float
) -> CallOutcome | None:
    """Wait while another delivery holds the call's claim.

    Returns ``STORED`` when its result arrives, ``CANCELLED`` when the response stops, None
    when the claim lapsed without a result (its holder died), ``BUSY`` after ``within``.
    """
    logger.info("call %s of %s is running elsewhere; waiting for its result", call_id, response_id)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if store.has_tool_result(response_id, call_id):
            return CallOutcome.STORED
        if store.status(response_id) not in ACTIVE_STATUSES:
            return CallOutcome.CANCELLED
        if not store.is_tool_call_claimed(response_id, call_id):
            # released just now with its result, or lapsed because its holder died
            return CallOutcome.STORED if store.has_tool_result(response_id, call_id) else None
        time.sleep(_POLL_SECONDS)
    return CallOutcome.BUSY


def _run_claimed(
    deps: ToolDeps, response_id: str, call: ToolCall, tool: ToolDefinition | None, *, token: str
) -> CallOutcome:
    """Run a call this delivery holds the claim of, store its result, give the claim back."""
    started = time.perf_counter()
    kind, name = (tool.kind, tool.name) if tool is not None else ("unknown", "unknown")
    with tracing.span(
        f"execute_tool {name}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call.id,
            "antwort.tool.kind": kind,
        },
    ):
        outcome = _store_run(deps, response_id, call, tool, token=token)
        tracing.annotate({"antwort.tool.outcome": outcome.value})
    label = metrics.tool_name_label(name)
    metrics.TOOL_CALLS.labels(kind, label, outcome.value).inc()
    metrics.TOOL_CALL_SECONDS.labels(kind, label, outcome.value).observe(
        time.perf_counter() - started
    )
    if outcome is CallOutcome.ERROR:
        deps.store.record_failure(f"tool.{kind}", name)
    elif outcome is CallOutcome.CANCELLED:
        metrics.observe_cancel("tool", deps.store.cancelled_since(response_id))
    return outcome


def _store_run(
    deps: ToolDeps, response_id: str, call: ToolCall, tool: ToolDefinition | None, *, token: str
) -> CallOutcome:
    store = deps.store
    try:
        result = _execute(deps, response_id, call, tool, token=token)
    except BaseException:
        store.release_tool_claim(response_id, call.id, token=token)
        raise
    if result is None:
        store.release_tool_claim(response_id, call.id, token=token)
        return CallOutcome.CANCELLED
    result = ToolResult(
        call_id=call.id,
        output=cap_output(result.output, deps.settings.tool_output_max_chars),
        is_error=result.is_error,
        data=result.data,
    )
    if not store.finish_tool_call(response_id, call.id, result.to_json(), token=token):
        return CallOutcome.CANCELLED  # a result that arrives after a cancel is discarded
    return CallOutcome.ERROR if result.is_error else CallOutcome.OK


def _execute(
    deps: ToolDeps, response_id: str, call: ToolCall, tool: ToolDefinition | None, *, token: str
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
    else:  # the runner thread carries on the task's context (its span, its log fields)
        context = contextvars.copy_context()

        def run_here() -> ToolResult:
            return context.run(run)

        future = (_RUNNERS.submit if deps.settings.tool_runner_pool else _start_thread)(run_here)
    deadline = time.monotonic() + timeout
    renewal = _ClaimRenewal(deps, response_id, call.id, token=token)
    while True:
        try:
            return future.result(timeout=_POLL_SECONDS)
        except FutureTimeoutError:
            pass
        except CancelledError:
            return ToolResult(
                call_id=call.id, output="Error: the call was cancelled.", is_error=True
            )
        if renewal.status() not in ACTIVE_STATUSES:
            future.cancel()
            return None
        if time.monotonic() > deadline and not future.done():
            future.cancel()
            return ToolResult(
                call_id=call.id,
                output=f"Error: tool '{tool.name}' timed out after {timeout:g} s.",
                is_error=True,
            )


class _ClaimRenewal:
    """Looks at the response for a running call, renewing its claim every third of a claim."""

    def __init__(self, deps: ToolDeps, response_id: str, call_id: str, *, token: str):
        self._store = deps.store
        self._claim = deps.settings.claim_seconds
        self._response_id = response_id
        self._call_id = call_id
        self._token = token
        self._due = time.monotonic() + self._claim / 3

    def status(self) -> str | None:
        """The response's status; the claim is renewed in the same round trip when due."""
        if time.monotonic() < self._due:
            return self._store.status(self._response_id)
        self._due = time.monotonic() + self._claim / 3
        status, renewed = self._store.status_renewing_claim(
            self._response_id, self._call_id, token=self._token, ttl_seconds=self._claim
        )
        if not renewed:
            # Lapsed (this process stalled past a claim): another delivery may run it now; the
            # first result stored wins, the other is dropped (finish_tool_call.lua).
            logger.warning("the claim on call %s of %s lapsed", self._call_id, self._response_id)
        return status


def _start_thread(fn: Callable[[], ToolResult]) -> Future[ToolResult]:
    """Run ``fn`` on a new daemon thread (``ANTWORT_TOOL_RUNNER_POOL=false``)."""
    future: Future[ToolResult] = Future()
    threading.Thread(target=_fulfil, args=(fn, future), name="tool-call", daemon=True).start()
    return future


def _fulfil(fn: Callable[[], ToolResult], future: Future[ToolResult]) -> None:
    if future.set_running_or_notify_cancel():
        try:
            future.set_result(fn())
        except BaseException as exc:  # fn turns exceptions into results; not these
            future.set_exception(exc)


class _Runners:
    """Daemon threads that run tool calls, reused from call to call (``ANTWORT_TOOL_RUNNER_POOL``).

    A call runs beside its task so the task can watch the response (a cancel) and the deadline.
    Measured gain: starting a thread per call (:func:`_start_thread`, the setting off) cost a busy
    worker several milliseconds per call, as the new thread had to win the GIL before ``start()``
    returned (README, agentic benchmark, "what made the tool round cheaper"); an idle runner is
    handed the call through a queue instead. A runner exists for each call running at once and
    leaves after ``idle_seconds`` without work; one stuck in a tool past its deadline is simply
    not idle, and being a daemon it never holds up the worker's exit.
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
            _fulfil(fn, future)
            with self._lock:
                self._idle += 1


_RUNNERS = _Runners()
