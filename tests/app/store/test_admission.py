"""Rate limits (``admit.lua``) on one Redis and on a cluster (a tenant's keys: one slot)."""

from __future__ import annotations

import pytest

from app.errors import RateLimitError, ServerError
from app.limits import RateLimiter
from app.store import ResponseStore
from app.tenancy import Limits, Tenant


def test_requests_and_tokens_per_minute_are_counted_in_the_tenants_slot(
    store: ResponseStore,
) -> None:
    limiter = RateLimiter(store, clock=lambda: 1_000_000.0)
    tenant = Tenant(name="acme", limits=Limits(requests_per_minute=2, tokens_per_minute=100))

    limiter.admit_request(tenant)
    headers = limiter.admit_request(tenant)
    limiter.admit_response(tenant, "resp_1", 60)

    assert headers["x-ratelimit-remaining-requests"] == "0"
    with pytest.raises(RateLimitError):
        limiter.admit_request(tenant)
    with pytest.raises(RateLimitError):
        limiter.admit_response(tenant, "resp_2", 60)


def test_the_in_flight_limit_says_it_does_not_run_on_a_cluster(store: ResponseStore) -> None:
    limiter = RateLimiter(store)
    tenant = Tenant(name="acme", limits=Limits(max_in_flight=1))

    if not store.keys.is_sharded:
        limiter.admit_response(tenant, "resp_1", 10)
        return
    with pytest.raises(ServerError, match="Redis Cluster"):
        limiter.admit_response(tenant, "resp_1", 10)
