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
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from app.tenancy import Limits, Tenant
from tests.app.test_loop import Loop, internal
from tests.app.test_run import USAGE, answer
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text

NOW = 1_800_000_010.0
"""Ten seconds into a minute's window."""


def tokens_used(store: ResponseStore, tenant: str) -> int:
    """The tenant's tokens as its ledger last counted them, in the minute it counted them in
    (a test that charges after its create keeps both in one minute: :func:`in_one_minute`)."""
    return int(store.redis.hget(store.keys.token_ledger(tenant), "used") or 0)


def test_token_charge_adds_only_what_passes_the_reservation(store: ResponseStore) -> None:
    charge = {"tenant": "team-a", "reserved": 20}
    key = store.keys.token_ledger("team-a")

    def charged(before: int, after: int) -> int:
        return charge_usage(store, charge, before=before, after=after, clock=lambda: NOW)

    assert [charged(0, 12), charged(12, 24), charged(24, 36), charged(36, 36)] == [0, 4, 12, 0]
    assert tokens_used(store, "team-a") == 16
    assert 0 < store.redis.pttl(key) <= 2 * WINDOW_MS  # no limit known yet: two minutes
    assert charge_usage(store, None, before=0, after=1_000, clock=lambda: NOW) == 0
    assert tokens_used(store, "team-a") == 16


def in_one_minute(seconds: float = 5.0) -> None:
    """Wait for the next minute when this one has less than ``seconds`` left: a test's charges
    then land in the minute of its create (the next minute would pay the reservation off)."""
    seconds_left = 60 - time.time() % 60
    if seconds_left < seconds:
        time.sleep(seconds_left + 0.1)


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
    in_one_minute()
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
    in_one_minute()  # the run's charge and the next create in one minute's window
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


def test_token_charge_what_passed_the_limit_is_carried_into_the_next_minutes(
    store: ResponseStore,
) -> None:
    """A response that took three minutes' tokens keeps its tenant out for two more minutes,
    then lets in what fits. Before, the next minute started at zero: a tool loop's tenant
    could take its limit many times over, minute after minute."""
    now = [NOW]
    limiter = RateLimiter(store, clock=lambda: now[0])
    tenant = Tenant(name="team-a", limits=Limits(tokens_per_minute=100))
    limiter.admit_response(tenant, "resp_1", 60)
    charge_usage(
        store, {"tenant": "team-a", "reserved": 60}, before=0, after=250, clock=lambda: now[0]
    )

    refusals = []
    for minutes, tokens in ((0, 1), (1, 1), (1.8, 1), (2, 50), (2, 1), (3, 100)):
        now[0] = NOW + 60 * minutes
        try:
            limiter.admit_response(tenant, f"resp_{minutes}_{tokens}", tokens)
        except RateLimitError as refused:
            refusals.append((minutes, tokens, refused.headers["Retry-After"]))

    # 250 in the first minute: 150 carried into the second, 50 into the third (50 more fit)
    assert refusals == [(0, 1, "110"), (1, 1, "50"), (1.8, 1, "2"), (2, 1, "50")]


def test_token_charge_a_minute_without_creates_pays_off_its_share(store: ResponseStore) -> None:
    limiter = RateLimiter(store, clock=lambda: NOW)
    tenant = Tenant(name="team-a", limits=Limits(tokens_per_minute=100))
    limiter.admit_response(tenant, "resp_1", 100)
    charge_usage(
        store, {"tenant": "team-a", "reserved": 100}, before=0, after=330, clock=lambda: NOW
    )
    assert 0 < store.redis.pttl(store.keys.token_ledger("team-a")) <= 6 * WINDOW_MS

    later = RateLimiter(store, clock=lambda: NOW + 180)  # three minutes on: 30 carried
    headers = later.admit_response(tenant, "resp_2", 70)

    assert headers["x-ratelimit-remaining-tokens"] == "0"
    assert headers["x-ratelimit-reset-tokens"] == "50s"
    with pytest.raises(RateLimitError, match="Please try again in 50s"):
        later.admit_response(tenant, "resp_3", 1)


def test_token_charge_a_create_larger_than_the_limit_is_told_so(store: ResponseStore) -> None:
    limiter = RateLimiter(store, clock=lambda: NOW)
    tenant = Tenant(name="team-a", limits=Limits(tokens_per_minute=100))

    with pytest.raises(RateLimitError, match="Request too large") as refused:
        limiter.admit_response(tenant, "resp_1", 101)

    assert "limit 100, requested 101. The input or output tokens must be reduced" in str(
        refused.value
    )
    assert refused.value.type == "tokens"
    assert tokens_used(store, "team-a") == 0


def test_token_charge_the_count_before_a_compaction_is_charged_in_full(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """The count is a model call the response's usage does not hold: 14 tokens (the fake
    server's usage) on top of the reservation. Before, only the metrics saw it."""
    settings = make_settings()
    first, _ = create_response(
        store,
        RecordingDispatcher(),
        settings,
        {"model": "m", "background": True, "input": "Hi"},
        caller=Caller(Tenant(name="team-a")),
    )
    advance_response(
        RunDeps(store=store, provider=answer("Hello."), settings=settings), first.id, 0
    )
    body = {
        "model": "m",
        "background": True,
        "input": "When? " + "x" * 5000,  # over the bytes' bound: its tokens are counted
        "previous_response_id": first.id,  # a summary would shorten it
        "context_management": [{"type": "compaction", "compact_threshold": 5000}],
    }
    in_one_minute()
    response, _ = create_response(
        store, RecordingDispatcher(), settings, body, caller=limited(100_000, store)
    )
    reserved = store.get(response.id).extra[TOKEN_CHARGE_EXTRA]["reserved"]
    model = answer("On Tuesday.")

    advance_response(RunDeps(store=store, provider=model, settings=settings), response.id, 0)

    measured, _ = model.requests
    assert measured.params["max_tokens"] == 1
    assert loaded_usage(store, response.id) == USAGE.total_tokens < reserved
    assert tokens_used(store, "team-a") == reserved + USAGE.total_tokens


def loaded_usage(store: ResponseStore, response_id: str) -> int:
    usage = store.get(response_id).response.usage
    return usage.total_tokens if usage else 0
