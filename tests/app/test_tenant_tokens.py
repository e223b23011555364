"""A tenant's tokens, on real Redis: its tokens per minute count what the model took (a run
charges its response's usage beyond the tokens its create reserved, ``app.limits.charge_usage``),
and the metrics count them by tenant."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from app.config import Settings
from app.errors import RateLimitError
from app.limits import TOKEN_CHARGE_EXTRA, WINDOW_MS, Caller, RateLimiter, charge_usage
from app.responses import create_response
from app.store import ResponseStore
from app.tenancy import Limits, Tenant
from tests.app.test_loop import Loop, internal
from tests.support.model import ScriptedModel, calls, text

NOW = 1_800_000_010.0
"""Ten seconds into a minute's window."""


def tokens_used(store: ResponseStore, tenant: str) -> int:
    """The tenant's tokens in every window there is (a run may cross into the next minute)."""
    pattern = store.keys.rate_window(tenant, "tokens", 0).removesuffix("0") + "*"
    return sum(int(store.redis.get(key) or 0) for key in store.redis.scan_iter(match=pattern))


def test_token_charge_adds_only_what_passes_the_reservation(store: ResponseStore) -> None:
    charge = {"tenant": "team-a", "reserved": 20}
    key = store.keys.rate_window("team-a", "tokens", int(NOW * 1000) // WINDOW_MS)

    def charged(before: int, after: int) -> int:
        return charge_usage(store, charge, before=before, after=after, clock=lambda: NOW)

    assert [charged(0, 12), charged(12, 24), charged(24, 36), charged(36, 36)] == [0, 4, 12, 0]
    assert int(store.redis.get(key)) == 16
    assert 0 < store.redis.pttl(key) <= 2 * WINDOW_MS
    assert charge_usage(store, None, before=0, after=1_000, clock=lambda: NOW) == 0
    assert int(store.redis.get(key)) == 16


def limited(tokens_per_minute: int, store: ResponseStore) -> Caller:
    tenant = Tenant(name="team-a", limits=Limits(tokens_per_minute=tokens_per_minute))
    return Caller(tenant, RateLimiter(store))


@pytest.fixture
def make_loop(store: ResponseStore, make_settings: Callable[..., Settings]) -> Callable[..., Loop]:
    def make(*turns: Any) -> Loop:
        settings = make_settings(internal_tool_modules="tests.support.tools")
        return Loop(store=store, settings=settings, model=ScriptedModel(*turns))

    return make


def create(loop: Loop, caller: Caller, **body: Any) -> str:
    body = {"input": "go", "tools": internal("fast_echo"), **body}
    response, _ = create_response(loop.store, loop.dispatcher, loop.settings, body, caller=caller)
    return response.id


def test_token_charge_a_tool_loop_is_charged_its_usage_turn_by_turn(
    store: ResponseStore, make_loop: Callable[..., Loop]
) -> None:
    loop = make_loop(calls(("call_a", "fast_echo", "{}")), text("done"))  # 12 tokens a turn
    rid = create(loop, limited(1_000, store))
    reserved = store.get(rid).extra[TOKEN_CHARGE_EXTRA]["reserved"]
    assert tokens_used(store, "team-a") == reserved < 12  # the estimate of "go"

    assert loop.drive(rid) == "completed"

    # the second turn is another run, which read what the first had written and charged
    assert loop.response(rid).usage.total_tokens == 24
    assert tokens_used(store, "team-a") == 24


def test_token_charge_nothing_more_when_the_usage_stays_under_the_reservation(
    store: ResponseStore, make_loop: Callable[..., Loop]
) -> None:
    loop = make_loop(calls(("call_a", "fast_echo", "{}")), text("done"))
    rid = create(loop, limited(1_000, store), max_output_tokens=100)

    assert loop.drive(rid) == "completed"

    reserved = store.get(rid).extra[TOKEN_CHARGE_EXTRA]["reserved"]
    assert reserved > 100 > loop.response(rid).usage.total_tokens
    assert tokens_used(store, "team-a") == reserved  # no refund either, as OpenAI's estimate


def test_token_charge_none_without_a_tokens_per_minute_limit(
    store: ResponseStore, make_loop: Callable[..., Loop]
) -> None:
    loop = make_loop(text("done"))
    requests_only = Tenant(name="team-a", limits=Limits(requests_per_minute=100))
    rid = create(loop, Caller(requests_only, RateLimiter(store)))

    assert loop.drive(rid) == "completed"

    assert TOKEN_CHARGE_EXTRA not in store.get(rid).extra
    assert tokens_used(store, "team-a") == 0


def test_token_charge_takes_the_tenant_over_its_limit_and_its_next_create_waits(
    store: ResponseStore, make_loop: Callable[..., Loop]
) -> None:
    loop = make_loop(calls(("call_a", "fast_echo", "{}")), text("done"))
    caller = limited(20, store)  # "go" is admitted; its two turns take 24
    seconds_left = 60 - time.time() % 60
    if seconds_left < 5:  # the run's charge and the next create in one minute's window
        time.sleep(seconds_left + 0.1)
    rid = create(loop, caller)
    assert loop.drive(rid) == "completed"

    with pytest.raises(RateLimitError, match="tokens per minute") as refused:
        create(loop, caller)

    assert refused.value.type == "tokens"


def test_tenant_tokens_are_counted_by_tenant_in_the_metrics(
    store: ResponseStore, make_loop: Callable[..., Loop]
) -> None:
    def counted(tenant: str, direction: str) -> float:
        labels = {"tenant": tenant, "direction": direction}
        return REGISTRY.get_sample_value("antwort_tenant_tokens_total", labels) or 0.0

    loop = make_loop(calls(("call_a", "fast_echo", "{}")), text("done"))  # 10 in, 2 out a turn
    before = {(t, d): counted(t, d) for t in ("team-z", "open") for d in ("input", "output")}
    rid = create(loop, Caller(Tenant(name="team-z")))  # no limits: counted all the same
    opened = create(loop, Caller(Tenant(name="")))  # a fleet without keys

    assert loop.drive(rid) == loop.drive(opened) == "completed"

    assert counted("team-z", "input") - before["team-z", "input"] == 20
    assert counted("team-z", "output") - before["team-z", "output"] == 4
    assert counted("open", "input") - before["open", "input"] == 10  # the script's last turn
