"""``/healthz`` (the process answers) and ``/readyz`` (Redis and an inference worker are there)."""

from __future__ import annotations

import redis
from flask import Blueprint, Response, jsonify

from gateway.context import gateway

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz() -> Response:
    """Liveness: the gateway process serves requests."""
    return jsonify({"status": "ok"})


@blueprint.get("/readyz")
def readyz() -> Response:
    """Readiness: Redis answers and at least one live worker consumes ``inference``."""
    gw = gateway()
    checks: dict[str, str] = {}
    try:
        gw.store.redis.ping()
        checks["redis"] = "ok"
        workers = gw.store.live_workers("inference")
        checks["inference_workers"] = str(workers)
        ready = workers > 0
    except redis.RedisError as exc:
        checks["redis"] = f"unreachable: {exc}"
        ready = False
    response = jsonify({"status": "ready" if ready else "not_ready", "checks": checks})
    response.status_code = 200 if ready else 503
    return response
