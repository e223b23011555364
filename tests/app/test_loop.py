"""The agentic loop's turn logic across turns, with a scripted model and no broker.

``Loop.drive`` plays the fleet's part: it runs a turn, and when the turn hands calls to tool
workers it runs each call through ``run_tool_call`` (in any order it is told) and then the turn
the chord would have queued. Everything else is the real code on real Redis.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.config import Settings
from app.lease import LeaseKeeper
from app.responses import cancel_response, create_response
from app.run import RunDeps, advance_response
from app.store import RedeliveredTooOftenError, ResponseStore
from app.tool_calls import ToolDeps, run_tool_call
from app.tools.base import ExecutorRegistry
from app.tools.internal import InternalExecutor, load_registry
from tests.app.store.support import keys_like
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text

CLIENT_FN = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def internal(*names: str) -> list[dict[str, Any]]:
    return [{"type": "internal", "name": name} for name in names]


@dataclass
class Loop:
    """One response's run, driven the way the fleet drives it."""

    store: ResponseStore
    settings: Settings
    model: ScriptedModel
    dispatcher: RecordingDispatcher = field(default_factory=RecordingDispatcher)
    outcomes: list[str] = field(default_factory=list)

    def create(self, **body: Any) -> str:
        body.setdefault("input", "go")
        response, _ = create_response(self.store, self.dispatcher, self.settings, body)
        return response.id

    def drive(
        self, rid: str, *, turn: int = 0, reverse_tools: bool = False, leased: bool = False
    ) -> str:
        """Run turns and tool calls until the response rests; returns the last outcome.

        ``leased``: as a worker does, each run takes the lease and counts its start.
        """
        registry = load_registry(self.settings.internal_tool_module_list)
        registry.initialize_all()
        tools = ToolDeps(
            store=self.store,
            executors=ExecutorRegistry([InternalExecutor(registry)]),
            settings=self.settings,
        )
        deps = (
            self.leased_deps()
            if leased
            else RunDeps(
                store=self.store,
                provider=self.model,
                settings=self.settings,
                dispatcher=self.dispatcher,
            )
        )
        for _ in range(30):
            chords, turns = len(self.dispatcher.chords), len(self.dispatcher.turns)
            self.outcomes.append(advance_response(deps, rid, turn, counts_start=leased))
            if len(self.dispatcher.chords) > chords:
                chord = self.dispatcher.chords[-1]
                order = reversed(chord.calls) if reverse_tools else chord.calls
                for call_id, queue in order:
                    assert queue == "tools.internal"
                    outcome = run_tool_call(tools, rid, call_id, counts_start=leased)
                    assert outcome in ("ok", "error")
                turn = chord.then_turn
            elif len(self.dispatcher.turns) > turns:
                turn = self.dispatcher.turns[-1][1]
            else:
                return self.outcomes[-1]
        raise AssertionError(f"no rest after 30 steps: {self.outcomes}")

    def leased_deps(self) -> RunDeps:
        """Collaborators of a run that takes the response's lease, as a worker's run does."""
        return RunDeps(
            store=self.store,
            provider=self.model,
            settings=self.settings,
            dispatcher=self.dispatcher,
            leases=LeaseKeeper(self.store, lease_seconds=self.settings.lease_seconds),
        )

    def response(self, rid: str) -> Any:
        return self.store.get(rid).response

    def events(self, rid: str) -> list[dict[str, Any]]:
        stored = self.store.events_after(rid, -1, count=100_000)
        assert [e.sequence_number for e in stored] == list(range(len(stored)))
        return [json.loads(e.data) for e in stored]


@pytest.fixture
def make_loop(store: ResponseStore, make_settings: Callable[..., Settings]) -> Callable[..., Loop]:
    def make(*turns: Any, **settings: Any) -> Loop:
        settings.setdefault("internal_tool_modules", "tests.support.tools")
        return Loop(store=store, settings=make_settings(**settings), model=ScriptedModel(*turns))

    return make


def kinds(response: Any) -> list[str]:
    return [item["type"] for item in response.output]


def outputs(response: Any) -> dict[str, str]:
    return {
        i["call_id"]: i["output"] for i in response.output if i["type"] == "function_call_output"
    }


def tool_messages(loop: Loop, request: int) -> list[tuple[str, str]]:
    """``(call_id, output)`` of the results the model saw in its ``request``-th call."""
    return [
        (item["call_id"], item["output"])
        for item in loop.model.requests[request].items
        if item.get("type") == "function_call_output"
    ]


def test_loop_chains_tool_calls_until_the_answer(make_loop: Callable[..., Loop]) -> None:
    loop = make_loop(
        calls(("call_a", "fast_echo", "{}")),
        calls(("call_b", "calculator", '{"expression": "6*7"}')),
        text("The answer is 42."),
    )
    rid = loop.create(tools=internal("fast_echo", "calculator"))

    assert loop.drive(rid) == "completed"

    assert loop.outcomes == ["waiting", "waiting", "completed"]
    response = loop.response(rid)
    assert kinds(response) == [
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert outputs(response) == {"call_a": "fast_echo done", "call_b": "42"}
    assert loop.store.get(rid).turn == 3
    assert response.usage.total_tokens == 36  # three model calls of 12 tokens
    assert [tool_messages(loop, i) for i in range(3)] == [
        [],
        [("call_a", "fast_echo done")],
        [("call_a", "fast_echo done"), ("call_b", "42")],
    ]
    events = loop.events(rid)
    types = [e["type"] for e in events]
    assert types.count("response.created") == 1
    assert types.count("response.in_progress") == 1
    assert types[-1] == "response.completed" and types.count("response.completed") == 1
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2, 3, 4]
    assert events[-1]["response"]["output"] == response.output


def test_loop_answers_parallel_calls_in_model_order(make_loop: Callable[..., Loop]) -> None:
    loop = make_loop(
        calls(
            ("call_1", "slow_echo", "{}"),
            ("call_2", "calculator", '{"expression": "1+1"}'),
            ("call_3", "fast_echo", "{}"),
        ),
        text("done"),
    )
    rid = loop.create(tools=internal("slow_echo", "fast_echo", "calculator"))

    assert loop.drive(rid, reverse_tools=True) == "completed"  # the last call finishes first

    [chord] = loop.dispatcher.chords
    assert [call_id for call_id, _ in chord.calls] == ["call_1", "call_2", "call_3"]
    assert chord.then_turn == 1
    response = loop.response(rid)
    results = [i["call_id"] for i in response.output if i["type"] == "function_call_output"]
    assert results == ["call_1", "call_2", "call_3"]
    assert tool_messages(loop, 1) == [
        ("call_1", "slow_echo done"),
        ("call_2", "2"),
        ("call_3", "fast_echo done"),
    ]


def test_loop_parallel_tool_calls_false_runs_one_call_at_a_time(
    make_loop: Callable[..., Loop],
) -> None:
    loop = make_loop(
        calls(("call_1", "fast_echo", "{}"), ("call_2", "calculator", '{"expression": "2"}')),
        text("done"),
    )
    rid = loop.create(tools=internal("fast_echo", "calculator"), parallel_tool_calls=False)

    assert loop.drive(rid) == "completed"

    assert [c.calls for c in loop.dispatcher.chords] == [
        [("call_1", "tools.internal")],
        [("call_2", "tools.internal")],
    ]
    assert [c.then_turn for c in loop.dispatcher.chords] == [1, 1]
    assert len(loop.model.requests) == 2  # both results reach the model in one next turn
    assert loop.model.requests[0].parallel_tool_calls is False
    assert tool_messages(loop, 1) == [("call_1", "fast_echo done"), ("call_2", "2")]


def test_loop_bounds_the_calls_running_at_once(make_loop: Callable[..., Loop]) -> None:
    loop = make_loop(
        calls(*[(f"call_{i}", "fast_echo", "{}") for i in range(5)]),
        text("done"),
        max_parallel_tools=2,
    )
    rid = loop.create(tools=internal("fast_echo"))

    assert loop.drive(rid) == "completed"

    assert [[c for c, _ in chord.calls] for chord in loop.dispatcher.chords] == [
        ["call_0", "call_1"],
        ["call_2", "call_3"],
        ["call_4"],
    ]
    assert [c for c, _ in tool_messages(loop, 1)] == [f"call_{i}" for i in range(5)]


def test_loop_stops_at_the_turn_limit_as_incomplete(make_loop: Callable[..., Loop]) -> None:
    loop = make_loop(*[calls((f"call_{i}", "fast_echo", "{}")) for i in range(9)], max_turns=3)
    rid = loop.create(tools=internal("fast_echo"))

    assert loop.drive(rid) == "incomplete"

    response = loop.response(rid)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_turns"
    assert len(loop.model.requests) == 3
    assert kinds(response) == ["function_call", "function_call_output"] * 3
    types = [e["type"] for e in loop.events(rid)]
    assert types[-1] == "response.incomplete"
    assert "response.completed" not in types


def test_loop_max_tool_calls_runs_no_more_and_tells_the_model(
    make_loop: Callable[..., Loop],
) -> None:
    """As OpenAI has it: a call past the limit is not executed, and the response goes on."""
    loop = make_loop(
        calls(("call_1", "fast_echo", "{}")),
        calls(("call_2", "fast_echo", "{}"), ("call_3", "fast_echo", "{}")),
        text("Two ran."),
    )
    rid = loop.create(tools=internal("fast_echo"), max_tool_calls=2)

    assert loop.drive(rid) == "completed"

    response = loop.response(rid)
    assert outputs(response) == {
        "call_1": "fast_echo done",
        "call_2": "fast_echo done",
        "call_3": "Error: max_tool_calls (2) reached: 'fast_echo' was not executed.",
    }
    assert len(loop.model.requests) == 3  # the model saw why the third did not run


def test_loop_max_tool_calls_counts_no_client_call(make_loop: Callable[..., Loop]) -> None:
    """The limit is on the tools the fleet runs: the client's own functions go to the client."""
    loop = make_loop(
        calls(("call_1", "get_weather", '{"city": "Oslo"}'), ("call_2", "get_weather", "{}")),
    )
    rid = loop.create(tools=[CLIENT_FN], max_tool_calls=1)

    assert loop.drive(rid) == "completed"  # paused for the client, as OpenAI ends it

    response = loop.response(rid)
    assert response.incomplete_details is None
    assert [item["call_id"] for item in response.output] == ["call_1", "call_2"]
    assert outputs(response) == {}


def test_loop_mixed_turn_runs_server_calls_then_pauses_then_continues(
    make_loop: Callable[..., Loop],
) -> None:
    loop = make_loop(
        calls(("call_srv", "fast_echo", "{}"), ("call_cli", "get_weather", '{"city": "Oslo"}')),
        text("Oslo is sunny."),
    )
    tools = [*internal("fast_echo"), CLIENT_FN]
    rid = loop.create(tools=tools)

    assert loop.drive(rid) == "requires_action"  # a server-side tool engages the loop

    response = loop.response(rid)
    assert kinds(response) == ["function_call", "function_call", "function_call_output"]
    assert outputs(response) == {"call_srv": "fast_echo done"}
    assert [c.calls for c in loop.dispatcher.chords] == [[("call_srv", "tools.internal")]]
    assert len(loop.model.requests) == 1
    assert loop.events(rid)[-1]["type"] == "response.completed"

    follow = loop.create(
        previous_response_id=rid,
        tools=tools,
        input=[{"type": "function_call_output", "call_id": "call_cli", "output": "sunny"}],
    )
    assert loop.drive(follow) == "completed"
    assert len(loop.model.requests) == 2
    seen = tool_messages(loop, 1)
    assert sorted(seen) == [("call_cli", "sunny"), ("call_srv", "fast_echo done")]


def test_loop_client_status_follows_the_setting(make_loop: Callable[..., Loop]) -> None:
    loop = make_loop(
        calls(("call_srv", "fast_echo", "{}"), ("call_cli", "get_weather", "{}")),
        client_tool_status="completed",
    )
    rid = loop.create(tools=[*internal("fast_echo"), CLIENT_FN])

    assert loop.drive(rid) == "completed"
    assert kinds(loop.response(rid)) == ["function_call", "function_call", "function_call_output"]


def test_loop_rejects_unknown_and_not_allowed_calls_and_goes_on(
    make_loop: Callable[..., Loop],
) -> None:
    loop = make_loop(
        calls(
            ("call_calc", "calculator", '{"expression": "1"}'),
            ("call_echo", "fast_echo", "{}"),
            ("call_ghost", "ghost", "{}"),
        ),
        text("done"),
    )
    choice = {"type": "allowed_tools", "mode": "auto", "tools": internal("fast_echo")}
    rid = loop.create(tools=internal("calculator", "fast_echo"), tool_choice=choice)

    assert loop.drive(rid) == "completed"

    [chord] = loop.dispatcher.chords
    assert chord.calls == [("call_echo", "tools.internal")]  # only the allowed one ran
    results = outputs(loop.response(rid))
    assert results["call_echo"] == "fast_echo done"
    assert "not allowed" in results["call_calc"]
    assert "does not exist" in results["call_ghost"]
    assert dict(tool_messages(loop, 1)) == results  # the model is told why
    assert loop.model.requests[0].tools[0]["name"] == "calculator"  # sent for context


def test_loop_only_rejected_calls_go_straight_to_the_next_turn(
    make_loop: Callable[..., Loop],
) -> None:
    loop = make_loop(calls(("call_calc", "calculator", "{}")), text("sorry"))
    choice = {"type": "allowed_tools", "mode": "auto", "tools": internal("fast_echo")}
    rid = loop.create(tools=internal("calculator", "fast_echo"), tool_choice=choice)

    assert loop.drive(rid) == "completed"

    assert loop.outcomes == ["continuing", "completed"]
    assert loop.dispatcher.chords == []
    assert kinds(loop.response(rid)) == ["function_call", "function_call_output", "message"]


@pytest.mark.parametrize(
    "choice",
    ["none", {"type": "allowed_tools", "mode": "none", "tools": internal("fast_echo")}],
    ids=["none", "allowed_tools-none"],
)
def test_loop_tool_choice_none_returns_calls_without_running_them(
    make_loop: Callable[..., Loop], choice: Any
) -> None:
    loop = make_loop(calls(("call_1", "fast_echo", "{}")))  # the model calls anyway
    rid = loop.create(tools=internal("fast_echo"), tool_choice=choice)

    assert loop.drive(rid) == "completed"

    assert kinds(loop.response(rid)) == ["function_call"]
    assert loop.dispatcher.chords == []
    assert loop.model.requests[0].tools  # still sent for context


def _choices(loop: Loop) -> list[Any]:
    return [request.tool_choice for request in loop.model.requests]


@pytest.mark.parametrize(
    ("choice", "later"),
    [
        ("required", "auto"),
        ({"type": "function", "name": "fast_echo"}, "auto"),
        (
            {"type": "allowed_tools", "mode": "required", "tools": internal("fast_echo")},
            {"type": "allowed_tools", "mode": "auto", "tools": internal("fast_echo")},
        ),
        ("auto", "auto"),
    ],
    ids=["required", "function", "allowed_tools-required", "auto"],
)
def test_loop_forces_a_tool_on_the_first_turn_only(
    make_loop: Callable[..., Loop], choice: Any, later: Any
) -> None:
    loop = make_loop(calls(("call_1", "fast_echo", "{}")), text("done"))
    rid = loop.create(tools=internal("fast_echo"), tool_choice=choice)

    assert loop.drive(rid) == "completed"

    assert _choices(loop) == [choice, later]


class LeaseProbe(RecordingDispatcher):
    """Notes, at each hand-off, whether the next run could take the lease at once."""

    def __init__(self, store: ResponseStore) -> None:
        super().__init__()
        self.store = store
        self.lease_free: list[bool] = []
        self.watched_until: list[float | None] = []

    def _probe(self, response_id: str) -> None:
        keys = self.store.keys
        self.lease_free.append(not self.store.redis.exists(keys.lease(response_id)))
        self.watched_until.append(self.store.redis.zscore(keys.active, response_id))

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        self._probe(response_id)
        super().enqueue_turn(response_id, turn, retry=retry)

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        self._probe(response_id)
        super().enqueue_tools(response_id, calls, then_turn=then_turn)


def test_a_run_hands_its_lease_over_before_queuing_the_next_work(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(internal_tool_modules="tests.support.tools", lease_seconds=30)
    loop = Loop(
        store=store,
        settings=settings,
        model=ScriptedModel(
            calls(("call_a", "fast_echo", json.dumps({"text": "a"}))), text("done")
        ),
        dispatcher=LeaseProbe(store),
    )
    rid = loop.create(tools=internal("fast_echo"))
    probe = loop.dispatcher
    assert isinstance(probe, LeaseProbe)
    probe.lease_free.clear()  # the create's own hand-off
    probe.watched_until.clear()
    before = time.time()
    deps = loop.leased_deps()

    assert advance_response(deps, rid, 0) == "waiting"

    # The tools' callback turn can take the lease the moment it arrives (no retry, no sweeper)…
    assert probe.lease_free == [True]
    # …and the sweeper still watches the response until the tools' deadline has passed.
    [until] = probe.watched_until
    assert until is not None and until >= before + settings.tool_timeout_seconds


def test_a_run_starts_a_queued_response_once_with_its_event(
    make_loop: Callable[..., Loop],
) -> None:
    loop = make_loop(text("done"))
    rid = loop.create(background=True)

    assert advance_response(loop.leased_deps(), rid, 0) == "completed"

    types = [event["type"] for event in loop.events(rid)]
    assert types[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert types.count("response.in_progress") == 1
    assert loop.response(rid).status == "completed"


def test_a_finished_run_leaves_no_lease_and_no_watch(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    loop = Loop(store=store, settings=make_settings(), model=ScriptedModel(text("done")))
    rid = loop.create()
    deps = loop.leased_deps()

    assert advance_response(deps, rid, 0) == "completed"

    assert not store.redis.exists(store.keys.lease(rid))  # freed by the final write itself
    assert store.redis.zscore(store.keys.active, rid) is None
    assert deps.leases is not None and deps.leases.held() == 0  # nothing left to renew


def keys_of(store: ResponseStore, rid: str) -> dict[str, int]:
    """Every key the response left in Redis, with its time to live in seconds."""
    return {key.decode(): store.redis.ttl(key) for key in keys_like(store.redis, f"*{rid}*")}


def test_a_store_false_response_leaves_no_key_that_outlives_its_record(
    make_loop: Callable[..., Loop],
) -> None:
    """Before, the count of starts of its last turn and of each tool call lived the stored
    responses' 30 days: a key per request of a client that stores nothing (Codex)."""
    loop = make_loop(
        calls(("call_a", "fast_echo", "{}"), ("call_b", "calculator", '{"expression": "1+1"}')),
        text("done"),
    )
    rid = loop.create(store=False, tools=internal("fast_echo", "calculator"))
    unstored = loop.store.unstored_ttl_seconds
    assert unstored < loop.store.ttl_seconds

    assert loop.drive(rid, leased=True) == "completed"

    left = keys_of(loop.store, rid)
    assert loop.store.keys.record(rid) in left
    assert {key: ttl for key, ttl in left.items() if not 0 < ttl <= unstored} == {}


def test_a_finished_response_keeps_no_count_of_starts(make_loop: Callable[..., Loop]) -> None:
    loop = make_loop(calls(("call_a", "fast_echo", "{}")), text("done"))
    rid = loop.create(tools=internal("fast_echo"))

    assert loop.drive(rid, leased=True) == "completed"

    assert keys_like(loop.store.redis, f"*{rid}*:starts") == []


def test_a_cancel_takes_the_running_turn_s_count_of_starts(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    """The run it stops finds its lease gone and gives nothing back: the cancel's write does."""
    loop = Loop(store=store, settings=make_settings(), model=ScriptedModel(text("never")))
    rid = loop.create(background=True)
    run = LeaseKeeper(store, lease_seconds=30)
    assert run.acquire(rid, 0, counts_start=True).taken
    assert store.redis.exists(store.keys.turn_starts(rid, 0))

    assert cancel_response(store, loop.dispatcher, rid).status == "cancelled"
    run.release(rid)  # the stopped run: the lease is no longer its own

    assert not store.redis.exists(store.keys.turn_starts(rid, 0))
    assert run.held() == 0


def _die_mid_turn(store: ResponseStore, settings: Settings, rid: str, turn: int) -> None:
    """A run of ``turn`` takes the lease, counts its start, and its worker dies."""
    keeper = LeaseKeeper(store, lease_seconds=settings.lease_seconds)
    assert keeper.acquire(rid, turn, counts_start=True).taken
    keeper.forget(rid)  # its renewer died with it
    store.redis.delete(store.keys.lease(rid))  # never renewed again: it lapses


def test_a_turn_whose_runs_die_is_given_up_after_the_cap_however_it_is_delivered(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(max_task_deliveries=2)
    loop = Loop(store=store, settings=settings, model=ScriptedModel(text("never")))
    rid = loop.create()
    _die_mid_turn(store, settings, rid, 0)  # the first delivery
    _die_mid_turn(store, settings, rid, 0)  # the sweeper's, under a new task id

    with pytest.raises(RedeliveredTooOftenError) as raised:
        advance_response(loop.leased_deps(), rid, 0, counts_start=True)  # the third start

    assert raised.value.deliveries == 3
    assert not store.redis.exists(store.keys.lease(rid))  # taken and given back
    # Started by the lease's read, not run: the task fails it (workers/tasks.py).
    assert store.get(rid).response.status == "in_progress"
    assert loop.model.requests == []  # the model was never called


def test_a_turn_delivered_while_another_run_holds_it_is_not_counted(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(max_task_deliveries=1)
    loop = Loop(store=store, settings=settings, model=ScriptedModel(text("hi")))
    rid = loop.create()
    holder = LeaseKeeper(store, lease_seconds=settings.lease_seconds)
    assert holder.acquire(rid, 0, counts_start=True).taken

    for _ in range(3):  # duplicates and late deliveries: skipped, never started
        assert advance_response(loop.leased_deps(), rid, 0, counts_start=True) == "skipped"

    assert store.redis.get(store.keys.turn_starts(rid, 0)) == b"1"
    holder.release(rid)
    assert advance_response(loop.leased_deps(), rid, 0, counts_start=True) == "completed"


def test_a_turn_re_run_after_its_worker_died_completes(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()  # the default cap
    loop = Loop(store=store, settings=settings, model=ScriptedModel(text("hi")))
    rid = loop.create()
    _die_mid_turn(store, settings, rid, 0)

    assert advance_response(loop.leased_deps(), rid, 0, counts_start=True) == "completed"
    assert store.get(rid).response.output[0]["content"][0]["text"] == "hi"


def test_a_turn_run_once_per_batch_of_tool_calls_is_not_a_poison_turn(
    make_loop: Callable[..., Loop],
) -> None:
    # Turn 1 runs four times (three batches of calls, then the answer), each run ending
    # cleanly: only runs that die one after another count against the cap.
    loop = make_loop(
        calls(*[(f"call_{i}", "fast_echo", "{}") for i in range(5)]),
        text("done"),
        max_parallel_tools=2,
        max_task_deliveries=1,
    )
    rid = loop.create(tools=internal("fast_echo"))

    assert loop.drive(rid, leased=True) == "completed"

    assert len(loop.dispatcher.chords) == 3
