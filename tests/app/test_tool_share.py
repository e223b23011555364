"""A tenant's fair share of each tool queue (``app.tool_share``): the real run and tool call code
on real Redis (one and a cluster), the fleet's part played by a recording dispatcher."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.config import Settings
from app.lease import Sweeper
from app.limits import Caller, RateLimiter
from app.responses import create_response
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from app.tenancy import Tenant
from app.tool_calls import ToolDeps, run_tool_call
from app.tool_share import TOOL_SHARE_EXTRA, ToolShare
from app.tools.base import ExecutorRegistry
from app.tools.internal import InternalExecutor, load_registry
from tests.app.test_fairness import end
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text

A, B = "team-a", "team-b"
QUEUE = "tools.internal"


@pytest.fixture
def store(store_on_both: ResponseStore) -> ResponseStore:
    """One Redis's, then a cluster's (the tenant's keys in one slot, its responses in many)."""
    return store_on_both


@dataclass
class Fleet:
    """Responses of two tenants, their turns and calls run when the test says."""

    store: ResponseStore
    settings: Settings
    tenants: int = 2
    dispatcher: RecordingDispatcher = field(default_factory=RecordingDispatcher)
    models: dict[str, ScriptedModel] = field(default_factory=dict)

    def create(self, tenant: str, n_calls: int) -> str:
        """A response whose model calls ``fast_echo`` ``n_calls`` times, then answers."""
        caller = Caller(Tenant(name=tenant), RateLimiter(self.store), tenants=lambda: self.tenants)
        body = {"model": "m", "input": "go", "tools": [{"type": "internal", "name": "fast_echo"}]}
        response, _ = create_response(
            self.store, self.dispatcher, self.settings, body, caller=caller
        )
        turn = calls(*((f"c{n}", "fast_echo", "{}") for n in range(1, n_calls + 1)))
        self.models[response.id] = ScriptedModel(turn, text("done"))
        return response.id

    def turn(self, response_id: str, turn: int) -> str:
        deps = RunDeps(
            store=self.store,
            provider=self.models[response_id],
            settings=self.settings,
            dispatcher=self.dispatcher,
        )
        return advance_response(deps, response_id, turn)

    def dispatched(self, response_id: str) -> list[list[str]]:
        """The call ids of each chord the response's turns dispatched, in order."""
        return [
            [call_id for call_id, _ in chord.calls]
            for chord in self.dispatcher.chords
            if chord.response_id == response_id
        ]

    def run_call(self, response_id: str, call_id: str) -> str:
        registry = load_registry(self.settings.internal_tool_module_list)
        registry.initialize_all()
        deps = ToolDeps(
            store=self.store,
            executors=ExecutorRegistry([InternalExecutor(registry)]),
            settings=self.settings,
            dispatcher=self.dispatcher,
        )
        return run_tool_call(deps, response_id, call_id)

    def places(self, tenant: str) -> set[str]:
        members = self.store.redis.zrange(self.store.keys.tenant_tool_places(tenant, QUEUE), 0, -1)
        return {member.decode() for member in members}


@pytest.fixture
def make_fleet(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> Callable[..., Fleet]:
    def make(tenants: int = 2, **settings: Any) -> Fleet:
        settings.setdefault("tenant_max_running", 0)  # responses' own fair share: not this test's
        settings.setdefault("internal_tool_modules", "tests.support.tools")
        return Fleet(store=store, settings=make_settings(**settings), tenants=tenants)

    return make


def test_tool_share_a_tenants_calls_take_at_most_its_places_and_the_rest_wait_parked(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(tenant_max_tool_calls=2)
    first, second = fleet.create(A, 3), fleet.create(A, 1)
    theirs = fleet.create(B, 2)

    assert fleet.turn(first, 0) == "waiting"
    assert fleet.turn(second, 0) == "waiting"
    assert fleet.turn(theirs, 0) == "waiting"

    assert fleet.dispatched(first) == [["c1", "c2"]]  # A's two places
    assert fleet.dispatched(second) == []  # parked: A has no place left
    assert fleet.dispatched(theirs) == [["c1", "c2"]]  # B's places are its own
    assert fleet.places(A) == {f"{first} c1", f"{first} c2"}

    assert fleet.run_call(first, "c1") == "ok"  # its place goes to the first parked response
    assert fleet.dispatcher.turns[-1] == (second, 1)
    assert fleet.places(A) == {f"{first} c2", f"{second} c1"}
    assert fleet.turn(second, 1) == "waiting"
    assert fleet.dispatched(second) == [["c1"]]


def test_tool_share_a_response_goes_on_in_batches_to_its_answer(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(tenant_max_tool_calls=2)
    responses = [fleet.create(A, 3) for _ in range(3)]
    work: list[tuple[str, int]] = [(rid, 0) for rid in responses]
    seen_turns = seen_chords = 0
    while work:  # the fleet's part, in order: a turn; a chord's calls, then its turn
        rid, turn = work.pop(0)
        fleet.turn(rid, turn)
        for chord in fleet.dispatcher.chords[seen_chords:]:
            assert len(fleet.places(A)) <= 2
            for call_id, _ in chord.calls:
                fleet.run_call(chord.response_id, call_id)
            work.append((chord.response_id, chord.then_turn))
        for queued in fleet.dispatcher.turns[seen_turns:]:  # parked ones given a place
            work.append(queued)
        seen_chords, seen_turns = len(fleet.dispatcher.chords), len(fleet.dispatcher.turns)
        assert len(fleet.dispatcher.chords) < 30, "no rest"
    for rid in responses:
        stored = fleet.store.get(rid).response
        assert stored.status == "completed"
        outputs = [
            item["output"] for item in stored.output if item["type"] == "function_call_output"
        ]
        assert outputs == ["fast_echo done"] * 3
    assert fleet.places(A) == set()  # every place given back


def test_tool_share_a_parked_response_sent_round_again_keeps_its_place_in_the_line(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(tenant_max_tool_calls=1)
    holder, first, second = fleet.create(A, 1), fleet.create(A, 1), fleet.create(A, 1)
    for rid in (holder, first, second):
        fleet.turn(rid, 0)
    fleet.turn(second, 1)  # the sweeper sent its turn round again: it parks where it was

    fleet.run_call(holder, "c1")

    assert fleet.dispatcher.turns[-1] == (first, 1)
    assert fleet.turn(first, 1) == "waiting"
    assert fleet.turn(second, 1) == "waiting"
    assert fleet.dispatched(first) == [["c1"]] and fleet.dispatched(second) == []


def test_tool_share_the_sweeper_frees_the_places_of_ended_responses(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(tenant_max_tool_calls=2)
    holder, parked = fleet.create(A, 2), fleet.create(A, 1)
    fleet.turn(holder, 0)
    fleet.turn(parked, 0)
    end(fleet.store, holder)  # cancelled or failed: its calls' tasks may never run

    Sweeper(fleet.store, fleet.dispatcher, lease_seconds=3.0, tools=ToolShare(fleet.store)).tick()

    assert (parked, 1) in fleet.dispatcher.turns
    assert fleet.places(A) == {f"{parked} c1"}


def test_tool_share_a_parked_response_that_ended_is_skipped(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(tenant_max_tool_calls=1)
    holder, gone, waiting = fleet.create(A, 1), fleet.create(A, 1), fleet.create(A, 1)
    for rid in (holder, gone, waiting):
        fleet.turn(rid, 0)
    end(fleet.store, gone)

    fleet.run_call(holder, "c1")

    assert fleet.dispatcher.turns[-1] == (waiting, 1)
    assert fleet.places(A) == {f"{waiting} c1"}


def test_tool_share_by_default_off_with_one_tenant(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet(tenants=1)
    rid = fleet.create(A, 3)

    fleet.turn(rid, 0)

    assert TOOL_SHARE_EXTRA not in fleet.store.get(rid).extra
    assert fleet.dispatched(rid) == [["c1", "c2", "c3"]]
    assert fleet.places(A) == set()


def test_tool_share_by_default_half_the_live_threads_of_the_queue(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    fleet.store.heartbeat_worker(QUEUE, "tools-1", threads=4)
    first, second = fleet.create(A, 3), fleet.create(A, 1)

    fleet.turn(first, 0)
    fleet.turn(second, 0)

    assert fleet.store.get(first).extra[TOOL_SHARE_EXTRA] == "auto"
    assert fleet.dispatched(first) == [["c1", "c2"]]
    assert fleet.dispatched(second) == []


def test_tool_share_zero_is_off(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet(tenant_max_tool_calls=0)
    rid = fleet.create(A, 3)

    fleet.turn(rid, 0)

    assert fleet.dispatched(rid) == [["c1", "c2", "c3"]]
