"""``POST /v1/responses/compact``: the conversation so far, summarised by the model on the fleet.

The gateway validates the request (:func:`start_compaction`), writes a job (the items to
summarise, the model) to Redis and queues ``responses.compact`` on the ``inference`` queue; a
worker runs one summary turn (:func:`run_compaction`, :mod:`app.summary`) and pushes the
answer to the job's result list, which the gateway pops (:func:`wait_for_compaction`). The
answer is a ``response.compaction`` object whose output holds the conversation's user messages,
then one ``compaction`` item sealing the summary (:mod:`app.sealing`). A later request that
sends that output as input continues from the summary.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import Any, Protocol

from app.config import Settings
from app.conversation import load_history
from app.dispatch import QUEUE_UNAVAILABLE_MESSAGE, QueueUnavailableError
from app.errors import (
    AppError,
    InvalidRequestError,
    ModelBehaviorError,
    ServerError,
    UpstreamError,
    retry_later,
)
from app.protocol.items import is_user_message
from app.responses import new_response_id, normalise_input, parse_request
from app.run import RunDeps
from app.sealing import check_sealed_items
from app.store import ResponseStore
from app.summary import compaction_item
from app.tenancy import OPEN_TENANT

COMPACT_FIELDS = frozenset(
    {
        "model", "input", "previous_response_id", "instructions", "prompt_cache_key",
        # validated as on create, not acted on (one fleet, no provider cache to steer)
        "prompt_cache_options", "prompt_cache_retention", "service_tier", "image",
    }
)  # fmt: skip
_RESULT_TTL_SECONDS = 600

logger = logging.getLogger(__name__)


class CompactionQueue(Protocol):
    """Queues compaction jobs (``responses.compact`` on the ``inference`` queue)."""

    def enqueue_compaction(self, compaction_id: str) -> None:
        """Queue the job ``compaction_id`` (:class:`QueueUnavailableError`: the broker is away)."""


def start_compaction(
    store: ResponseStore,
    queue: CompactionQueue,
    settings: Settings,
    body: Any,
    *,
    tenant: str = OPEN_TENANT,
) -> str:
    """Validate a compact request, store its job and queue it; returns the compaction's id.

    ``tenant`` must own what it compacts, and owns the compaction item it gets back.

    Raises:
        InvalidRequestError: a missing ``model``, an unknown field, a bad item, a tampered
            compaction item, or a ``previous_response_id`` that names nothing usable.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    for name in body:
        if name not in COMPACT_FIELDS:
            raise InvalidRequestError(
                f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter"
            )
    request = parse_request(body)
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
    }
    ttl = int(settings.sync_timeout_seconds) + _RESULT_TTL_SECONDS
    store.redis.set(store.keys.compaction_job(compaction_id), json.dumps(job), ex=ttl)
    try:
        queue.enqueue_compaction(compaction_id)
    except QueueUnavailableError as exc:
        raise retry_later(QUEUE_UNAVAILABLE_MESSAGE) from exc
    except Exception as exc:
        logger.exception("could not enqueue the compaction")
        raise ServerError("The server could not queue the compaction.") from exc
    return compaction_id


def wait_for_compaction(
    store: ResponseStore, compaction_id: str, *, timeout_seconds: float
) -> dict[str, Any]:
    """The compaction object once a worker made it.

    Raises:
        AppError: the worker's error (the model failed, …), or a ``ServerError`` on timeout.
    """
    key = store.keys.compaction_result(compaction_id)
    popped = store.redis.blpop([key], timeout=timeout_seconds)
    if popped is None:
        raise ServerError(
            f"The compaction did not finish within {timeout_seconds:.0f}s; try again later."
        )
    store.redis.delete(store.keys.compaction_job(compaction_id))
    result: dict[str, Any] = json.loads(popped[1])
    error = result.get("error")
    if error is not None:
        raise _error_from(error)
    return result


def _error_from(error: dict[str, Any]) -> AppError:
    status = int(error.get("status", 500))
    kind: type[AppError] = ServerError
    if status == 400:
        kind = InvalidRequestError
    elif status == UpstreamError.status:
        kind = UpstreamError
    elif error.get("type") == ModelBehaviorError.type:
        kind = ModelBehaviorError
    return kind(error["message"], param=error.get("param"), code=error.get("code"))


def run_compaction(deps: RunDeps, compaction_id: str) -> str:
    """The worker's side: summarise the job's items and push the answer; returns what happened.

    A redelivered task whose answer was pushed (or popped and its job removed) does nothing.
    """
    store = deps.store
    raw = store.redis.get(store.keys.compaction_job(compaction_id))
    if raw is None or store.redis.exists(store.keys.compaction_result(compaction_id)):
        return "skipped"
    job = json.loads(raw)
    try:
        result = compact(deps, compaction_id, job)
    except (InvalidRequestError, UpstreamError, ModelBehaviorError) as exc:
        fail_compaction(store, compaction_id, exc)
        return "failed"
    push_result(store, compaction_id, result)
    return "completed"


def fail_compaction(store: ResponseStore, compaction_id: str, error: AppError) -> None:
    """Hand the waiting gateway an error instead of a compaction."""
    body = {**error.to_dict()["error"], "status": error.status}
    push_result(store, compaction_id, {"error": body})


def push_result(store: ResponseStore, compaction_id: str, result: dict[str, Any]) -> None:
    """Push the answer the gateway pops (kept a while in case it is not waiting yet)."""
    key = store.keys.compaction_result(compaction_id)
    pipe = store.redis.pipeline(transaction=True)
    pipe.rpush(key, json.dumps(result))
    pipe.expire(key, _RESULT_TTL_SECONDS)
    pipe.execute()


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
