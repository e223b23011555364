"""One model turn of a response: the unit of work of the ``inference`` queue.

The driver :func:`run_turn` loads the run, calls the model, plans what follows and finalizes;
each phase is its own function. Every write is a compare-and-set, so a turn that was cancelled,
deleted or already committed elsewhere stops without touching the response.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

from app.config import Settings
from app.conversation import load_history
from app.errors import AppError, ModelBehaviorError, UpstreamError
from app.output import OutputBuilder, TurnOutput
from app.protocol import events as ev
from app.protocol.events import RESPONSE_EVENT_BY_STATUS
from app.protocol.response import (
    ACTIVE_STATUSES,
    IncompleteDetails,
    ResponseError,
    ResponseObject,
    ResponseStatus,
)
from app.lease import LeaseKeeper
from app.providers.chunks import Chunk
from app.replay import ReplayGuard
from app.providers.translate import ModelRequest
from app.sink import EventSink, ResponseInactiveError
from app.store import ResponseStore

logger = logging.getLogger(__name__)


class ModelProvider(Protocol):
    """Streams a model's answer (``ChatCompletionsProvider`` in production, fakes in tests)."""

    def stream(self, request: ModelRequest) -> Iterator[Chunk]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDeps:
    """The collaborators of a run; read-only."""

    store: ResponseStore
    provider: ModelProvider
    settings: Settings
    leases: LeaseKeeper | None = None
    """Holds turn leases while they run; None runs without (unit tests of one process)."""


@dataclass(slots=True, kw_only=True)
class RunState:
    """Everything a turn knows about its response; the one mutable record of a run."""

    response: ResponseObject
    turn: int
    extra: dict[str, Any]
    history: list[dict[str, Any]]
    inputs: list[dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Complete:
    """The model answered: the response is done."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseForClient:
    """The model called client functions: hand them to the client."""

    status: ResponseStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class StopIncomplete:
    """The answer was cut short."""

    reason: str


NextStep = Complete | PauseForClient | StopIncomplete


def run_turn(deps: RunDeps, response_id: str, turn: int) -> str:
    """Run turn ``turn`` of a response; returns the status it left (or ``skipped``)."""
    if deps.leases is not None and not deps.leases.acquire(response_id):
        return "skipped"  # another live run of this response holds the lease
    try:
        state = load_state(deps.store, response_id)
        if state is None or state.response.status not in ACTIVE_STATUSES or state.turn != turn:
            return "skipped"
        return _run_loaded_turn(deps, state)
    finally:
        if deps.leases is not None:
            deps.leases.release(response_id)


def _run_loaded_turn(deps: RunDeps, state: RunState) -> str:
    response_id, turn = state.response.id, state.turn
    start_seq, is_rerun = deps.store.mark_turn_start(response_id, turn)
    guard = (
        ReplayGuard(deps.store.events_after(response_id, start_seq, count=1_000_000))
        if is_rerun
        else None
    )
    sink = EventSink(
        deps.store, response_id, coalesce_seconds=deps.settings.coalesce_ms / 1000, guard=guard
    )
    try:
        start_response(deps.store, state)
        output = call_model(deps, state, sink)
        step = plan_next_step(deps.settings, state, output)
        sink.flush()
        return finalize(deps.store, state, output, step)
    except ResponseInactiveError as stopped:
        logger.info("turn %d of %s stopped: %s", turn, response_id, stopped)
        return "skipped"
    except (UpstreamError, ModelBehaviorError) as exc:
        sink.flush_quietly()
        fail_response(deps.store, response_id, code=exc.code or "server_error", message=exc.message)
        return str(ResponseStatus.FAILED)


def load_state(store: ResponseStore, response_id: str) -> RunState | None:
    """The run as stored, with the chain the model will see; None when gone."""
    stored = store.load(response_id)
    if stored is None:
        return None
    try:
        history = load_history(store, stored.response.previous_response_id)
    except AppError as exc:  # the chain expired while the response waited in the queue
        fail_response(store, response_id, code=exc.code or "not_found", message=exc.message)
        return None
    return RunState(
        response=stored.response,
        turn=stored.turn,
        extra=stored.extra,
        history=history,
        inputs=store.inputs(response_id),
    )


def start_response(store: ResponseStore, state: RunState) -> None:
    """``queued → in_progress`` with ``response.in_progress`` (once, however often redelivered)."""
    if state.response.status != ResponseStatus.QUEUED:
        return
    started = state.response.model_copy(update={"status": ResponseStatus.IN_PROGRESS})
    event = ev.response_event("response.in_progress", started.wire())
    result = store.write(started, expected=frozenset({"queued"}), events=[event])
    if not result.ok and result.status != ResponseStatus.IN_PROGRESS:
        raise ResponseInactiveError(result.status)
    state.response = started


def call_model(deps: RunDeps, state: RunState, sink: EventSink) -> TurnOutput:
    """Stream the model's answer into output items and events."""
    response = state.response
    request = ModelRequest(
        model=response.model,
        instructions=response.instructions,
        items=[*state.history, *state.inputs, *response.output],
        tools=response.tools,
        tool_choice=response.tool_choice,
        parallel_tool_calls=response.parallel_tool_calls,
        params=state.extra.get("params", {}),
    )
    builder = OutputBuilder(
        response_id=response.id,
        turn=state.turn,
        first_output_index=len(response.output),
        sink=sink,
    )
    stream = deps.provider.stream(request)
    try:
        for chunk in stream:
            builder.feed(chunk)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # stops the model server's generation when we stop early
    return builder.close()


def plan_next_step(settings: Settings, state: RunState, output: TurnOutput) -> NextStep:
    """Decide what follows this turn."""
    if output.finish_reason == "length":
        return StopIncomplete(reason="max_output_tokens")
    if output.finish_reason == "content_filter":
        return StopIncomplete(reason="content_filter")
    if output.function_calls:
        return PauseForClient(status=client_tool_status(settings, state.response))
    return Complete()


def client_tool_status(settings: Settings, response: ResponseObject) -> ResponseStatus:
    """The status of a response paused for client calls (``ANTWORT_CLIENT_TOOL_STATUS``)."""
    mode = settings.client_tool_status
    if mode == "requires_action":
        return ResponseStatus.REQUIRES_ACTION
    if mode == "completed":
        return ResponseStatus.COMPLETED
    is_agentic = any(tool.get("type") != "function" for tool in response.tools)
    return ResponseStatus.REQUIRES_ACTION if is_agentic else ResponseStatus.COMPLETED


def finalize(store: ResponseStore, state: RunState, output: TurnOutput, step: NextStep) -> str:
    """Commit the turn's items and the response's final status in one write."""
    update: dict[str, Any] = {
        "output": [*state.response.output, *output.items],
        "usage": (
            state.response.usage.plus(output.usage) if state.response.usage else output.usage
        ),
        "completed_at": int(time.time()),
    }
    if isinstance(step, Complete):
        update["status"] = ResponseStatus.COMPLETED
    elif isinstance(step, PauseForClient):
        update["status"] = step.status
    elif isinstance(step, StopIncomplete):
        update["status"] = ResponseStatus.INCOMPLETE
        update["incomplete_details"] = IncompleteDetails(reason=step.reason)
        update["completed_at"] = None
    else:
        assert_never(step)
    final = state.response.model_copy(update=update)
    event = ev.response_event(RESPONSE_EVENT_BY_STATUS[final.status], final.wire())
    result = store.write(
        final, expected=frozenset({"in_progress"}), turn=state.turn + 1, events=[event]
    )
    return str(final.status) if result.ok else "skipped"


def fail_response(store: ResponseStore, response_id: str, *, code: str, message: str) -> bool:
    """Mark an active response ``failed`` with an ``error`` event and ``response.failed``."""
    for _ in range(5):
        stored = store.load(response_id)
        if stored is None or stored.response.status not in ACTIVE_STATUSES:
            return False
        failed = stored.response.model_copy(
            update={
                "status": ResponseStatus.FAILED,
                "error": ResponseError(code=code, message=message),
            }
        )
        events = [
            ev.error_event(code=code, message=message),
            ev.response_event("response.failed", failed.wire()),
        ]
        result = store.write(
            failed, expected=frozenset(ACTIVE_STATUSES), version=stored.version, events=events
        )
        if not result.conflict:
            return result.ok
    return False
