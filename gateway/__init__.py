"""The HTTP gateway: validates, enqueues, relays. It never runs a model or a tool.

``gateway.factory.create_app`` builds it. This file imports nothing of the gateway's own:
gunicorn loads ``gateway.gunicorn_conf``, and with it this file, before its gevent patch, so
nothing that imports redis or flask may run here (redis-py would keep unpatched names).
"""

from __future__ import annotations

import app  # noqa: F401 - first, before anything imports redis (ANTWORT_HIREDIS, app/__init__)
