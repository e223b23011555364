"""Jobs a gateway waits for: a request answered by one model call on an ``inference`` worker.

Two endpoints answer that way, each a kind of job: ``POST /v1/responses/compact``
(``compaction``, :mod:`app.compaction`) and ``POST /v1/responses/input_tokens``
(``input_tokens``, :mod:`app.token_count`). The gateway validates the request, stores the job
(what the worker needs, JSON, with a TTL) and queues the kind's task (:func:`start_job`); a
worker reads the job (:func:`take_job`), does it and pushes the answer, or an error, to the
job's result list (:func:`push_result`, :func:`fail_job`), which the gateway pops
(:func:`wait_for_result`). A job is answered once: a redelivered task finds the answer there
(or the job gone once the gateway took it) and does nothing.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal, Protocol

from app.config import Settings
from app.dispatch import QUEUE_UNAVAILABLE_MESSAGE, QueueUnavailableError
from app.errors import (
    AppError,
    InvalidRequestError,
    ModelBehaviorError,
    ServerError,
    UpstreamError,
    retry_later,
)
from app.store import ResponseStore

JobKind = Literal["compaction", "input_tokens"]

RESULT_TTL_SECONDS = 600
"""How long an answer waits for its gateway (and a job outlives the gateway's wait)."""

logger = logging.getLogger(__name__)


class JobQueue(Protocol):
    """Queues jobs on the ``inference`` queue, one task per kind (:mod:`broker.jobs`)."""

    def enqueue_job(self, kind: JobKind, job_id: str) -> None:
        """Queue the job (:class:`QueueUnavailableError`: the broker is away)."""


def checked_body(body: Any, fields: frozenset[str]) -> dict[str, Any]:
    """The request's body: a JSON object of the endpoint's ``fields`` only.

    Raises:
        InvalidRequestError: not an object, or a field the endpoint does not take.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    for name in body:
        if name not in fields:
            raise InvalidRequestError(
                f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter"
            )
    return dict(body)


def start_job(
    store: ResponseStore,
    queue: JobQueue,
    settings: Settings,
    kind: JobKind,
    job_id: str,
    job: dict[str, Any],
) -> None:
    """Store the job and queue its task.

    Raises:
        AppError: a 503 to retry when the broker is away, a 500 when the send failed otherwise.
    """
    ttl = int(settings.sync_timeout_seconds) + RESULT_TTL_SECONDS
    store.redis.set(store.keys.job(kind, job_id), json.dumps(job), ex=ttl)
    try:
        queue.enqueue_job(kind, job_id)
    except QueueUnavailableError as exc:
        raise retry_later(QUEUE_UNAVAILABLE_MESSAGE) from exc
    except Exception as exc:
        logger.exception("could not enqueue the %s job", kind)
        raise ServerError(f"The server could not queue the {_named(kind)}.") from exc


def wait_for_result(
    store: ResponseStore, kind: JobKind, job_id: str, *, timeout_seconds: float
) -> dict[str, Any]:
    """The job's answer once a worker pushed it; the job is removed.

    Raises:
        AppError: the worker's error (the model failed, …), or a ``ServerError`` on timeout.
    """
    popped = store.redis.blpop([store.keys.job_result(kind, job_id)], timeout=timeout_seconds)
    if popped is None:
        raise ServerError(
            f"The {_named(kind)} did not finish within {timeout_seconds:.0f}s; try again later."
        )
    store.redis.delete(store.keys.job(kind, job_id))
    result: dict[str, Any] = json.loads(popped[1])
    error = result.get("error")
    if error is not None:
        raise _error_from(error)
    return result


def take_job(store: ResponseStore, kind: JobKind, job_id: str) -> dict[str, Any] | None:
    """The worker's side: the job to do; None when it was answered (or taken, or expired)."""
    raw = store.redis.get(store.keys.job(kind, job_id))
    if raw is None or store.redis.exists(store.keys.job_result(kind, job_id)):
        return None
    job: dict[str, Any] = json.loads(raw)
    return job


def push_result(store: ResponseStore, kind: JobKind, job_id: str, result: dict[str, Any]) -> None:
    """Push the answer the gateway pops (kept a while in case it is not waiting yet)."""
    key = store.keys.job_result(kind, job_id)
    pipe = store.redis.pipeline(transaction=True)
    pipe.rpush(key, json.dumps(result))
    pipe.expire(key, RESULT_TTL_SECONDS)
    pipe.execute()


def fail_job(store: ResponseStore, kind: JobKind, job_id: str, error: AppError) -> None:
    """Hand the waiting gateway an error instead of an answer."""
    body = {**error.to_dict()["error"], "status": error.status}
    push_result(store, kind, job_id, {"error": body})


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


def _named(kind: JobKind) -> str:
    return "compaction" if kind == "compaction" else "token count"
