"""Rate limits (``admit.lua``) on one Redis and on a cluster (a tenant's keys: one slot).

On the cluster the in-flight count asks the responses' records (other slots) first.
"""

from __future__ import annotations

import time

import pytest

from app.errors import RateLimitError
from app.limits import RateLimiter, charge_usage
from app.protocol.response import ResponseStatus
from app.store import ResponseStore
from app.store.status import CANCEL
from app.tenancy import Limits, Tenant
from tests.support.responses import stored_response


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


def test_the_in_flight_limit_counts_until_a_response_ends(store: ResponseStore) -> None:
    limiter = RateLimiter(store)
    tenant = Tenant(name="acme", limits=Limits(max_in_flight=2))
    first = stored_response(store, status=ResponseStatus.QUEUED)
    second = stored_response(store, status=ResponseStatus.QUEUED)
    for response in (first, second):
        limiter.admit_response(tenant, response.id, 10)
        limiter.confirm(tenant, response.id)
        store.watch_queued(response.id, until=time.time() + 60)

    with pytest.raises(RateLimitError, match="2 responses queued or running"):
        limiter.admit_response(tenant, "resp_third", 10)
    done = first.model_copy(update={"status": ResponseStatus.CANCELLED})
    assert store.write(done, transition=CANCEL, events=[]).ok

    limiter.admit_response(tenant, "resp_third", 10)  # the cancelled one's place


def test_tokens_past_the_limit_are_carried_in_the_tenants_ledger(store: ResponseStore) -> None:
    minute = 60.0 * 30_000_000
    tenant = Tenant(name="acme", limits=Limits(tokens_per_minute=100))
    charge = {"tenant": "acme", "reserved": 90}
    RateLimiter(store, clock=lambda: minute).admit_response(tenant, "resp_1", 90)
    charge_usage(store, charge, before=0, after=290, clock=lambda: minute + 30)  # 290 used

    next_minute = RateLimiter(store, clock=lambda: minute + 60)
    with pytest.raises(RateLimitError) as refused:
        next_minute.admit_response(tenant, "resp_2", 20)  # 190 carried: 20 fit in two minutes

    assert refused.value.headers["Retry-After"] == "120"
    assert refused.value.headers["x-ratelimit-reset-tokens"] == "120s"
    headers = RateLimiter(store, clock=lambda: minute + 120).admit_response(tenant, "resp_3", 10)
    assert headers["x-ratelimit-remaining-tokens"] == "0"  # 90 carried, 10 more
    # a worker whose clock is a minute behind charges the ledger's minute, not its own
    assert charge_usage(store, charge, before=290, after=300, clock=lambda: minute + 60) == 10
    assert store.redis.hget(store.keys.token_ledger("acme"), "used") in (b"110", "110")
