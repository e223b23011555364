"""The HTTP gateway: validates, enqueues, relays. It never runs a model or a tool."""

from __future__ import annotations

import app  # noqa: F401 - first, before anything imports redis (ANTWORT_HIREDIS, app/__init__)
from gateway.factory import create_app

__all__ = ["create_app"]
