"""One step of the agentic loop: the unit of work of the ``inference`` queue.

:func:`advance_response` is the driver, called with the number of model turns the response has
committed (N). Each call takes the response's lease, loads its state and takes one step
(:func:`run_step`):

1. the tool kinds' ``before_step`` hooks run (an approved MCP call gets its ``mcp_call`` item);
2. the results of turn N's server-side calls are collected from the store in call order, as
   their kinds present them; calls still without a result are dispatched again (``RunTools``);
3. calls the client must answer pause the response (``PauseForClient``), and the turn limit
   stops it (``StopIncomplete``), as does a WebSocket client's ``response.steer`` once the model
   has spoken (reason ``steered``: the connection continues in a successor); a response that
   only stores its request's state (WebSocket mode's ``"generate": false``) completes here with
   no output (``Complete``), and one whose input ends with ``compaction_trigger`` completes with
   one ``compaction`` item, its summary turn's (:func:`compact_conversation`);
4. otherwise the kinds' ``before_model`` hooks run (MCP servers are listed), the context is
   compacted first if it crossed the response's ``context_management`` threshold
   (:func:`compact_context`), the model is called for turn N+1 (a prompt too long for it is
   sent again without its oldest turns under ``truncation: "auto"``) and its calls are planned
   (:mod:`app.plan`).

The step is a closed union, ``NextStep``, which :func:`apply_step` carries out: finalize
(``Complete``, ``PauseForClient``, ``StopIncomplete``, or ``CancelByModel`` when the model gave
up), call the model again (``NextTurn``), or commit and hand the tool calls to their kinds'
queues with the next ``advance_response`` as the chord's callback (``RunTools``). The loop
knows no tool kind by name: it asks ``RunDeps.kinds``. Every write is a compare-and-set, so a
run that was cancelled, deleted or already committed elsewhere stops without touching the
response; and every event and write is fenced with the run's lease token
(:mod:`app.store.fence`), so a run that stalled past its lease while another run took the turn
over stops at its next event or write without touching the response either. The run's state
lives in Redis, never in a task message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, assert_never

from opentelemetry.trace import SpanKind

from app.aead import MissingSecretError
from app.config import Settings
from app.conversation import history_of
from app.dispatch import Dispatcher
from app.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    RESPONSE_ERROR_CODES,
    AppError,
    ModelBehaviorError,
    UpstreamError,
    failure_type,
)
from app.lease import LeaseKeeper
from app.limits import TOKEN_CHARGE_EXTRA, charge_tokens, charge_usage
from app.model_prefix import prepared_items
from app.output import OutputBuilder, ReasoningOutput, TurnOutput
from app.plan import (
    CancelByModel,
    Complete,
    NextStep,
    NextTurn,
    PauseForClient,
    RunTools,
    StopIncomplete,
    ToolRun,
    pause_status,
    plan_next_step,
    plan_tool_calls,
    tool_choice_for_turn,
)
from app.progress import wants_progress
from app.protocol import events as ev
from app.protocol.events import RESPONSE_EVENT_BY_STATUS, Event
from app.protocol.items import (
    asks_compaction,
    configured_effort,
    is_answer,
    is_compactable,
    is_turn_break,
    is_user_message,
    turn_tag,
    turn_tag_of,
)
from app.protocol.response import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    IncompleteDetails,
    ResponseError,
    ResponseObject,
    ResponseStatus,
    Usage,
)
from app.providers.chunks import Chunk, UsageReport
from app.providers.json_protocol import (
    EXCHANGES_EXTRA,
    JsonToolProtocol,
    Memory,
    with_tool_protocol,
)
from app.providers.translate import (
    ModelProvider,
    ModelRequest,
    encode_chat_body,
    reasoning_effort_param,
    response_format_param,
)
from app.replay import ReplayGuard
from app.sealing import ENCRYPTED_REASONING, fleet_sealer
from app.sink import EventSink, LeaseLostError, ResponseInactiveError
from app.store import (
    NO_FENCE,
    Fence,
    LoadedTurn,
    RedeliveredTooOftenError,
    ResponseStore,
    WriteResult,
)
from app.store.status import COMMIT, FAIL, FINISH, Transition
from app.summary import compaction_turn
from app.telemetry import metrics, tracing
from app.tool_share import TOOL_SHARE_EXTRA, ToolShare
from app.tools.base import ToolResult
from app.tools.kinds import StepInput, ToolKinds
from app.tools.registry import KINDS

logger = logging.getLogger(__name__)

COMPACT_THRESHOLD_EXTRA = "compact_threshold"
"""Set in a response's extra from its ``context_management``: compact the context before a
model turn whose prompt is at least that many tokens (:func:`compact_context`)."""

LEFT_OUT_EXTRA = "left_out"
"""Set in a response's extra when ``truncation: "auto"`` left parts of a turn's prompt out: how
many (:func:`without_oldest`) and of how many items. The next turn starts from there while its
prompt has as many items or more (it grew, as a run's prompt does), not from none again."""

NO_OUTPUT_EXTRA = "no_output"
"""Set in a response's extra when it stores its request's state only (WebSocket mode's
``"generate": false``): its first step completes it with no output and calls no model."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDeps:
    """The collaborators of a run; read-only."""

    store: ResponseStore
    provider: ModelProvider
    settings: Settings
    dispatcher: Dispatcher | None = None
    """Queues tool calls and follow-up turns; None: a response that needs them fails."""
    leases: LeaseKeeper | None = None
    """Holds turn leases while they run; None runs without (unit tests of one process)."""
    kinds: ToolKinds = KINDS
    """The tool kinds: how calls look, where they run, what runs before a model call."""
    kind_deps: Mapping[str, object] = field(default_factory=dict)
    """What the kinds' hooks need, by kind name (``ToolKinds.make_turn_deps``); a kind without
    its own (MCP's client) does what it can without (its listings carry an error)."""


class StepOutcome(StrEnum):
    """What :func:`advance_response` did (the task's result)."""

    SKIPPED = "skipped"
    """Nothing: another run holds the response, or it moved on, ended or is gone."""
    WAITING = "waiting"
    """Tool calls were queued; the next step runs when they are done."""
    CONTINUING = "continuing"
    """The next model turn was queued."""
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    REQUIRES_ACTION = "requires_action"
    CANCELLED = "cancelled"
    FAILED = "failed"
    """The response ended with that status (``completed`` also when paused for the client)."""


@dataclass(slots=True, kw_only=True)
class RunState:
    """Everything a run knows about its response; the one mutable record of a run."""

    response: ResponseObject
    turn: int
    """Model turns committed so far."""
    extra: dict[str, Any]
    history: list[dict[str, Any]]
    inputs: list[dict[str, Any]]
    history_list: str | None = None
    """The key of the chain's list ``history`` is the start of (None: not a list's)."""
    start_sequence_number: int = -1
    """Where this turn's events begin (the last sequence number before it first started)."""
    is_rerun: bool = False
    """The turn was started before: its events so far are not emitted again."""
    steered: bool = False
    """A WebSocket client steered the response: it stops before its next model call."""
    waiting_until: float | None = None
    """Set when the run hands calls to tool workers: by then the next run must have started."""
    finished: bool = False
    """The run wrote the response's final status, which freed its lease along the way."""
    fence: Fence = NO_FENCE
    """The run's lease, which its events and writes carry (none without a lease keeper)."""
    lease_lost: bool = False
    """Another run took the lease over: the lease is that run's to renew and give back."""
    owner: str = ""
    """The tenant whose response it is ("": the open tenant)."""
    written_tokens: int = 0
    """The response's ``usage.total_tokens`` as last written (or about to be): what its tenant
    has been charged for (:func:`app.limits.charge_usage`)."""

    @property
    def context(self) -> list[dict[str, Any]]:
        """The items before the response's output: the history, then the input.

        Tools they bring (a client's ``tool_search_output`` in the input) are the model's now.
        """
        return [*self.history, *self.inputs]


def advance_response(
    deps: RunDeps, response_id: str, turn: int, *, counts_start: bool = False
) -> StepOutcome:
    """Take the next step of a response whose committed turn count is ``turn``.

    Finishes turn ``turn``'s tool calls (their results, or their dispatch), then calls the model
    for the next turn, or ends the response (see the module's docstring).

    ``counts_start``: count this run against ``max_task_deliveries`` if it starts (takes the
    lease). The count is per response and turn, however the turn was delivered, and a run that
    ends without dying resets it: it counts the runs of the turn that died one after another.

    Raises:
        RedeliveredTooOftenError: the turn was started more often than allowed.
    """
    if deps.leases is not None:
        opened = deps.leases.acquire(response_id, turn, counts_start=counts_start)
    else:
        opened = deps.store.open_turn(response_id, turn, counts_start=counts_start)
    taken, starts, loaded = opened.taken, opened.starts, opened.loaded
    state: RunState | None = None
    started = time.perf_counter()
    try:
        if starts > deps.settings.max_task_deliveries:
            raise RedeliveredTooOftenError(starts)
        if not taken:
            return StepOutcome.SKIPPED  # another live run of this response holds the lease
        if starts > 1:  # a run of this turn started before and died (or stalled) holding it
            metrics.LEASE_TAKEOVERS.inc()
        state = load_state(deps.store, response_id, turn, loaded=loaded, fence=opened.fence)
        if state is None or state.response.status not in ACTIVE_STATUSES or state.turn != turn:
            return StepOutcome.SKIPPED
        outcome = _advance_loaded(deps, state)
        metrics.TURN_SECONDS.labels(outcome.value).observe(time.perf_counter() - started)
        return outcome
    finally:
        if deps.leases is not None and taken:
            if state is not None and (state.finished or state.lease_lost):
                deps.leases.forget(response_id)
            else:
                deps.leases.release(response_id, wait_until=state.waiting_until if state else None)


def _advance_loaded(deps: RunDeps, state: RunState) -> StepOutcome:
    response_id = state.response.id
    start_seq, is_rerun = state.start_sequence_number, state.is_rerun
    emitted = deps.store.events_after(response_id, start_seq, count=1_000_000) if is_rerun else []
    sink = EventSink(
        deps.store,
        response_id,
        coalesce_seconds=deps.settings.coalesce_ms / 1000,
        max_coalesce_seconds=deps.settings.coalesce_max_ms / 1000,
        guard=ReplayGuard(emitted) if is_rerun else None,
        fence=state.fence,
    )
    try:
        return _take_step(deps, state, sink)
    except LeaseLostError as stopped:
        # Stalled past the lease (a pause, starvation): the turn runs elsewhere now.
        logger.warning("run of %s stopped: %s", response_id, stopped)
        metrics.LEASES_LOST.inc()
        state.lease_lost = True
        return StepOutcome.SKIPPED
    except ResponseInactiveError as stopped:
        logger.info("run of %s stopped: %s", response_id, stopped)
        if stopped.status == ResponseStatus.CANCELLED:
            metrics.observe_cancel("turn", deps.store.cancelled_since(response_id))
        return StepOutcome.SKIPPED


def _take_step(deps: RunDeps, state: RunState, sink: EventSink) -> StepOutcome:
    try:
        step = run_step(deps, state, sink)
        return apply_step(deps, state, step, events=sink.take())
    except (UpstreamError, ModelBehaviorError, MissingSecretError) as exc:
        if isinstance(exc, MissingSecretError):  # the fleet's configuration: the operator's
            logger.error("response %s failed: %s", state.response.id, exc.message)
        sink.flush_quietly()
        fail_response(
            deps.store,
            state.response.id,
            code=exc.code if exc.code in RESPONSE_ERROR_CODES else "server_error",
            message=exc.message,
            fence=state.fence,
        )
        return StepOutcome.FAILED


def run_step(deps: RunDeps, state: RunState, sink: EventSink) -> NextStep:
    """Collect results, then pause, stop, wait for tools, or call the model and plan."""
    kinds = deps.kinds
    state.response = kinds.before_step(deps.kind_deps, step_input(state), sink)
    unanswered = plan_tool_calls(
        state.response, unanswered_calls(state.response, kinds), history=state.context, kinds=kinds
    )
    missing = collect_tool_results(deps, state, sink, unanswered.runs)
    if missing:
        return RunTools(runs=missing)
    if unanswered.client_calls or unanswered.approvals:
        status = pause_status(deps.settings, state.response, unanswered, kinds=kinds)
        return PauseForClient(status=status)
    if state.turn >= deps.settings.max_turns:
        return StopIncomplete(reason="max_turns")
    if state.steered and state.turn > 0:  # a safe boundary: the model has spoken, tools are done
        return StopIncomplete(reason="steered")
    if state.extra.get(NO_OUTPUT_EXTRA):  # the request's state only ("generate": false)
        return Complete()
    if state.turn == 0 and asks_compaction(state.inputs):
        return compact_conversation(deps, state, sink)
    state.response = kinds.before_model(deps.kind_deps, step_input(state), sink)
    compact_context(deps, state, sink)
    output = call_model(deps, state, sink)
    state.response = state.response.model_copy(
        update={
            "output": [*state.response.output, *output.items],
            "usage": state.response.usage.plus(output.usage)
            if state.response.usage
            else output.usage,
        }
    )
    _remember(deps, state, output)
    state.turn += 1
    plan = plan_tool_calls(state.response, output.calls, history=state.context, kinds=kinds)
    step = plan_next_step(deps.settings, state.response, output, plan, kinds=kinds)
    if isinstance(step, RunTools | NextTurn | PauseForClient):
        for result in plan.answered:
            append_result(deps, state, sink, result)
    return step


def compact_conversation(deps: RunDeps, state: RunState, sink: EventSink) -> Complete:
    """The one turn of a response whose input ends with ``compaction_trigger``.

    Its output is one ``compaction`` item summarising the conversation before the trigger; no
    tool is offered or called.
    """
    conversation = [*state.history, *state.inputs[:-1]]
    _add_compaction(
        state,
        sink,
        *compaction_turn(deps, state.response, conversation, turn=state.turn, owner=state.owner),
    )
    state.turn += 1
    return Complete()


def compact_context(deps: RunDeps, state: RunState, sink: EventSink) -> None:
    """Add a ``compaction`` item before the model's turn when the context crossed its threshold.

    ``context_management``'s ``compact_threshold``: the prompt the model would be sent now,
    counted by its server (:func:`prompt_tokens`), is at least that many tokens, and the
    context holds something a summary shortens (the model's side after the latest compaction;
    ``items.since_compaction``). The item summarises the context so far; the model is then
    shown the context from it on. A prompt surely under the threshold by its bytes
    (:func:`tokens_at_most`) is not sent to be counted: the turn makes one model call, not two.
    A count that is sent is charged to the tenant's tokens per minute in full
    (:func:`app.limits.charge_tokens`): the response's usage does not hold it, nor its reservation.
    """
    threshold = state.extra.get(COMPACT_THRESHOLD_EXTRA)
    context = [*state.context, *state.response.output]
    if not threshold or not is_compactable(context):
        return
    request = _prompt_request(deps, state)
    at_most = tokens_at_most(request)
    if at_most is not None and at_most < threshold:
        return  # surely under: no call to count
    usage = _counted(deps, request, tenant=state.owner)
    if usage is None:
        return
    charge_tokens(deps.store, state.extra.get(TOKEN_CHARGE_EXTRA), usage.total_tokens)
    if usage.input_tokens < threshold:
        return
    _add_compaction(
        state,
        sink,
        *compaction_turn(deps, state.response, context, turn=state.turn, owner=state.owner),
    )


TEMPLATE_TOKENS = 1024
"""What a chat template may add to a prompt beyond its Chat Completions body. Each message's
markers are fewer tokens than the JSON around it, but a template may add text of its own
(instructions for tool use, a default system prompt, the date): a few hundred tokens."""

_MEDIA_PARTS = tuple(f'"type":"{kind}"'.encode() for kind in ("image_url", "file", "input_audio"))


def tokens_at_most(request: ModelRequest) -> int | None:
    """At most how many tokens the prompt of ``request`` is, without asking its model's server.

    A token is at least a byte of text in the tokenizers chat models use (BPE over bytes;
    SentencePiece, whose unknown characters fall back to bytes), so the prompt is at most as
    many tokens as its Chat Completions body takes bytes (:func:`encode_chat_body`: the
    messages, tools and their descriptions as sent), plus what the chat template adds
    (:data:`TEMPLATE_TOKENS`). None: the prompt holds an image, a file or audio, whose tokens
    no text measures.
    """
    body = encode_chat_body(request)
    if any(part in body for part in _MEDIA_PARTS):  # as a part's type, never in a string
        return None
    return len(body) + TEMPLATE_TOKENS


def _add_compaction(state: RunState, sink: EventSink, item: dict[str, Any], usage: Usage) -> None:
    """Append a summary turn's ``compaction`` item to the output, with its events and usage."""
    index = len(state.response.output)
    sink.emit(ev.output_item_added(index, item))
    sink.emit(ev.output_item_done(index, item))
    state.response = state.response.model_copy(
        update={
            "output": [*state.response.output, item],
            "usage": state.response.usage.plus(usage) if state.response.usage else usage,
        }
    )


def prompt_tokens(deps: RunDeps, state: RunState) -> int | None:
    """The prompt tokens of the run's next model call, as its server counts them.

    None: the server reported no usage, or refused the prompt as longer than the model's
    context. The call is built as :func:`call_model` builds it (on the JSON tool protocol, its
    first call) and sent for one token; the server's prefix cache makes the call after it
    cheap.
    """
    usage = _counted(deps, _prompt_request(deps, state), tenant=state.owner)
    return None if usage is None else usage.input_tokens


def _prompt_request(deps: RunDeps, state: RunState) -> ModelRequest:
    """The run's next model call as :func:`call_model` sends it (the JSON protocol's first)."""
    request, provider = model_call(deps, state)
    if isinstance(provider, JsonToolProtocol):
        request = provider.first_call(request)
    return request


def _counted(deps: RunDeps, request: ModelRequest, *, tenant: str) -> Usage | None:
    """The usage of ``request`` sent for one token: its prompt tokens as its server counts them.

    The call's tokens are counted in the metrics as ``tenant``'s (not timed: one token).
    """
    request = replace(request, params={**request.params, "max_tokens": 1})
    chunks = deps.provider.stream(request)
    usage = None
    try:
        for chunk in chunks:
            if isinstance(chunk, UsageReport):
                usage = chunk.usage
    except UpstreamError as exc:
        if exc.code != CONTEXT_LENGTH_EXCEEDED:
            raise
        return None  # longer than the model's context: the turn truncates it, or fails
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if usage is None:
        return None
    metrics.count_model_tokens(
        request.model, tenant, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
    )
    return usage


def _remember(deps: RunDeps, state: RunState, output: TurnOutput) -> None:
    """Keep what the model wrote for later turns (JSON tool protocol): its plan, its words.

    Raises:
        LeaseLostError: another run holds the lease; nothing was written.
    """
    kept = dict(state.extra)
    if output.plan is not None:  # later turns remind the model of it
        kept["plan"] = list(output.plan)
    if output.exchange:  # later turns and responses replay it verbatim
        tag = turn_tag_of(state.response.id, state.turn)
        kept[EXCHANGES_EXTRA] = {**kept.get(EXCHANGES_EXTRA, {}), tag: list(output.exchange)}
    if output.left_out is not None and output.left_out[0]:  # the next turn starts there
        kept[LEFT_OUT_EXTRA] = list(output.left_out)
    elif output.left_out is not None:  # it all fit (a compaction came between)
        kept.pop(LEFT_OUT_EXTRA, None)
    if kept == state.extra:
        return
    state.extra = kept
    result = deps.store.set_extra(state.response.id, state.extra, fence=state.fence)
    if result.lease_lost:
        raise LeaseLostError(result.status)


def step_input(state: RunState) -> StepInput:
    """The step as a kind's hook sees it."""
    return StepInput(
        response=state.response,
        turn=state.turn,
        history=state.history,
        inputs=state.inputs,
        extra=state.extra,
    )


def load_state(
    store: ResponseStore,
    response_id: str,
    turn: int,
    *,
    loaded: LoadedTurn | None = None,
    fence: Fence = NO_FENCE,
) -> RunState | None:
    """The run of ``turn`` as stored, with the chain the model will see; None when gone.

    Marks where the turn's events begin: call it holding the response's lease. ``loaded``:
    that first read, when it came with the lease, and ``fence`` that lease.

    Raises:
        LeaseLostError: the chain expired, and another run holds the lease (nothing written).
    """
    if loaded is None:
        loaded = store.load_turn(response_id, turn)
    stored, inputs = loaded.stored, loaded.inputs
    if stored is None:
        return None
    try:
        history = history_of(store, stored)
    except AppError as exc:  # the chain expired while the response waited in the queue
        code = exc.code or "not_found"
        fail_response(
            store, response_id, code=code, message=exc.message, error_type=exc.type, fence=fence
        )
        return None
    return RunState(
        response=stored.response,
        turn=stored.turn,
        extra=stored.extra,
        history=history,
        inputs=inputs,
        history_list=None if stored.history is None else store.history_key(stored.history),
        start_sequence_number=loaded.start_sequence_number,
        is_rerun=loaded.is_rerun,
        steered=loaded.steered,
        fence=fence,
        owner=stored.owner,
        written_tokens=stored.response.usage.total_tokens if stored.response.usage else 0,
    )


def unanswered_calls(response: ResponseObject, kinds: ToolKinds = KINDS) -> list[dict[str, Any]]:
    """Call items of the output that have no result yet."""
    return kinds.presenters.unanswered_calls(response.output)


def collect_tool_results(
    deps: RunDeps, state: RunState, sink: EventSink, runs: list[ToolRun]
) -> list[ToolRun]:
    """Append the runs' stored results in call order; the runs from the first missing one on."""
    results = deps.store.tool_results(state.response.id, [run.call.id for run in runs])
    for index, raw in enumerate(results):
        if raw is None:
            return runs[index:]
        append_result(deps, state, sink, ToolResult.from_json(raw))
    return []


def append_result(deps: RunDeps, state: RunState, sink: EventSink, result: ToolResult) -> None:
    """Apply a result to its call in the output (as its kind shows results), with the events."""
    presenters = deps.kinds.presenters
    output, events = presenters.apply_result(state.response.id, state.response.output, result)
    for event in events:
        sink.emit(event)
    if wants_progress(state.extra):
        found = presenters.find_call(output, result.call_id)
        assert found is not None  # apply_result found it
        # a new item at the end, or the call's item updated in place
        index = len(output) - 1 if len(output) > len(state.response.output) else found[0]
        sink.emit(
            ev.step_completed(
                item_id=output[index]["id"],
                output_index=index,
                call_id=result.call_id,
                is_error=result.is_error,
            )
        )
    state.response = state.response.model_copy(update={"output": output})


def _model_params(deps: RunDeps, state: RunState, chain: list[dict[str, Any]]) -> dict[str, Any]:
    """The request's sampling parameters, and its reasoning effort as the model server takes it.

    The effort is the last ``configuration_update``'s in ``chain``, else the request's. The
    answer's format is the response's ``text.format`` (``params`` holds it too, for workers of
    earlier releases: the same).
    """
    params: dict[str, Any] = {
        **state.extra.get("params", {}),
        **response_format_param(state.response.text.get("format")),
    }
    effort = configured_effort(chain) or (state.response.reasoning or {}).get("effort")
    if effort:
        accepted = deps.settings.reasoning_effort_list
        params = {**params, **reasoning_effort_param(effort, accepted)}
    return params


def call_model(deps: RunDeps, state: RunState, sink: EventSink) -> TurnOutput:
    """Stream the model's answer into output items and events."""
    response, kinds = state.response, deps.kinds
    chain = [*state.context, *response.output]
    request, provider = model_call(deps, state)
    builder = OutputBuilder(
        response_id=response.id,
        turn=state.turn,
        first_output_index=len(response.output),
        sink=sink,
        tools=kinds.definitions(response.tools, chain),
        progress=wants_progress(state.extra),
        presenters=kinds.presenters,
        reasoning=_reasoning_output(deps, state),
    )
    with tracing.span(
        f"chat {response.model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": response.model,
            "antwort.turn": state.turn,
        },
        kind=SpanKind.CLIENT,
    ):
        output = _stream_model(
            provider,
            request,
            builder,
            timer=metrics.ModelCallTimer(response.model, tenant=state.owner),
            truncates=response.truncation == "auto",
            left_out=_left_out_before(state, request),
        )
        tracing.annotate(
            {
                "gen_ai.usage.input_tokens": output.usage.input_tokens,
                "gen_ai.usage.output_tokens": output.usage.output_tokens,
                "gen_ai.response.finish_reasons": [output.finish_reason],
            }
        )
    return output


def model_call(deps: RunDeps, state: RunState) -> tuple[ModelRequest, ModelProvider]:
    """The model call of the run's next turn: its request, and its provider.

    The provider speaks the response's tool protocol (:mod:`app.providers.json_protocol`).
    """
    response, kinds = state.response, deps.kinds
    chain = [*state.context, *response.output]
    items = prepared_items(
        deps.store,
        deps.settings,
        kinds.presenters,
        history=state.history,
        history_list=state.history_list,
        rest=[*state.inputs, *response.output],
        reasoning_context=(response.reasoning or {}).get("context"),
    )
    tools, tool_choice = kinds.model_offer(
        tool_choice_for_turn(response.tool_choice, state.turn), response.tools, chain
    )
    request = ModelRequest(
        model=response.model,
        instructions=response.instructions,
        items=items,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=response.parallel_tool_calls,
        params=_model_params(deps, state, chain),
    )
    provider = with_tool_protocol(
        deps.provider,
        deps.settings,
        response,
        is_fresh=_is_fresh_request(state),
        memory=Memory(plan=state.extra.get("plan"), exchanges=state.extra.get(EXCHANGES_EXTRA, {})),
        allowed=kinds.allowed_names(request.tool_choice),
    )
    return request, provider


def _stream_model(
    provider: ModelProvider,
    request: ModelRequest,
    builder: OutputBuilder,
    *,
    timer: metrics.ModelCallTimer,
    truncates: bool = False,
    left_out: int = 0,
) -> TurnOutput:
    """Feed the model's chunks to ``builder``, timing them with ``timer``, which counts its tokens.

    ``truncates`` (``truncation: "auto"``): a prompt the model server refuses as longer than
    its context is sent again without its oldest parts (:func:`_fitting_stream`), starting
    from ``left_out`` of them (the turn before's).
    """
    start = left_out if truncates else 0
    stream, first, dropped = _fitting_stream(provider, request, truncates=truncates, start=start)
    try:
        if first is not None:  # timed alone, so the chunks after it cost nothing more
            timer.first_chunk()
            builder.feed(first)
        for chunk in stream:
            builder.feed(chunk)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # stops the model server's generation when we stop early
    output = builder.close()
    timer.done(input_tokens=output.usage.input_tokens, output_tokens=output.usage.output_tokens)
    if truncates:
        output = replace(output, left_out=(dropped, len(request.items)))
    return output


def _left_out_before(state: RunState, request: ModelRequest) -> int:
    """What the turn before left out of its prompt (:data:`LEFT_OUT_EXTRA`), while it applies.

    It does while this prompt has as many items as that one or more; fewer (a compaction came
    between): none.
    """
    parts, items = state.extra.get(LEFT_OUT_EXTRA, (0, 0))
    return int(parts) if len(request.items) >= int(items) else 0


def _fitting_stream(
    provider: ModelProvider, request: ModelRequest, *, truncates: bool, start: int = 0
) -> tuple[Iterator[Chunk], Chunk | None, int]:
    """The model's stream, its first chunk, and how many parts of the prompt were left out.

    A refusal for the context's length comes before any chunk. With ``truncates``, the call is
    made again without the oldest parts of the conversation (:func:`without_oldest`): ``start``
    of them first (the turn before's), then one more, two, four (so at most twice as many more
    as needed), keeping the messages before the first turn (OpenAI: "dropping items from the
    beginning").
    """
    items = list(request.items)
    dropped, more = 0, 1
    if start and (shorter := without_oldest(items, start)) is not None:
        dropped, request = start, replace(request, items=shorter)
    first_parts = dropped
    while True:
        stream = provider.stream(request)
        chunks = iter(stream)
        try:
            return chunks, next(chunks, None), dropped
        except UpstreamError as exc:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
            if not truncates or exc.code != CONTEXT_LENGTH_EXCEEDED:
                raise
            dropped, more = first_parts + more, more * 2
            shorter = without_oldest(items, dropped)
            if shorter is None or len(shorter) == len(request.items):  # nothing more to leave out
                raise
            logger.info("the prompt is longer than the model's context: %d parts left out", dropped)
            request = replace(request, items=shorter)


def without_oldest(items: Sequence[dict[str, Any]], count: int) -> list[dict[str, Any]] | None:
    """``items`` without their ``count`` oldest parts, or as many as may go; None: none may.

    The parts are the turns but the last, oldest first (a turn is a user message and what
    follows it, up to the next user message), then the last turn's exchanges but its last (an
    exchange: what one model turn said and called, and the answers to its calls). What comes
    before the first turn (system and developer messages), the last turn's user message and a
    compaction's summary wherever it is (a compacted run's stands for its earlier steps) stay:
    a long agent run on one request leaves out its oldest steps, not its task. An answer whose
    call went is left out with it.
    """
    starts = [n for n, item in enumerate(items) if is_user_message(item)]
    if not starts:
        return None
    first, earlier = starts[0], len(starts) - 1
    if count <= earlier:
        cut = starts[count]
        return [*items[:first], *_summaries(items[first:cut]), *items[cut:]]
    last = starts[-1]
    exchanges = _exchange_starts(items, last + 1)
    left = min(count - earlier, len(exchanges) - 1)  # the last exchange stays
    if left <= 0 and earlier == 0:
        return None
    if left <= 0:  # every earlier turn out, no exchange of the last one
        return [*items[:first], *_summaries(items[first:last]), *items[last:]]
    cut = exchanges[left]
    kept = items[cut:]
    called = {item.get("call_id") for item in kept if not is_answer(item)} | {None}
    kept = [item for item in kept if not is_answer(item) or item.get("call_id") in called]
    task = [*_summaries(items[first:last]), items[last], *_summaries(items[last + 1 : cut])]
    return [*items[:first], *task, *kept]


def _exchange_starts(items: Sequence[dict[str, Any]], begin: int) -> list[int]:
    """Where each exchange from ``items[begin]`` on begins (:func:`without_oldest`).

    One begins at each item of the model's after an answer, or after an item of another model
    turn (the ids the fleet gave name their turn: a server tool's calls have no answer items),
    or after a compaction's summary (which belongs to none).
    """
    found: list[int] = []
    before: dict[str, Any] | None = None
    for n in range(begin, len(items)):
        item = items[n]
        if (
            not is_answer(item)
            and not _is_summary(item)
            and (
                before is None
                or is_answer(before)
                or _is_summary(before)
                or _other_turn(before.get("id"), item.get("id"))
            )
        ):
            found.append(n)
        before = item
    return found


def _is_summary(item: dict[str, Any]) -> bool:
    return item.get("type") == "compaction"


def _summaries(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The compaction items among ``items`` (:func:`without_oldest` leaves none out)."""
    return [item for item in items if _is_summary(item)]


def _other_turn(before: object, now: object) -> bool:
    """Whether two item ids name different model turns (False when either names none)."""
    this, that = turn_tag(before), turn_tag(now)
    return this is not None and that is not None and this != that


def _reasoning_output(deps: RunDeps, state: RunState) -> ReasoningOutput:
    """Summaries when ``reasoning.summary`` asks; sealed reasoning when ``include`` does."""
    summary = (state.response.reasoning or {}).get("summary")
    is_sealed = ENCRYPTED_REASONING in state.extra.get("include", [])
    seal = fleet_sealer(deps.store, deps.settings).seal_reasoning if is_sealed else None
    return ReasoningOutput(is_summarised=summary is not None, seal=seal)


def _is_fresh_request(state: RunState) -> bool:
    """The first model turn of a response that asks something new.

    Something new is a message that no model item (a call, an answer) follows in the input:
    results alone continue, and so does a client's whole history that ends with the results
    of the model's calls (the request in it was answered by those calls).
    """
    if state.turn != 0:
        return False
    for item in reversed(state.inputs):
        if is_turn_break(item):
            return True
        if not is_answer(item):
            return False  # the model's own item: what came before it was acted on
    return False


def cancel_by_model(
    store: ResponseStore, state: RunState, *, events: Sequence[Event] = ()
) -> StepOutcome:
    """Commit the turn's output with the status ``cancelled`` (no terminal event, as a cancel)."""
    final = state.response.model_copy(update={"status": ResponseStatus.CANCELLED})
    result = write_run(store, state, final, transition=FINISH, events=events)
    return StepOutcome.CANCELLED if result.ok else StepOutcome.SKIPPED


def apply_step(
    deps: RunDeps, state: RunState, step: NextStep, *, events: Sequence[Event] = ()
) -> StepOutcome:
    """Carry out a planned step: finalize, or commit and queue what follows.

    ``events``: the turn's events not written yet; they go out with the step's write.
    """
    if isinstance(step, Complete | PauseForClient | StopIncomplete):
        return finalize(deps.store, state, step, events=events)
    if isinstance(step, CancelByModel):
        return cancel_by_model(deps.store, state, events=events)
    if isinstance(step, RunTools):
        batch_size = deps.settings.max_parallel_tools if state.response.parallel_tool_calls else 1
        batch = step.runs[:batch_size]
        longest = max(
            run.tool.timeout_seconds or deps.settings.tool_timeout_seconds for run in batch
        )
        state.waiting_until = deps.store.now() + longest + deps.settings.lease_seconds
        if not commit(deps.store, state, events=events):
            return StepOutcome.SKIPPED
        _hand_off(deps, state, state.waiting_until)
        calls = [(run.call.id, run.queue) for run in batch]
        mode = state.extra.get(TOOL_SHARE_EXTRA)
        if mode is not None:  # the tenant's places on the tool queues (app.tool_share)
            calls = _placed(deps, state, calls, str(mode))
        if calls:
            _dispatcher(deps).enqueue_tools(state.response.id, calls, then_turn=state.turn)
        return StepOutcome.WAITING
    if isinstance(step, NextTurn):
        if not commit(deps.store, state, events=events):
            return StepOutcome.SKIPPED
        _hand_off(deps, state, deps.store.now() + deps.settings.lease_seconds)
        _dispatcher(deps).enqueue_turn(state.response.id, state.turn)
        return StepOutcome.CONTINUING
    assert_never(step)


def _placed(
    deps: RunDeps, state: RunState, calls: list[tuple[str, str]], mode: str
) -> list[tuple[str, str]]:
    """The calls of a batch that got a place on their queues; none: the response parks.

    Parked after its lease was given back: the release that queues its turn again finds the
    lease free. Until then the sweeper's watch stands (``waiting_until``).
    """
    share = ToolShare(deps.store)
    granted = set(share.take(state.owner, state.response.id, state.turn, calls, mode))
    if not granted:
        call_id, queue = calls[0]
        share.park(_dispatcher(deps), state.owner, state.response.id, state.turn, call_id, queue)
        return []
    return [call for call in calls if call[0] in granted]


def _hand_off(deps: RunDeps, state: RunState, wait_until: float) -> None:
    """Give the lease back before queuing what follows, so the next run can take it at once.

    ``wait_until`` keeps the response under the sweeper's watch: should this process die before
    the next run starts, the sweeper queues that run once the time has passed.
    """
    if deps.leases is not None:
        deps.leases.release(state.response.id, wait_until=wait_until)


def _dispatcher(deps: RunDeps) -> Dispatcher:
    if deps.dispatcher is None:
        raise ModelBehaviorError("This worker cannot queue tool calls (no dispatcher).")
    return deps.dispatcher


def commit(store: ResponseStore, state: RunState, *, events: Sequence[Event] = ()) -> bool:
    """Write the run's progress (with ``events``); the response stays ``in_progress``."""
    return write_run(store, state, state.response, transition=COMMIT, events=events).ok


def write_run(
    store: ResponseStore,
    state: RunState,
    response: ResponseObject,
    *,
    transition: Transition,
    events: Sequence[Event],
) -> WriteResult:
    """A run's write of ``response`` at its turn, fenced with the run's lease.

    First, what the run's model calls took since the response was last written, beyond the
    tokens its create reserved, is charged to its tenant's tokens per minute
    (:func:`app.limits.charge_usage`): before the write, so a client that sees the response
    done sees its tokens counted. A model call is charged whether or not its write lands (the
    model server did the work): a turn run again after its worker died is charged again.

    Raises:
        LeaseLostError: another run holds the lease; nothing was written.
    """
    tokens = response.usage.total_tokens if response.usage else 0
    charge_usage(
        store, state.extra.get(TOKEN_CHARGE_EXTRA), before=state.written_tokens, after=tokens
    )
    state.written_tokens = tokens
    result = store.write(
        response, transition=transition, turn=state.turn, events=events, fence=state.fence
    )
    if result.lease_lost:
        raise LeaseLostError(result.status)
    return result


def finalize(
    store: ResponseStore,
    state: RunState,
    step: Complete | PauseForClient | StopIncomplete,
    *,
    events: Sequence[Event] = (),
) -> StepOutcome:
    """Commit the output and the response's final status in one write (after ``events``)."""
    update: dict[str, Any] = {"completed_at": int(store.now())}
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
    event = ev.response_event(RESPONSE_EVENT_BY_STATUS[final.status], final)
    result = write_run(store, state, final, transition=FINISH, events=[*events, event])
    state.finished = result.ok and final.status in TERMINAL_STATUSES
    return StepOutcome(final.status.value) if result.ok else StepOutcome.SKIPPED


def fail_response(
    store: ResponseStore,
    response_id: str,
    *,
    code: str,
    message: str,
    error_type: str | None = None,
    fence: Fence = NO_FENCE,
) -> bool:
    """Mark an active response ``failed`` with an ``error`` event and ``response.failed``.

    ``error_type``: the error's ``type``, by default the one its ``code`` has
    (:func:`app.errors.failure_type`). ``fence``: the lease of the run that fails it (none at
    the task boundary).

    Raises:
        LeaseLostError: another run holds the lease ``fence`` names; nothing was written.
    """
    kind = failure_type(code) if error_type is None else error_type
    for _ in range(5):
        stored = store.load(response_id)
        if stored is None or stored.response.status not in ACTIVE_STATUSES:
            return False
        failed = stored.response.model_copy(
            update={
                "status": ResponseStatus.FAILED,
                "error": ResponseError(code=code, message=message, type=kind),
            }
        )
        events = [
            ev.error_event(code=code, message=message, error_type=kind),
            ev.response_event("response.failed", failed),
        ]
        result = store.write(
            failed,
            transition=FAIL,
            version=stored.version,
            events=events,
            fence=fence,
            running_turn=stored.turn,
        )
        if result.lease_lost:
            raise LeaseLostError(result.status)
        if not result.conflict:
            if result.ok:
                store.record_failure("response", code)
            return result.ok
    return False
