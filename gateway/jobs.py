"""The endpoints a job on the fleet answers while the request waits (:mod:`app.jobs`).

``POST /v1/responses/compact`` (a summary turn) and ``POST /v1/responses/input_tokens`` (a
model call of one token, for its count).
"""

from __future__ import annotations

from typing import Any, Protocol

from flask import Blueprint, Flask, Response, current_app, jsonify

from app import compaction, token_count
from app.config import Settings
from app.jobs import JobKind, JobQueue, wait_for_answer
from app.limits import Caller
from app.store import ResponseStore
from gateway.auth import add_rate_headers, current_tenant
from gateway.context import gateway
from gateway.responses import in_turn

blueprint = Blueprint("jobs", __name__)

_EXTENSION = "antwort.jobs"


def register(app: Flask, queue: JobQueue) -> None:
    """Serve the endpoints, queueing their jobs on ``queue``."""
    app.extensions[_EXTENSION] = queue
    app.register_blueprint(blueprint)


@blueprint.post("/v1/responses/compact")
def compact() -> Response:
    """Compact the given conversation into user messages and one sealed ``compaction`` item."""
    return _answered("compaction", compaction.start_compaction)


@blueprint.post("/v1/responses/input_tokens")
def count_input_tokens() -> Response:
    """The input tokens of the response the body describes, counted by its model's server."""
    return _answered("input_tokens", token_count.start_count)


def _answered(kind: JobKind, start: _Start) -> Response:
    """Start the job the request's body describes, as the caller's tenant; its answer.

    The job is admitted against the tenant's limits and takes a place of its fair share (or
    waits parked for one) while the gateway waits; meanwhile the gateway queues the job again
    if its worker dies (:mod:`app.jobs`).
    """
    gw = gateway()
    queue = current_app.extensions[_EXTENSION]
    caller = Caller(current_tenant(), gw.limiter, tenants=gw.tenants.count)
    job_id = in_turn(lambda body: start(gw.store, queue, gw.settings, body, caller=caller))
    answer = wait_for_answer(
        gw.store,
        queue,
        gw.settings,
        kind,
        job_id,
        caller=caller,
        dispatcher=gw.dispatcher,
        hub=gw.hub,
    )
    add_rate_headers(caller.headers)
    return jsonify(answer)


class _Start(Protocol):
    def __call__(
        self,
        store: ResponseStore,
        queue: JobQueue,
        settings: Settings,
        body: Any,
        /,
        *,
        caller: Caller,
    ) -> str: ...
