"""``POST /v1/responses/compact``: the conversation so far, summarised by the model on the fleet.

The gateway validates the request (:func:`start_compaction`) and queues a ``compaction`` job
(the items to summarise, the model; :mod:`app.jobs`); a worker runs one summary turn
(:func:`run_compaction`, :mod:`app.summary`) and pushes the answer, which the gateway pops
(:func:`app.jobs.wait_for_result`). The answer is a ``response.compaction`` object whose output
holds the conversation's user messages, then one ``compaction`` item sealing the summary
(:mod:`app.sealing`). A later request that sends that output as input continues from the
summary.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from app.config import Settings
from app.conversation import load_history
from app.errors import AppError, InvalidRequestError
from app.jobs import JobQueue, checked_body, fail_job, run_job, start_job
from app.limits import Caller
from app.protocol.items import is_user_message
from app.responses import (
    new_response_id,
    normalise_input,
    parse_request,
    with_items_referenced,
)
from app.run import RunDeps
from app.sealing import check_sealed_items
from app.store import ResponseStore
from app.summary import compaction_item
from app.tenancy import OPEN_TENANT, Tenant

COMPACT_FIELDS = frozenset(
    {
        "model", "input", "previous_response_id", "instructions", "prompt_cache_key",
        # validated as on create, not acted on (one fleet, no provider cache to steer); the
        # first two echoed in the answer as a response echoes them
        "safety_identifier", "service_tier",
        "prompt_cache_options", "prompt_cache_retention", "image",
    }
)  # fmt: skip


def start_compaction(
    store: ResponseStore,
    queue: JobQueue,
    settings: Settings,
    body: Any,
    *,
    caller: Caller | None = None,
) -> str:
    """Validate a compact request, store its job and queue it; returns the compaction's id.

    ``caller``'s tenant must own what it compacts, and owns the compaction item it gets back;
    its limits take the job as they would take a response of the same request (None: the open
    tenant, no limits).

    Raises:
        InvalidRequestError: a missing ``model``, an unknown field, a bad item, a tampered
            compaction item, or a ``previous_response_id`` that names nothing usable.
        RateLimitError: a limit of the caller's tenant refuses it.
    """
    caller = caller or Caller(Tenant(name=OPEN_TENANT))
    tenant = caller.tenant.name
    body = checked_body(body, COMPACT_FIELDS)
    request = with_items_referenced(store, parse_request(body), tenant)
    if not request.model:
        raise InvalidRequestError(
            "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    inputs = normalise_input(request)
    check_sealed_items(store, settings, inputs, owner=tenant)
    previous = request.previous_response_id
    history = load_history(store, previous, owner=tenant) if previous else []
    if not history and not inputs:
        raise InvalidRequestError(
            "Nothing to compact: give 'input' or 'previous_response_id'.",
            param="input",
            code="missing_required_parameter",
        )
    compaction_id = new_response_id()
    job = {
        "model": request.model,
        "instructions": request.instructions,
        "items": [*history, *inputs],
        "created_at": int(time.time()),
        "owner": tenant,
        "safety_identifier": request.safety_identifier,
        "service_tier": request.service_tier or "default",
    }
    start_job(
        store, queue, settings, "compaction", compaction_id, job, caller=caller, request=request
    )
    return compaction_id


def run_compaction(deps: RunDeps, compaction_id: str) -> str:
    """The worker's side: summarise the job's items and push the answer; returns what happened."""
    return run_job(
        deps.store,
        "compaction",
        compaction_id,
        lambda job: compact(deps, compaction_id, job),
        lease_seconds=deps.settings.lease_seconds,
    )


def fail_compaction(store: ResponseStore, compaction_id: str, error: AppError) -> None:
    """Hand the waiting gateway an error instead of a compaction."""
    fail_job(store, "compaction", compaction_id, error)


def compact(deps: RunDeps, compaction_id: str, job: dict[str, Any]) -> dict[str, Any]:
    """One summary turn over the job's items; the ``response.compaction`` object."""
    items: list[dict[str, Any]] = job["items"]
    item, usage = compaction_item(
        deps,
        "cmp_" + secrets.token_hex(24),
        model=job["model"],
        instructions=job.get("instructions"),
        items=items,
        owner=job.get("owner", ""),
    )
    return {
        "id": compaction_id,
        "object": "response.compaction",
        "output": [*user_messages(items), item],
        "created_at": job["created_at"],
        "usage": usage.model_dump(mode="json"),
        "safety_identifier": job.get("safety_identifier"),
        "service_tier": job.get("service_tier", "default"),
    }


def user_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user messages among the items, as output items (OpenAI keeps them verbatim)."""
    return [
        {
            "id": item.get("id") or "msg_" + secrets.token_hex(16),
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": item["content"],
        }
        for item in items
        if is_user_message(item)
    ]
