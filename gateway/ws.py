"""WebSocket mode of ``/v1/responses`` (flask-sock).

The handshake is an ordinary request, so bearer auth applies to it; the connection is then
served by ``app.socket_session``. Under gunicorn's gevent worker simple-websocket's reader thread
is a greenlet, like the SSE relay's waits.
"""

from __future__ import annotations

from flask import Blueprint, Flask
from flask_sock import Sock
from simple_websocket import Server

from app.config import Settings
from app.socket_session import SocketSession
from gateway.context import gateway

blueprint = Blueprint("websocket", __name__)
_sock = Sock()


@_sock.route("/v1/responses", bp=blueprint)  # type: ignore[untyped-decorator]
def responses_socket(ws: Server) -> None:
    """Serve ``response.create`` messages until the client leaves or the time limit."""
    gw = gateway()
    session = SocketSession(
        store=gw.store, hub=gw.hub, dispatcher=gw.dispatcher, settings=gw.settings
    )
    session.serve(ws)


def register(app: Flask, settings: Settings) -> None:
    """Accept WebSocket upgrades on ``/v1/responses`` (POST stays the HTTP create)."""
    app.config["SOCK_SERVER_OPTIONS"] = {
        "max_message_size": settings.max_body_bytes,
        "ping_interval": settings.keepalive_seconds,
    }
    app.register_blueprint(blueprint)
