"""The chaos set of ``make test`` (issue 16 §5): each fault once, against real processes.

A private ``redis-server`` (AOF), two gateways, two inference and two MCP workers with default
settings, the simulator with a kill switch and an MCP server that logs every run
(``tests/support/chaos.py``, which ``make chaos`` runs N times). Each test asserts the issue's
targets: the response ends as expected, its client got every event once, the text equals an
undisturbed run's, the tool ran a bounded number of times, and the first event after the fault
came within 30 s. The issue's 10 s is a speed target: ``make chaos`` (``bench/chaos.py``) holds
the fleet to it over many runs; here a busy machine gets slack, still enough to tell a rescue
(3–5 s on a quiet one) from none.

Targets the current code misses are marked ``xfail(strict=True)`` with the issue's section: a
fix turns the mark into a failure (XPASS), and the mark goes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.chaos import (
    POISON_SETTINGS,
    POISON_SHAPE,
    ChaosFleet,
    ChaosModel,
    Outcome,
    cancel_race,
    clock_ahead_kill,
    conversation_kill,
    gateway_kill,
    inference_kill,
    parked_tool_restart,
    poison_turn,
    problems,
    redis_restart,
    start_fleet,
    tool_kill,
)
from tests.support.faketime import libfaketime
from tests.support.private_redis import PrivateRedis

RECOVERY_MAX = 30.0
"""Seconds from a fault to the next event (and to ``/readyz`` dropping a dead worker)."""
BOUND = 45.0
"""Seconds a scenario waits after its fault for its responses to end: past ``RECOVERY_MAX``."""


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path_factory.mktemp("chaos-redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def chaos_model() -> Iterator[ChaosModel]:
    model = ChaosModel()
    yield model
    model.close()


@pytest.fixture(scope="module")
def chaos_fleet(
    private_redis: PrivateRedis, chaos_model: ChaosModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChaosFleet]:
    """The fleet with default settings (recovery timing is what most scenarios measure)."""
    fleet = start_fleet(private_redis, chaos_model, tmp_path_factory.mktemp("chaos-fleet"))
    yield fleet
    fleet.stop()


@pytest.fixture
def chaos(chaos_fleet: ChaosFleet) -> ChaosFleet:
    """The fleet, whole again after an earlier scenario's damage."""
    chaos_fleet.heal()
    return chaos_fleet


def _assert_targets(outcomes: list[Outcome], fleet: ChaosFleet) -> None:
    found = {
        f"{o.scenario}#{i}": problems(o, recovery_max=RECOVERY_MAX) for i, o in enumerate(outcomes)
    }
    found = {name: issues for name, issues in found.items() if issues}
    assert not found, f"{found}\n{fleet.fleet.logs()[-4000:]}"


def test_chaos_gateway_kill_client_resumes_on_another_gateway(chaos: ChaosFleet) -> None:
    _assert_targets(gateway_kill(chaos, bound=BOUND), chaos)


def test_chaos_cancel_races_end_every_response(chaos: ChaosFleet) -> None:
    _assert_targets(cancel_race(chaos, bound=BOUND), chaos)


def test_chaos_inference_worker_sigkill_mid_stream_recovers_within_seconds(
    chaos: ChaosFleet,
) -> None:
    _assert_targets(inference_kill(chaos, bound=BOUND), chaos)


def test_chaos_inference_worker_sigkill_in_a_long_conversation_response_keeps_its_items_whole(
    chaos: ChaosFleet,
) -> None:
    _assert_targets(conversation_kill(chaos, bound=BOUND), chaos)


@pytest.mark.skipif(libfaketime() is None, reason="needs Debian's faketime")
def test_chaos_inference_worker_whose_clock_is_ahead_sigkill_mid_stream_recovers_within_seconds(
    chaos: ChaosFleet,
) -> None:
    """The fleet keeps time by Redis's clock (``app.store.clock``): the dead worker's lease
    lapses for the sweepers when it does, not ten minutes later, when its clock said."""
    _assert_targets(clock_ahead_kill(chaos, bound=BOUND), chaos)


def test_chaos_tool_worker_sigkill_mid_call_recovers_within_seconds(chaos: ChaosFleet) -> None:
    _assert_targets(tool_kill(chaos, bound=BOUND), chaos)


@pytest.fixture(scope="module")
def tool_share_fleet(
    private_redis: PrivateRedis, chaos_model: ChaosModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChaosFleet]:
    """The fleet with one place a tenant on each tool queue (``app.tool_share``)."""
    fleet = start_fleet(
        private_redis,
        chaos_model,
        tmp_path_factory.mktemp("chaos-tool-share"),
        settings={"ANTWORT_TENANT_MAX_TOOL_CALLS": "1"},
    )
    yield fleet
    fleet.stop()


def test_chaos_tool_worker_sigkill_mid_call_under_a_tool_share_of_one_recovers_within_seconds(
    tool_share_fleet: ChaosFleet,
) -> None:
    """The killed call holds the tenant's only place: its run again must take that place
    over, not wait for it."""
    tool_share_fleet.heal()
    _assert_targets(tool_kill(tool_share_fleet, bound=BOUND), tool_share_fleet)


def test_chaos_redis_restart_under_a_response_parked_for_a_tool_place_ends_both(
    tool_share_fleet: ChaosFleet,
) -> None:
    """The places and the line live in Redis: restarted on its AOF, it still has them."""
    tool_share_fleet.heal()
    _assert_targets(parked_tool_restart(tool_share_fleet, bound=BOUND), tool_share_fleet)


@pytest.mark.timeout(240)  # a fleet of its own to start, then three kills and their rescues
def test_chaos_poison_turn_fails_after_max_deliveries(
    private_redis: PrivateRedis,
    chaos_model: ChaosModel,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    fleet = start_fleet(
        private_redis,
        chaos_model,
        tmp_path_factory.mktemp("chaos-poison"),
        shape=POISON_SHAPE,
        settings=POISON_SETTINGS,
    )
    try:
        _assert_targets(poison_turn(fleet, bound=90.0), fleet)
    finally:
        fleet.stop()


def test_chaos_redis_restart_mid_flight_leaves_the_fleet_running(chaos: ChaosFleet) -> None:
    _assert_targets(redis_restart(chaos, bound=BOUND), chaos)
