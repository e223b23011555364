"""``POST /v1/responses/compact``: queue a summary turn on the fleet and wait for its answer."""

from __future__ import annotations

from flask import Blueprint, Flask, Response, current_app, jsonify

from app import compaction
from app.compaction import CompactionQueue
from gateway.auth import current_tenant
from gateway.context import gateway
from gateway.responses import json_body

blueprint = Blueprint("compact", __name__)

_EXTENSION = "antwort.compaction"


def register(app: Flask, queue: CompactionQueue) -> None:
    """Serve the endpoint, queueing jobs on ``queue``."""
    app.extensions[_EXTENSION] = queue
    app.register_blueprint(blueprint)


@blueprint.post("/v1/responses/compact")
def compact() -> Response:
    """Compact the given conversation into user messages and one sealed ``compaction`` item."""
    gw = gateway()
    compaction_id = compaction.start_compaction(
        gw.store,
        current_app.extensions[_EXTENSION],
        gw.settings,
        json_body(),
        tenant=current_tenant().name,
    )
    return jsonify(
        compaction.wait_for_compaction(
            gw.store, compaction_id, timeout_seconds=gw.settings.sync_timeout_seconds
        )
    )
