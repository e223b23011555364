"""The console: a static page (``/console``) and the JSON it polls under ``/v1/console/``.

The page is served without a key; it asks for one, keeps it in the tab's session storage and
sends it as a bearer header to the JSON endpoints, which are behind the same keys as the API:
a tenant sees the fleet's queues and workers, and only its own responses. The response to look
at rides in the URL's fragment (``/console#resp_…``), which never reaches a server log.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from app.timeline import response_timeline
from broker.fleet_status import console_fleet
from gateway.auth import CONSOLE_PAGE, current_tenant
from gateway.context import gateway

blueprint = Blueprint(
    "console", __name__, static_folder="console", static_url_path=f"{CONSOLE_PAGE}/static"
)


@blueprint.get(CONSOLE_PAGE)
def page() -> Response:
    """The console's page."""
    response = blueprint.send_static_file("index.html")
    response.headers["Cache-Control"] = "no-cache"
    return response


@blueprint.get("/v1/console/fleet")
def fleet() -> Response:
    """The fleet now: queues and their depth, workers alive per queue, responses in flight."""
    return jsonify(console_fleet(gateway().store))


@blueprint.get("/v1/console/responses/<response_id>/timeline")
def timeline(response_id: str) -> Response:
    """One response's waterfall: its turns, model calls and tool calls, with their waits."""
    gw = gateway()
    return jsonify(response_timeline(gw.store, response_id, tenant=current_tenant().name))
