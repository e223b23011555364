"""Bearer keys → tenants (``app.tenancy``), and each tenant's request limit.

Every path but the probes and the console's static page wants a key once any key is configured
(``ANTWORT_API_KEYS`` or a key stored by ``antwort keys``); ``/metrics`` wants
``ANTWORT_METRICS_KEY`` when that is set, and is open otherwise. The tenant of the request is
:func:`current_tenant` for the views.
"""

from __future__ import annotations

import hmac

from flask import Flask, Response, g, request

from app.errors import AuthenticationError
from app.limits import RateLimiter
from app.tenancy import OPEN_TENANT, Tenant, TenantDirectory, key_digest

_PROBES = frozenset({"/healthz", "/readyz"})
_METRICS = "/metrics"
CONSOLE_PAGE = "/console"


def register(
    app: Flask, tenants: TenantDirectory, limiter: RateLimiter, *, metrics_key: str | None
) -> None:
    """Resolve every request's tenant and count it against its limits."""

    @app.before_request
    def _check_key() -> None:
        if request.path in _PROBES or _is_console_page(request.path):
            return
        if request.path == _METRICS:
            _check_metrics_key(metrics_key)
            return
        tenant = tenants.resolve(request.headers.get("Authorization"))
        g.antwort_tenant = tenant
        g.antwort_rate_headers = limiter.admit_request(tenant)

    @app.after_request
    def _rate_headers(response: Response) -> Response:
        response.headers.update(g.get("antwort_rate_headers", {}))
        return response


def _is_console_page(path: str) -> bool:
    """The console's page and its files: static, no data (its JSON wants a key)."""
    return path == CONSOLE_PAGE or path.startswith(f"{CONSOLE_PAGE}/static/")


def _check_metrics_key(metrics_key: str | None) -> None:
    if not metrics_key:
        return
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    # digests: compare_digest takes ASCII text only, and a header may hold any character
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        key_digest(token.strip()), key_digest(metrics_key)
    ):
        raise AuthenticationError("Incorrect or missing metrics key.")


def current_tenant() -> Tenant:
    """The tenant of the current request (the open tenant outside the key check)."""
    tenant: Tenant = g.get("antwort_tenant", Tenant(name=OPEN_TENANT))
    return tenant


def add_rate_headers(headers: dict[str, str]) -> None:
    """More ``x-ratelimit-*`` headers for the current answer (a create's tokens)."""
    g.antwort_rate_headers = {**g.get("antwort_rate_headers", {}), **headers}
