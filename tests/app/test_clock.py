"""The fleet's one clock (``app.store.clock``): Redis's, whatever the host's own clock says.

A host whose clock is off is played by moving this process's ``time.time`` (what a host's clock
gives Python) while Redis keeps the true time; the monotonic clock is left alone, as a step of the
wall clock leaves it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import redis

from app.config import Settings
from app.keys import Keys
from app.lease import LeaseKeeper, sweep
from app.limits import RateLimiter
from app.responses import create_response
from app.store import ResponseStore
from app.store.clock import RedisClock
from app.tenancy import Limits, Tenant
from programs.ports import free_port
from tests.support.dispatch import RecordingDispatcher
from tests.support.faketime import clock_off, libfaketime
from tests.support.responses import stored_response

SKEW = 600.0
"""How far off the host's clock is, in seconds (ten minutes: a suspended VM, a dead NTP)."""


@pytest.fixture
def store(store_on_both: ResponseStore) -> ResponseStore:
    """One Redis's, then a cluster's (``TIME`` goes to one node there)."""
    return store_on_both


@pytest.fixture
def host_clock_off(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """``host_clock_off(seconds)``: this host's clock is off by ``seconds`` from now on."""
    true_time = time.time

    def off(seconds: float) -> None:
        monkeypatch.setattr(time, "time", lambda: true_time() + seconds)

    return off


def _redis_seconds(store: ResponseStore) -> float:
    seconds, microseconds = store.redis.time()
    return seconds + microseconds / 1_000_000


def test_the_stores_clock_is_redis_whatever_the_hosts_says(
    store: ResponseStore, host_clock_off: Callable[[float], None]
) -> None:
    host_clock_off(SKEW)

    assert abs(store.now() - _redis_seconds(store)) < 1.0
    assert store.now() < time.time() - SKEW / 2


def test_the_clock_runs_on_between_its_readings_of_redis(
    store: ResponseStore, host_clock_off: Callable[[float], None]
) -> None:
    first = store.now()
    host_clock_off(-SKEW)  # the host's clock steps back meanwhile
    time.sleep(0.2)

    assert 0.15 < store.now() - first < 5


def test_a_clock_that_cannot_read_redis_says_so_as_redis_commands_do() -> None:
    """Its caller was about to send Redis a command of its own: it meets the error one step
    sooner, never a time off the host's clock."""
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=None)
    clock = RedisClock(client)

    with pytest.raises(redis.ConnectionError):
        clock.now()
    client.close()


def test_a_worker_whose_clock_is_ahead_and_dies_has_its_turn_sent_round_within_a_lease(
    store: ResponseStore, host_clock_off: Callable[[float], None]
) -> None:
    """Its lease's watch is set by the fleet's clock, so a sweeper with a true clock sees it
    lapse when the lease does. It lay ten minutes (the skew) in the future: the response stood
    still that long after its worker died."""
    rid = stored_response(store).id
    host_clock_off(SKEW)
    dead = LeaseKeeper(store, lease_seconds=0.3)
    assert dead.acquire(rid, 0).taken
    dead._held.clear()  # the worker dies: nobody renews its lease
    host_clock_off(0.0)  # the sweeper's host keeps true time
    time.sleep(0.5)  # the lease lapses
    dispatcher = RecordingDispatcher()

    assert sweep(store, dispatcher, lease_seconds=0.3) == [rid]
    assert dispatcher.turns == [(rid, 0)]


def test_a_worker_whose_clock_is_behind_beats_as_alive(
    store: ResponseStore, host_clock_off: Callable[[float], None]
) -> None:
    """Its heartbeat was stamped with its own clock: a minute behind, every gateway counted it
    dead (``/readyz`` not ready, ``antwort status`` without it)."""
    host_clock_off(-60.0)
    store.heartbeat_worker("inference", "slow-clock@host", threads=4)
    host_clock_off(0.0)

    assert store.live_workers("inference") == 1
    assert list(store.workers_alive("inference")) == ["slow-clock@host"]
    assert store.live_threads("inference") == 4


def test_a_tool_worker_whose_clock_is_ahead_and_dies_has_its_call_sent_round_within_a_claim(
    store: ResponseStore, host_clock_off: Callable[[float], None]
) -> None:
    """A running tool call's watch lay the skew in the future too."""
    rid = stored_response(store).id
    store.redis.zadd(store.keys.active_of(rid), {rid: store.now() + 60})  # handed to the call
    host_clock_off(SKEW)
    assert store.open_tool_call(rid, "c1", token="dead", claim_seconds=0.3).claim == "claimed"
    host_clock_off(0.0)
    time.sleep(0.5)  # the claim lapses: its worker died
    dispatcher = RecordingDispatcher()

    assert sweep(store, dispatcher, lease_seconds=3) == [rid]
    assert dispatcher.turns == [(rid, 0)]


def test_a_response_is_stamped_by_the_fleets_clock(
    store: ResponseStore,
    host_clock_off: Callable[[float], None],
    make_settings: Callable[..., Settings],
) -> None:
    """``created_at`` by a gateway's clock, ``completed_at`` by a worker's: a response could
    complete before it was created. Both are the fleet's now."""
    host_clock_off(SKEW)
    response, _ = create_response(store, RecordingDispatcher(), make_settings(), {"input": "hi"})

    assert abs(response.created_at - _redis_seconds(store)) <= 2


def test_a_queued_response_of_a_gateway_whose_clock_is_ahead_is_sent_again_in_its_grace(
    store: ResponseStore,
    host_clock_off: Callable[[float], None],
    make_settings: Callable[..., Settings],
) -> None:
    """Its first turn's message was lost: the watch the gateway set goes off after the grace,
    not the grace and the skew."""
    settings = make_settings(queued_grace_seconds=0.2)
    host_clock_off(SKEW)
    response, _ = create_response(store, RecordingDispatcher(), settings, {"input": "hi"})
    host_clock_off(0.0)
    time.sleep(0.4)
    dispatcher = RecordingDispatcher()

    assert sweep(store, dispatcher, lease_seconds=3) == [response.id]
    assert dispatcher.turns == [(response.id, 0)]


@pytest.mark.skipif(libfaketime() is None, reason="needs Debian's faketime")
def test_gateways_whose_clocks_differ_count_a_tenants_requests_in_one_minute(
    redis_url: str, key_prefix: str
) -> None:
    """Each gateway took the minute off its own clock: a tenant whose requests went to two
    gateways a minute apart had each one's limit. The other gateway is a process whose clock
    is a minute ahead."""
    client = redis.Redis.from_url(redis_url)
    store = ResponseStore(client, keys=Keys(key_prefix), ttl_seconds=3600)
    tenant = Tenant(name="acme", limits=Limits(requests_per_minute=1))
    RateLimiter(store).admit_request(tenant)
    client.close()
    other_gateway = f"""
import redis
from app.errors import RateLimitError
from app.keys import Keys
from app.limits import RateLimiter
from app.store import ResponseStore
from app.tenancy import Limits, Tenant
client = redis.Redis.from_url({redis_url!r})
store = ResponseStore(client, keys=Keys({key_prefix!r}), ttl_seconds=60)
try:
    RateLimiter(store).admit_request(Tenant(name="acme", limits=Limits(requests_per_minute=1)))
except RateLimitError:
    print("refused")
else:
    print("admitted")
"""
    env = {**os.environ, **clock_off("+60s")}
    ran = subprocess.run(
        [sys.executable, "-c", other_gateway], env=env, capture_output=True, text=True, timeout=60
    )

    assert ran.stdout.strip() == "refused", ran.stderr
