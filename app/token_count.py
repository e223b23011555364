"""``POST /v1/responses/input_tokens``: how many tokens a response's first model call would take.

The request is a create's (its input, instructions, tools, ``previous_response_id`` or
``conversation``, …; :data:`COUNT_FIELDS`), checked as a create checks it and made the response it
would be, nothing stored (:func:`app.responses.prepare_response`). An ``input_tokens`` job
(:mod:`app.jobs`) hands that response to an ``inference`` worker, which builds the model
server's request of its first turn as a run does (:func:`app.run.prompt_tokens`: the history and
input as the kinds present them, the tools with every MCP server listed, the JSON tool
protocol's prompt for a model on it) and asks the model server for one token: the count is
the ``prompt_tokens`` the model server reports. It is exact for that model, whatever its
tokenizer and chat template, and costs one prefill.
"""

from __future__ import annotations

import secrets
from typing import Any

from app.config import Settings
from app.errors import AppError, InvalidRequestError, UpstreamError
from app.jobs import JobQueue, checked_body, fail_job, run_job, start_job
from app.limits import Caller
from app.protocol.events import Event
from app.protocol.response import ResponseObject
from app.responses import prepare_response
from app.run import RunDeps, RunState, prompt_tokens, step_input
from app.store import ResponseStore
from app.tenancy import OPEN_TENANT, Tenant

COUNT_FIELDS = frozenset(
    {
        "model", "input", "instructions", "previous_response_id", "conversation", "tools",
        "tool_choice", "parallel_tool_calls", "reasoning", "text", "truncation",
        "personality",  # taken, not acted on: the fleet has no style presets
        "metadata",  # ours: its antwort_tool_protocol chooses the protocol counted, as on create
    }
)  # fmt: skip
"""The request's fields: the SDK's ``InputTokenCountParams``, and ``metadata``."""

_PERSONALITY_MAX = 64


def start_count(
    store: ResponseStore,
    queue: JobQueue,
    settings: Settings,
    body: Any,
    *,
    caller: Caller | None = None,
) -> str:
    """Check a count request, store its job and queue it; returns the job's id.

    ``caller``'s tenant must own the chain or conversation it continues, and its limits take
    the job as they would take the response (None: the open tenant, no limits).

    Raises:
        InvalidRequestError: a field the count does not take, or a request a create would
            refuse.
        RateLimitError: a limit of the caller's tenant refuses it.
    """
    caller = caller or Caller(Tenant(name=OPEN_TENANT))
    body = checked_body(body, COUNT_FIELDS)
    _check_personality(body.pop("personality", None))
    prepared = prepare_response(store, settings, body, tenant=caller.tenant.name)
    job = {
        "response": prepared.response.model_dump(mode="json"),
        "extra": prepared.extra,
        "history": prepared.history.items,
        "inputs": prepared.inputs,
        "owner": caller.tenant.name,
    }
    job_id = "itc_" + secrets.token_hex(24)
    start_job(
        store, queue, settings, "input_tokens", job_id, job, caller=caller, request=prepared.request
    )
    return job_id


def _check_personality(personality: Any) -> None:
    if personality is None:
        return
    if not isinstance(personality, str) or len(personality) > _PERSONALITY_MAX:
        raise InvalidRequestError(
            f"Invalid 'personality': expected a string of at most {_PERSONALITY_MAX} characters.",
            param="personality",
            code="invalid_value",
        )


def run_count(deps: RunDeps, job_id: str) -> str:
    """The worker's side: count the job's tokens and push the answer; returns what happened."""

    def count(job: dict[str, Any]) -> dict[str, Any]:
        return {"object": "response.input_tokens", "input_tokens": count_input_tokens(deps, job)}

    return run_job(
        deps.store, "input_tokens", job_id, count, lease_seconds=deps.settings.lease_seconds
    )


def fail_count(store: ResponseStore, job_id: str, error: AppError) -> None:
    """Hand the waiting gateway an error instead of a count."""
    fail_job(store, "input_tokens", job_id, error)


def count_input_tokens(deps: RunDeps, job: dict[str, Any]) -> int:
    """The prompt tokens of the first model call of the job's response, as the model counts them.

    Raises:
        UpstreamError: the model server failed, or reported no usage.
    """
    state = RunState(
        response=ResponseObject.model_validate(job["response"]),
        turn=0,
        extra=job["extra"],
        history=job["history"],
        inputs=job["inputs"],
        owner=job.get("owner", ""),
    )
    # the MCP servers are listed, as before a turn: their tools are part of the prompt
    state.response = deps.kinds.before_model(deps.kind_deps, step_input(state), _NoEvents())
    tokens = prompt_tokens(deps, state)
    if tokens is None:
        raise UpstreamError(
            "The model server reported no token usage, so the input could not be counted.",
            code="usage_not_reported",
        )
    return tokens


class _NoEvents:
    """Where the hooks' events go in a count: nowhere (a count is no response)."""

    def emit(self, event: Event) -> None:
        """Drop the event."""

    def flush(self) -> None:
        """Nothing is held."""
