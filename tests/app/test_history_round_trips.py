"""A response's history costs the same Redis round trips at depth 5 and at depth 200.

Counted where they happen: every request redis-py sends (a command, a pipeline, a script) is one
``send_packed_command`` on a connection. The measured steps are the gateway's create, the turn
task's turns and the tool worker's call of a response that continues a chain (or a
conversation), run on real Redis with a scripted model, as ``tests/app/test_loop.py`` drives them.
Only the steps' own thread is counted: another run's lease renewer ticks on a thread of its own
whenever its time comes (one runs throughout, as on a busy worker), and is not this response's.
Nor is a connection's upkeep (a new connection's handshake, a health-check PING): it comes with
the pool whenever a step finds no idle connection (the renewer may hold the one there is), not
with the history.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection

from app.config import Settings
from app.conversations import add_items, create_conversation
from app.lease import LeaseKeeper
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from app.tool_calls import ToolDeps, run_tool_call
from app.tools.base import ExecutorRegistry
from app.tools.internal import InternalExecutor, load_registry
from tests.app.test_loop import Loop, internal
from tests.support.model import ScriptedModel, calls, text
from tests.support.round_trips import UPKEEP_METHODS, Upkeep

FIFTY_WORDS = " ".join(f"word{i}" for i in range(50))


class RoundTrips:
    """Counts the requests this thread sends to Redis, by step, but for connection upkeep."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        send = AbstractConnection.send_packed_command
        steps_thread = threading.get_ident()
        upkeep = Upkeep()

        def counting(connection: AbstractConnection, *args: Any, **kwargs: Any) -> None:
            if threading.get_ident() == steps_thread and not upkeep.on:
                self.count += 1
            send(connection, *args, **kwargs)

        def uncounted(method: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                with upkeep.held():
                    return method(*args, **kwargs)

            return run

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
        for name in UPKEEP_METHODS:
            monkeypatch.setattr(
                AbstractConnection, name, uncounted(getattr(AbstractConnection, name))
            )

    @contextlib.contextmanager
    def step(self, steps: dict[str, int], name: str) -> Iterator[None]:
        before = self.count
        yield
        steps[name] = self.count - before


def build_chain(loop: Loop, depth: int) -> str:
    """A chain of ``depth`` answered responses linked by ``previous_response_id``."""
    previous: str | None = None
    for index in range(depth):
        body: dict[str, Any] = {"input": f"turn {index}: {FIFTY_WORDS}"}
        if previous is not None:
            body["previous_response_id"] = previous
        previous = loop.create(**body)
        assert loop.drive(previous) == "completed"
    assert previous is not None
    return previous


def tool_response_steps(
    store: ResponseStore, settings: Settings, trips: RoundTrips, **link: str
) -> dict[str, int]:
    """Round trips of each step of a 2-turn response (a calculator call) that continues ``link``."""
    model = ScriptedModel(calls(("call_1", "calculator", '{"expression": "6*7"}')), text("42"))
    loop = Loop(store=store, settings=settings, model=model)
    deps = RunDeps(store=store, provider=model, settings=settings, dispatcher=loop.dispatcher)
    registry = load_registry(settings.internal_tool_module_list)
    registry.initialize_all()
    tools = ToolDeps(
        store=store, executors=ExecutorRegistry([InternalExecutor(registry)]), settings=settings
    )
    steps: dict[str, int] = {}
    with trips.step(steps, "create"):
        rid = loop.create(input="what is 6*7?", tools=internal("calculator"), **link)
    with trips.step(steps, "turn 0"):
        assert advance_response(deps, rid, 0) == "waiting"
    [chord] = loop.dispatcher.chords
    with trips.step(steps, "tool call"):
        assert run_tool_call(tools, rid, chord.calls[0][0]) == "ok"
    with trips.step(steps, "turn 1"):
        assert advance_response(deps, rid, chord.then_turn) == "completed"
    steps["items the model saw"] = len(model.requests[-1].items)
    return steps


@pytest.fixture(autouse=True)
def other_run(store: ResponseStore) -> Iterator[None]:
    """Another run's lease, renewed every 10 ms while the steps are measured."""
    keeper = LeaseKeeper(store, lease_seconds=0.03)
    assert keeper.acquire("resp_other_run", 0).taken
    yield
    keeper.release("resp_other_run")


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    # the calculator is a built-in; text deltas are held until the turn's write whatever the
    # machine's load (a window that closes mid-turn would send them in a round trip of its own)
    return make_settings(coalesce_ms=600_000, coalesce_max_ms=600_000)


def test_a_chain_of_200_costs_the_round_trips_of_a_chain_of_5(
    store: ResponseStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = Loop(store=store, settings=settings, model=ScriptedModel(text(FIFTY_WORDS)))
    short, long = build_chain(chain, 5), build_chain(chain, 200)
    trips = RoundTrips(monkeypatch)
    tool_response_steps(store, settings, trips, previous_response_id=short)  # scripts loaded
    at_5 = tool_response_steps(store, settings, trips, previous_response_id=short)
    at_200 = tool_response_steps(store, settings, trips, previous_response_id=long)
    # Each response of a chain adds its input and its answer; the measured one shows 3 more
    # (input, call, output).
    assert at_5.pop("items the model saw") == 2 * 5 + 3
    assert at_200.pop("items the model saw") == 2 * 200 + 3
    assert at_200 == at_5, (at_5, at_200)


def test_a_conversation_of_200_items_costs_the_round_trips_of_one_of_5(
    store: ResponseStore, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def conversation(items: int) -> str:
        message = {"type": "message", "role": "user", "content": FIFTY_WORDS}
        conversation_id = str(create_conversation(store, {})["id"])
        for start in range(0, items, 20):
            add_items(store, conversation_id, {"items": [message] * min(20, items - start)})
        return conversation_id

    short, long = conversation(5), conversation(200)
    trips = RoundTrips(monkeypatch)
    tool_response_steps(store, settings, trips, conversation=short)
    at_5 = tool_response_steps(store, settings, trips, conversation=short)
    at_200 = tool_response_steps(store, settings, trips, conversation=long)
    # The warm-up response joined the short conversation with 4 items (input, call, output,
    # answer); the measured one shows the model 3 of its own.
    assert at_5.pop("items the model saw") == 5 + 4 + 3
    assert at_200.pop("items the model saw") == 200 + 3
    assert at_200 == at_5, (at_5, at_200)


def test_a_new_connections_handshake_is_not_a_round_trip_of_the_step(
    store: ResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    trips = RoundTrips(monkeypatch)
    pool = store.redis.connection_pool
    fresh = redis.Redis.from_pool(  # the store's Redis, no connection made yet
        redis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
    )
    steps: dict[str, int] = {}
    with trips.step(steps, "ping"):
        assert fresh.ping()
    with trips.step(steps, "ping again"):
        assert fresh.ping()
    fresh.close()
    assert steps == {"ping": 1, "ping again": 1}
