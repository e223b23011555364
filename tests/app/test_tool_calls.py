"""Tool tasks: one execution per call, however often (and however concurrently) delivered."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import app.tool_calls
from app.config import Settings
from app.responses import cancel_response, create_response
from app.run import RunDeps, advance_response
from app.store import RedeliveredTooOftenError, ResponseStore
from app.tool_calls import ToolDeps, run_tool_call
from app.tools.base import (
    ExecutorRegistry,
    ToolCall,
    ToolDefinition,
    ToolKind,
    ToolResult,
    idempotency_key,
)
from app.tools.internal import InternalExecutor, Registry
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text

CALL = "call_1"


@dataclass
class GatedTool:
    """``slow_echo`` that counts its runs and finishes only when its gate opens."""

    name: str = "slow_echo"
    gate: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    runs: int = 0
    thread_name: str = ""
    keys: list[str] = field(default_factory=list)

    def definition(self) -> ToolDefinition:
        return ToolDefinition(name=self.name, kind=ToolKind.INTERNAL, description="gated")

    def initialize(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def execute(self, call: ToolCall) -> ToolResult:
        self.runs += 1
        self.keys.append(call.idempotency_key)
        self.thread_name = threading.current_thread().name
        self.started.set()
        assert self.gate.wait(20), "the gate never opened"
        return ToolResult(call_id=call.id, output=f"run {self.runs}")


@dataclass
class Setup:
    store: ResponseStore
    settings: Settings
    tool: GatedTool
    dispatcher: RecordingDispatcher
    rid: str

    @property
    def deps(self) -> ToolDeps:
        registry = Registry()
        registry.register(self.tool)
        return ToolDeps(
            store=self.store,
            executors=ExecutorRegistry([InternalExecutor(registry)]),
            settings=self.settings,
        )

    def deliver(self) -> Callable[[], str]:
        """Run one delivery of the call in a thread; the returned function joins it."""
        box: list[str] = []
        thread = threading.Thread(
            target=lambda: box.append(run_tool_call(self.deps, self.rid, CALL))
        )
        thread.start()

        def join() -> str:
            thread.join(30)
            assert not thread.is_alive()
            return box[0]

        join.thread = thread  # type: ignore[attr-defined]
        return join


@pytest.fixture
def setup(store: ResponseStore, make_settings: Callable[..., Settings]) -> Setup:
    """A response whose first turn asked for ``slow_echo`` (call ``call_1``): tools pending."""
    settings = make_settings(internal_tool_modules="tests.support.tools", tool_timeout_seconds=30)
    dispatcher = RecordingDispatcher()
    body = {"input": "go", "background": True, "tools": [{"type": "internal", "name": "slow_echo"}]}
    response, _ = create_response(store, dispatcher, settings, body)
    model = ScriptedModel(calls((CALL, "slow_echo", "{}")), text("done"))
    deps = RunDeps(store=store, provider=model, settings=settings, dispatcher=dispatcher)
    assert advance_response(deps, response.id, 0) == "waiting"
    return Setup(store, settings, GatedTool(), dispatcher, response.id)


def stored_results(setup: Setup) -> list[str | None]:
    return setup.store.tool_results(setup.rid, [CALL])


def test_tool_call_runs_once_and_stores_its_result(setup: Setup) -> None:
    setup.tool.gate.set()

    assert run_tool_call(setup.deps, setup.rid, CALL) == "ok"
    assert run_tool_call(setup.deps, setup.rid, CALL) == "stored"  # a redelivery

    assert setup.tool.runs == 1
    assert ToolResult.from_json(stored_results(setup)[0] or "").output == "run 1"
    assert not setup.store.is_tool_call_claimed(setup.rid, CALL)  # the claim was given back


def test_tool_call_delivered_again_while_running_waits_for_the_first(setup: Setup) -> None:
    first = setup.deliver()
    assert setup.tool.started.wait(10)
    assert setup.store.is_tool_call_claimed(setup.rid, CALL)

    second = setup.deliver()  # e.g. the sweeper dispatched the call again
    time.sleep(0.5)
    assert second.thread.is_alive(), "the second delivery did not wait"  # type: ignore[attr-defined]
    assert setup.tool.runs == 1
    setup.tool.gate.set()

    assert sorted([first(), second()]) == ["ok", "stored"]
    assert setup.tool.runs == 1
    assert ToolResult.from_json(stored_results(setup)[0] or "").output == "run 1"


def test_tool_call_claimed_by_a_dead_delivery_runs_once_the_claim_lapses(setup: Setup) -> None:
    claim = setup.store.open_tool_call(setup.rid, CALL, token="dead-worker", claim_seconds=0.6)
    assert claim.claim == "claimed"
    setup.tool.gate.set()

    assert run_tool_call(setup.deps, setup.rid, CALL) == "ok"

    assert setup.tool.runs == 1
    assert stored_results(setup)[0] is not None


def test_tool_call_running_past_its_claim_keeps_its_claim(
    setup: Setup, make_settings: Callable[..., Settings]
) -> None:
    setup.settings = make_settings(
        internal_tool_modules="tests.support.tools", tool_timeout_seconds=30, claim_seconds=1.5
    )
    join = setup.deliver()
    assert setup.tool.started.wait(10)
    claim = setup.store.keys.tool_claim(setup.rid, CALL)
    member = setup.store.keys.running_call(setup.rid, CALL)

    # more than two claims: the claim lives on only by its renewals (every 0.5 s: a renewal
    # may come a second late, on a busy machine, before the claim lapses)
    time.sleep(3.5)

    assert setup.store.is_tool_call_claimed(setup.rid, CALL)
    assert setup.store.redis.pttl(claim) <= 1500
    assert setup.store.redis.zscore(setup.store.keys.running_calls, member) > time.time()  # type: ignore[operator]
    setup.tool.gate.set()
    assert join() == "ok"
    assert setup.store.redis.zscore(setup.store.keys.running_calls, member) is None


def test_tool_call_started_more_often_than_allowed_fails_without_running(setup: Setup) -> None:
    for token in ("dead-1", "dead-2", "dead-3"):  # three starts whose workers died
        setup.store.open_tool_call(setup.rid, CALL, token=token, claim_seconds=3, counts_start=True)
        setup.store.redis.delete(setup.store.keys.tool_claim(setup.rid, CALL))

    with pytest.raises(RedeliveredTooOftenError) as raised:
        run_tool_call(setup.deps, setup.rid, CALL, counts_start=True)

    assert raised.value.deliveries == 4
    assert setup.tool.runs == 0
    assert not setup.store.is_tool_call_claimed(setup.rid, CALL)


def test_tool_call_gets_one_idempotency_key_for_every_run(setup: Setup) -> None:
    setup.tool.gate.set()
    assert run_tool_call(setup.deps, setup.rid, CALL) == "ok"
    setup.store.redis.hdel(setup.store.keys.tool_results(setup.rid), CALL)  # as if never stored

    assert run_tool_call(setup.deps, setup.rid, CALL) == "ok"  # a re-run

    assert setup.tool.keys == [idempotency_key(setup.rid, CALL)] * 2
    assert idempotency_key(setup.rid, CALL) != idempotency_key(setup.rid, "call_2")


def test_tool_call_waiting_for_another_delivery_stops_on_cancel(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = setup.store.open_tool_call(setup.rid, CALL, token="other", claim_seconds=30)
    assert claim.claim == "claimed"
    awaiting = threading.Event()
    await_other_delivery = app.tool_calls._await_other_delivery

    def noted(*args: Any, **kwargs: Any) -> Any:
        awaiting.set()
        return await_other_delivery(*args, **kwargs)

    monkeypatch.setattr(app.tool_calls, "_await_other_delivery", noted)
    waiting = setup.deliver()
    assert awaiting.wait(30)  # cancelled before it waits, the delivery would find nothing to run

    cancel_response(setup.store, setup.dispatcher, setup.rid)

    assert waiting() == "cancelled"
    assert setup.tool.runs == 0
    assert stored_results(setup) == [None]


def test_tool_call_held_too_long_elsewhere_is_busy(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, make_settings: Callable[..., Settings]
) -> None:
    monkeypatch.setattr(app.tool_calls, "CLAIM_GRACE_SECONDS", 0.0)
    setup.settings = make_settings(
        internal_tool_modules="tests.support.tools", tool_timeout_seconds=0.3
    )
    # A claim that outlives the call's own deadline: someone claimed the call again meanwhile.
    claim = setup.store.open_tool_call(setup.rid, CALL, token="other", claim_seconds=30)
    assert claim.claim == "claimed"

    assert run_tool_call(setup.deps, setup.rid, CALL) == "busy"  # the task requeues itself

    assert setup.tool.runs == 0


def test_tool_call_of_a_finished_response_is_skipped(setup: Setup) -> None:
    cancel_response(setup.store, setup.dispatcher, setup.rid)

    assert run_tool_call(setup.deps, setup.rid, CALL) == "skipped"
    assert setup.tool.runs == 0


@pytest.fixture(params=[True, False], ids=["runner-pool", "thread-per-call"])
def running(setup: Setup, make_settings: Callable[..., Settings], request: Any) -> Running:
    """A delivery of the call running its tool (held at the gate), either runner setting."""
    setup.settings = make_settings(
        internal_tool_modules="tests.support.tools",
        tool_timeout_seconds=30,
        tool_runner_pool=request.param,
    )
    join = setup.deliver()
    assert setup.tool.started.wait(10)
    return Running(setup, join, is_pool=request.param)


@dataclass
class Running:
    setup: Setup
    join: Callable[[], str]
    is_pool: bool


def test_tool_call_runs_beside_its_task_with_or_without_the_runner_pool(running: Running) -> None:
    tool = running.setup.tool
    assert tool.thread_name == ("tool-runner" if running.is_pool else "tool-call")
    tool.gate.set()

    assert running.join() == "ok"
    assert ToolResult.from_json(stored_results(running.setup)[0] or "").output == "run 1"


def test_tool_call_is_abandoned_on_cancel_with_or_without_the_runner_pool(
    running: Running,
) -> None:
    setup = running.setup
    cancel_response(setup.store, setup.dispatcher, setup.rid)

    assert running.join() == "cancelled"
    setup.tool.gate.set()  # the abandoned call's thread finishes; its result is not stored
    assert stored_results(setup) == [None]
