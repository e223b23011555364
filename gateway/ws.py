"""WebSocket mode of ``/v1/responses`` (flask-sock).

The handshake is an ordinary request, so bearer auth applies to it; the connection is then
served by ``app.socket_session``. Under gunicorn's gevent worker simple-websocket's reader thread
is a greenlet, like the SSE relay's waits.

When the connection's time is up, or the client sent nothing for ``websocket_idle_seconds``, the
gateway runs the closing handshake to its end: it sends a close frame (its reason the code of the
error event sent just before), then waits for the client's before gunicorn closes the socket.
Closing at once would leave the client's close frame unread, and the kernel answers unread data
with a reset, which the client sees instead of a clean close.
"""

from __future__ import annotations

from flask import Blueprint, Flask
from flask_sock import Sock
from simple_websocket import Server
from wsproto.frame_protocol import CloseReason

from app.config import Settings
from app.limits import Caller
from app.socket_session import SocketSession
from app.telemetry.metrics import OPEN_STREAMS
from gateway.auth import current_tenant
from gateway.context import gateway

blueprint = Blueprint("websocket", __name__)
_sock = Sock()

_CLOSE_TIMEOUT_SECONDS = 5.0
"""How long the client has to answer our close frame before the socket is closed anyway."""


@_sock.route("/v1/responses", bp=blueprint)  # type: ignore[untyped-decorator]
def responses_socket(ws: Server) -> None:
    """Serve ``response.create`` messages until the client leaves or the time limit."""
    gw = gateway()
    session = SocketSession(
        store=gw.store,
        hub=gw.hub,
        dispatcher=gw.dispatcher,
        settings=gw.settings,
        caller=Caller(current_tenant(), gw.limiter, tenants=gw.tenants.count),
    )
    with OPEN_STREAMS.labels("websocket").track_inprogress():
        reason = session.serve(ws)  # time up or idle (a client that left ends it by raising)
        close(ws, reason=reason)


def close(ws: Server, *, reason: str) -> None:
    """Send a close frame (1000, ``reason``) and wait until the client answers with its own."""
    ws.close(reason=CloseReason.NORMAL_CLOSURE, message=reason)
    # The reader ends when it has read the client's close frame (or the socket failed).
    ws.thread.join(timeout=_CLOSE_TIMEOUT_SECONDS)


def register(app: Flask, settings: Settings) -> None:
    """Accept WebSocket upgrades on ``/v1/responses`` (POST stays the HTTP create)."""
    app.config["SOCK_SERVER_OPTIONS"] = {
        "max_message_size": settings.max_body_bytes,
        "ping_interval": settings.keepalive_seconds,
    }
    app.register_blueprint(blueprint)
