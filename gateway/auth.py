"""Bearer-key auth (``ANTWORT_API_KEYS``); health endpoints stay open for probes."""

from __future__ import annotations

import hmac

from flask import Flask, request

from app.errors import AuthenticationError

_OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def register(app: Flask, keys: frozenset[str]) -> None:
    """Check every request's bearer key when keys are configured."""
    if not keys:
        return

    @app.before_request
    def _check_key() -> None:
        if request.path in _OPEN_PATHS:
            return
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not any(
            hmac.compare_digest(token.strip(), key) for key in keys
        ):
            raise AuthenticationError("Incorrect or missing API key.")
