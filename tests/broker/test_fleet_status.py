"""``antwort status`` and the console's fleet view: the fair share's cap and what waits parked."""

from __future__ import annotations

from collections.abc import Callable

from app.config import Settings
from app.limits import Caller
from app.responses import create_response
from app.store import ResponseStore
from app.tenancy import Tenant
from app.tool_share import ToolShare
from broker.fleet_status import console_fleet, fleet_status
from programs.status import render
from tests.support.dispatch import RecordingDispatcher


def test_status_shows_the_fair_share_and_the_responses_parked(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    assert fleet_status(store)["fair_share"] == {
        "mode": None,
        "cap": None,
        "live_inference_threads": 0,
        "parked": 0,
        "parked_for_tools": 0,
    }
    store.heartbeat_worker("inference", "inference@host", threads=4)
    caller = Caller(Tenant(name="team-a"), tenants=lambda: 2)
    body = {"model": "m", "input": "hi", "background": True}
    for _ in range(5):
        create_response(store, RecordingDispatcher(), make_settings(), body, caller=caller)

    status = fleet_status(store)

    assert status["fair_share"] == {
        "mode": "auto",
        "cap": 2,
        "live_inference_threads": 4,
        "parked": 3,
        "parked_for_tools": 0,
    }
    assert "fair share: auto, 2 responses a tenant (4 live inference threads); 3 parked" in (
        render(status)
    )
    assert console_fleet(store)["fair_share"]["parked"] == 3  # no tenant's name in it


def test_status_counts_the_responses_waiting_for_a_place_on_a_tool_queue(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(tenant_max_running=0)
    caller = Caller(Tenant(name="team-a"), tenants=lambda: 2)
    body = {"model": "m", "input": "hi"}
    ids = [
        create_response(store, RecordingDispatcher(), settings, body, caller=caller)[0].id
        for _ in range(3)
    ]
    share, queue = ToolShare(store), "tools.internal"
    assert share.take("team-a", ids[0], 1, [("c1", queue)], "1") == ["c1"]
    for rid in ids[1:]:
        assert share.park(RecordingDispatcher(), "team-a", rid, 1, "c1", queue) == []

    status = fleet_status(store)

    assert status["fair_share"]["parked_for_tools"] == 2
    assert "; 2 waiting for a place on a tool queue" in render(status)
