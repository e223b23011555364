"""Plan, then execute: the model's calls become ``ToolRun`` records before anything runs.

Also decides what follows a turn (a closed union of next steps) and enforces ``tool_choice``,
``allowed_tools`` and ``max_tool_calls`` in the engine rather than trusting the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.config import Settings
from app.output import TurnOutput
from app.protocol.response import ResponseObject, ResponseStatus
from app.providers.chunks import MODEL_CANCELLED
from app.tools.base import ToolCall, ToolDefinition, ToolResult
from app.tools.kinds import ToolKinds
from app.tools.registry import KINDS


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRun:
    """A server-side call, resolved to its tool."""

    call: ToolCall
    tool: ToolDefinition
    queue: str
    """Where the call runs (its kind's queue)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPlan:
    """The model's calls of one turn, sorted by who handles them."""

    runs: list[ToolRun] = field(default_factory=list)
    """Executed by the fleet."""
    client_calls: list[ToolCall] = field(default_factory=list)
    """Handed to the client."""
    answered: list[ToolResult] = field(default_factory=list)
    """Answered at once: not executed (unknown or not allowed; the model is told why), or by
    their kind itself (a hosted ``tool_search``)."""
    approvals: list[ToolCall] = field(default_factory=list)
    """Waiting for the client's approval (MCP approval requests)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Complete:
    """The model answered: the response is done."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseForClient:
    """Client function calls are waiting: hand them over."""

    status: ResponseStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class StopIncomplete:
    """The response stops short; ``reason`` says why."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTools:
    """Run these calls (in order, in batches), then the next turn."""

    runs: list[ToolRun]


@dataclass(frozen=True, slots=True, kw_only=True)
class NextTurn:
    """Call the model again at once (every call of the turn was answered without running)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelByModel:
    """The model gave up on the task (a JSON protocol ``cancel``).

    The response ends ``cancelled`` with the turn's output, and without a terminal event (as
    when a client cancels).
    """


NextStep = Complete | PauseForClient | StopIncomplete | RunTools | NextTurn | CancelByModel


def plan_tool_calls(
    response: ResponseObject,
    calls: list[dict[str, Any]],
    *,
    history: Sequence[dict[str, Any]] = (),
    kinds: ToolKinds = KINDS,
) -> ToolPlan:
    """Resolve each call item to a run, a client call, an approval to wait for or a rejection.

    ``history``: the chain before this response (where MCP servers may have been listed).
    """
    tools = kinds.definitions(response.tools, [*history, *response.output])
    allowed = kinds.allowed_names(response.tool_choice)
    beyond = _beyond_the_limit(response, tools, kinds)
    plan = ToolPlan()
    for item in calls:
        call = kinds.presenters.call_of(item)
        tool = tools.get(call.name)
        if kinds.presenters.awaits_client(item):
            plan.approvals.append(call)
        elif tool is None:
            plan.answered.append(_rejection(call, f"Tool '{call.name}' does not exist."))
        elif allowed is not None and not kinds.is_allowed(tool, allowed, response.tool_choice):
            message = f"Tool '{call.name}' is not allowed by tool_choice; it was not executed."
            plan.answered.append(_rejection(call, message))
        elif (answer := kinds.answer_of(tool)) is not None:
            plan.answered.append(answer(call, response.tools))
        elif (queue := kinds.queue_of(tool)) is None:
            plan.client_calls.append(call)
        elif call.id in beyond:
            message = (
                f"max_tool_calls ({response.max_tool_calls}) reached: "
                f"'{call.name}' was not executed."
            )
            plan.answered.append(_rejection(call, message))
        else:
            plan.runs.append(ToolRun(call=call, tool=tool, queue=queue))
    return plan


def _beyond_the_limit(
    response: ResponseObject, tools: dict[str, ToolDefinition], kinds: ToolKinds
) -> set[str]:
    """The ids of the calls ``max_tool_calls`` leaves unexecuted.

    As OpenAI has it, the limit counts calls of the tools the server runs (built-in, MCP,
    internal), not the client's own functions, and a call past it is not executed: the model
    is told so in its result and goes on. The first ``max_tool_calls`` such calls of the
    response, in output order, run; the same calls whenever a step plans again.
    """
    if response.max_tool_calls is None:
        return set()
    run_by_fleet = [
        call.id
        for call in map(kinds.presenters.call_of, kinds.presenters.call_items(response.output))
        if (tool := tools.get(call.name)) is not None and kinds.queue_of(tool) is not None
    ]
    return set(run_by_fleet[response.max_tool_calls :])


def _rejection(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call_id=call.id, output=f"Error: {message}", is_error=True)


def plan_next_step(
    settings: Settings,
    response: ResponseObject,
    output: TurnOutput,
    plan: ToolPlan,
    *,
    kinds: ToolKinds = KINDS,
) -> NextStep:
    """What follows a model turn whose calls were planned as ``plan``."""
    if output.finish_reason == MODEL_CANCELLED:
        return CancelByModel()
    if output.finish_reason == "length":
        return StopIncomplete(reason="max_output_tokens")
    if output.finish_reason == "content_filter":
        return StopIncomplete(reason="content_filter")
    if not output.calls or forbids_tools(response.tool_choice):
        return Complete()
    if plan.runs:
        return RunTools(runs=plan.runs)
    if plan.client_calls or plan.approvals:
        return PauseForClient(status=pause_status(settings, response, plan, kinds=kinds))
    return NextTurn()


def pause_status(
    settings: Settings, response: ResponseObject, plan: ToolPlan, *, kinds: ToolKinds = KINDS
) -> ResponseStatus:
    """A pause for approvals alone ends ``completed`` (OpenAI's behaviour); else as configured."""
    if plan.approvals and not plan.client_calls:
        return ResponseStatus.COMPLETED
    return client_tool_status(settings, response, kinds=kinds)


def forbids_tools(tool_choice: Any) -> bool:
    """``none`` (plain or as ``allowed_tools`` mode): calls the model makes anyway never run."""
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "allowed_tools":
        return tool_choice.get("mode") == "none"
    return bool(tool_choice == "none")


def client_tool_status(
    settings: Settings, response: ResponseObject, *, kinds: ToolKinds = KINDS
) -> ResponseStatus:
    """The status of a response paused for client calls (``ANTWORT_CLIENT_TOOL_STATUS``)."""
    mode = settings.client_tool_status
    if mode == "requires_action":
        return ResponseStatus.REQUIRES_ACTION
    if mode == "completed":
        return ResponseStatus.COMPLETED
    is_agentic = kinds.is_agentic(response.tools)
    return ResponseStatus.REQUIRES_ACTION if is_agentic else ResponseStatus.COMPLETED


def tool_choice_for_turn(tool_choice: Any, model_turn: int) -> Any:
    """A forced tool applies to the first turn only, so forcing cannot loop to the limit."""
    if model_turn == 0:
        return tool_choice
    if tool_choice == "required" or (
        isinstance(tool_choice, dict) and tool_choice.get("type") != "allowed_tools"
    ):
        return "auto"
    if isinstance(tool_choice, dict) and tool_choice.get("mode") == "required":
        return {**tool_choice, "mode": "auto"}
    return tool_choice
