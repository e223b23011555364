"""The HTTP gateway: validates, enqueues, relays. It never runs a model or a tool."""

from __future__ import annotations

from gateway.factory import create_app

__all__ = ["create_app"]
