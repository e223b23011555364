"""The agentic loop across real workers: tool chords, pauses, tool_choice, limits, cancel."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import openai
import pytest
import redis

from app.keys import Keys
from tests.e2e.conftest import Fleet
from tests.e2e.helpers import (
    CLIENT_FN,
    TERMINAL,
    internal,
    tool_runs,
    wait_for_status,
    wait_until_tool_runs,
)


def kinds(response: Any) -> list[str]:
    return [item.type for item in response.output]


def test_loop_runs_internal_tool_and_answers_with_its_result(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="please use calculator expression=6*7",
        tools=internal("calculator"),  # type: ignore[arg-type]
    )
    assert response.status == "completed"
    assert kinds(response) == ["function_call", "function_call_output", "message"]
    call, result, _ = response.output
    assert call.name == "calculator"  # type: ignore[union-attr]
    assert result.call_id == call.call_id and result.output == "42"  # type: ignore[union-attr]
    assert response.output_text == "Tool results: 42"


def test_parallel_calls_return_in_call_order(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="run slow_echo and fast_echo and calculator expression=1+1",
        tools=internal("slow_echo", "fast_echo", "calculator"),  # type: ignore[arg-type]
    )
    outputs = [item.output for item in response.output if item.type == "function_call_output"]  # type: ignore[union-attr]
    assert outputs == ["slow_echo done", "fast_echo done", "2"]
    assert response.output_text == "Tool results: slow_echo done; fast_echo done; 2"


def test_parallel_calls_overlap(client: openai.OpenAI, fleet: Fleet, counters: redis.Redis) -> None:
    """Two calls of one turn both run at once: both start while neither may end (their gates
    stay shut), seen in the tools' own counters, not the clock. One after the other, the second
    would start only once the first's gate opened."""
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    tag = uuid.uuid4().hex  # call ids hash the input
    response = client.responses.create(
        model="antwort-sim",
        input=" ".join(f'[call counted_gated {{"note": "{n} {tag}"}}]' for n in "ab"),
        tools=internal("counted_gated"),  # type: ignore[arg-type]
        background=True,
    )
    deadline = time.monotonic() + 40  # the gates' own 50 s would end the calls anyway
    calls: list[str] = []
    while len(calls) < 2 or any(tool_runs(counters, prefix, call) != (1, 0) for call in calls):
        current = client.responses.retrieve(response.id)
        assert current.status not in TERMINAL, current.output
        assert time.monotonic() < deadline, "the second call never started beside the first"
        calls = [item.call_id for item in current.output if item.type == "function_call"]  # type: ignore[union-attr]
        time.sleep(0.05)
    for call in calls:
        counters.set(f"{prefix}test:gate:{call}", 1)
    current = wait_for_status(client, response.id, TERMINAL, timeout=60)
    assert current.status == "completed", current.error
    assert current.output_text == "Tool results: counted_gated done; counted_gated done"


def test_parallel_tool_calls_false_runs_one_call_per_turn(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="run slow_echo and fast_echo",
        tools=internal("slow_echo", "fast_echo"),  # type: ignore[arg-type]
        parallel_tool_calls=False,
    )
    assert kinds(response) == ["function_call", "function_call_output", "message"]
    assert response.output_text == "Tool results: slow_echo done"


def test_mixed_turn_runs_server_calls_then_pauses_for_client(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="calculator expression=2*3 then get_weather city=Paris",
        tools=[*internal("calculator"), CLIENT_FN],  # type: ignore[list-item]
    )
    assert response.status == "requires_action"  # a server-side tool engages the loop
    assert kinds(response) == ["function_call", "function_call", "function_call_output"]
    pending = response.output[1]
    assert pending.name == "get_weather"  # type: ignore[union-attr]

    follow = client.responses.create(
        model="antwort-sim",
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": pending.call_id, "output": "sunny"}],  # type: ignore[union-attr]
        tools=[*internal("calculator"), CLIENT_FN],  # type: ignore[list-item]
    )
    assert follow.status == "completed"
    assert follow.output_text == "Tool results: 6; sunny"


def test_client_function_only_pauses_as_completed(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="get_weather city=Oslo",
        tools=[CLIENT_FN],  # type: ignore[list-item]
    )
    assert response.status == "completed"
    assert kinds(response) == ["function_call"]


def test_continuation_with_unknown_call_id_is_400(client: openai.OpenAI) -> None:
    response = client.responses.create(model="antwort-sim", input="get_weather", tools=[CLIENT_FN])  # type: ignore[list-item]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="antwort-sim",
            previous_response_id=response.id,
            input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
        )
    assert caught.value.param == "input.0.call_id"


def test_continuation_missing_an_output_is_400_naming_it(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="get_weather and calculator",
        tools=[CLIENT_FN, {"type": "function", "name": "calculator"}],  # type: ignore[list-item]
    )
    first, second = response.output
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="antwort-sim",
            previous_response_id=response.id,
            input=[{"type": "function_call_output", "call_id": first.call_id, "output": "x"}],  # type: ignore[union-attr]
        )
    assert second.call_id in caught.value.message  # type: ignore[union-attr]


def test_tool_choice_none_returns_calls_unexecuted(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="calculator expression=1",
        tools=internal("calculator"),  # type: ignore[arg-type]
        tool_choice="none",
    )
    assert response.status == "completed"
    assert kinds(response) == ["message"]  # the simulator honours none: no call at all


def test_forced_tool_applies_to_first_turn_only(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="hello",
        tools=internal("calculator"),  # type: ignore[arg-type]
        tool_choice={"type": "function", "name": "calculator"},  # type: ignore[typeddict-item]
    )
    assert response.status == "completed"
    assert kinds(response) == ["function_call", "function_call_output", "message"]


def test_tool_choice_required_makes_the_model_call_a_tool(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="hello",  # names no tool: only "required" makes the model call one
        tools=internal("fast_echo", "calculator"),  # type: ignore[arg-type]
        tool_choice="required",
    )
    assert response.status == "completed"
    assert kinds(response) == ["function_call", "function_call_output", "message"]
    assert response.output[0].name == "fast_echo"  # type: ignore[union-attr]
    assert response.output_text == "Tool results: fast_echo done"
    assert response.tool_choice == "required"


def test_allowed_tools_required_runs_an_allowed_tool(client: openai.OpenAI) -> None:
    choice = {"type": "allowed_tools", "mode": "required", "tools": internal("fast_echo")}
    response = client.responses.create(
        model="antwort-sim",
        input="hello",
        tools=internal("fast_echo", "calculator"),  # type: ignore[arg-type]
        tool_choice=choice,  # type: ignore[arg-type]
    )
    assert response.status == "completed"
    assert kinds(response) == ["function_call", "function_call_output", "message"]
    assert response.output[1].output == "fast_echo done"  # type: ignore[union-attr]


def test_allowed_tools_none_answers_without_tools(client: openai.OpenAI) -> None:
    choice = {"type": "allowed_tools", "mode": "none", "tools": internal("fast_echo")}
    response = client.responses.create(
        model="antwort-sim",
        input="fast_echo",
        tools=internal("fast_echo"),  # type: ignore[arg-type]
        tool_choice=choice,  # type: ignore[arg-type]
    )
    assert response.status == "completed"
    assert kinds(response) == ["message"]


def test_forced_function_name_not_among_tools_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="antwort-sim",
            input="hello",
            tools=[CLIENT_FN],  # type: ignore[list-item]
            tool_choice={"type": "function", "name": "calculator"},
        )
    assert caught.value.param == "tool_choice"
    assert caught.value.status_code == 400


def test_forced_unknown_tool_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="antwort-sim",
            input="hello",
            tools=internal("calculator"),  # type: ignore[arg-type]
            tool_choice={"type": "function", "name": "nope"},  # type: ignore[typeddict-item]
        )
    assert caught.value.param == "tool_choice"


def test_allowed_tools_rejects_other_calls_and_goes_on(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="calculator expression=2 and fast_echo",
        tools=internal("calculator", "fast_echo"),  # type: ignore[arg-type]
        tool_choice={  # type: ignore[typeddict-item]
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "internal", "name": "fast_echo"}],
        },
    )
    assert response.status == "completed"
    outputs = {
        item.call_id: item.output  # type: ignore[union-attr]
        for item in response.output
        if item.type == "function_call_output"
    }
    calls = {item.name: item.call_id for item in response.output if item.type == "function_call"}  # type: ignore[union-attr]
    assert "not allowed" in outputs[calls["calculator"]]
    assert outputs[calls["fast_echo"]] == "fast_echo done"


def test_tool_error_and_timeout_are_results_the_model_sees(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="failing_tool and hanging_tool",
        tools=internal("failing_tool", "hanging_tool"),  # type: ignore[arg-type]
    )
    assert response.status == "completed"
    failing, hanging = [i.output for i in response.output if i.type == "function_call_output"]  # type: ignore[union-attr]
    assert "failing_tool exploded" in failing
    assert "timed out after 1 s" in hanging


def test_tool_output_is_capped_with_marker(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input="big_output",
        tools=internal("big_output"),  # type: ignore[arg-type]
    )
    output = next(i.output for i in response.output if i.type == "function_call_output")  # type: ignore[union-attr]
    assert output.endswith("[output truncated: 1000 of 5000 characters shown]")


def test_max_tool_calls_runs_no_more_and_the_model_goes_on(client: openai.OpenAI) -> None:
    """As OpenAI's SDK documents it: a call past the limit is not executed (the model is told
    so in its result) and the response completes."""
    response = client.responses.create(
        model="antwort-sim",
        input="slow_echo and fast_echo",
        tools=internal("slow_echo", "fast_echo"),  # type: ignore[arg-type]
        max_tool_calls=1,
    )
    assert response.status == "completed"
    names = {i.call_id: i.name for i in response.output if i.type == "function_call"}  # type: ignore[union-attr]
    results = {
        names[i.call_id]: i.output  # type: ignore[union-attr]
        for i in response.output
        if i.type == "function_call_output"
    }
    assert results == {
        "slow_echo": "slow_echo done",
        "fast_echo": "Error: max_tool_calls (1) reached: 'fast_echo' was not executed.",
    }
    assert response.output_text.startswith("Tool results: ")
    assert "max_tool_calls (1) reached" in response.output_text


def test_streaming_across_turns_has_one_start_and_one_end(client: openai.OpenAI) -> None:
    with client.responses.create(
        model="antwort-sim",
        input="calculator expression=3*3",
        tools=internal("calculator"),  # type: ignore[arg-type]
        stream=True,
    ) as stream:
        events = list(stream)
    types = [event.type for event in events]
    assert types.count("response.created") == 1 and types.count("response.in_progress") == 1
    assert types[-1] == "response.completed" and types.count("response.completed") == 1
    seqs = [event.sequence_number for event in events]
    assert seqs == list(range(len(events)))
    indexes = [e.output_index for e in events if e.type == "response.output_item.added"]  # type: ignore[union-attr]
    assert indexes == [0, 1, 2]


def test_cancel_while_tools_run(client: openai.OpenAI, fleet: Fleet, counters: redis.Redis) -> None:
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    response = client.responses.create(
        model="antwort-sim",
        input=f"counted_gated ({uuid.uuid4().hex})",  # call ids hash the input
        tools=internal("counted_gated"),  # type: ignore[arg-type]
        background=True,
    )
    call_id = wait_until_tool_runs(client, counters, prefix, response.id)

    cancelled = client.responses.cancel(response.id)

    assert cancelled.status == "cancelled"
    # A revoke does not stop a running task: the tool runs to its end (the test lets it end
    # only now) and offers its result, which the store refuses (giving the call's claim back
    # in the same step).
    counters.set(f"{prefix}test:gate:{call_id}", 1)
    deadline = time.monotonic() + 30
    while tool_runs(counters, prefix, call_id)[1] == 0 or counters.exists(
        Keys(prefix).tool_claim(response.id, call_id)
    ):
        assert time.monotonic() < deadline, "the tool never finished"
        time.sleep(0.05)
    final = client.responses.retrieve(response.id)
    assert final.status == "cancelled"
    assert [i.type for i in final.output] == ["function_call"]  # its late result was discarded
    raw = httpx.get(f"{fleet.base_url}/v1/responses/{response.id}?stream=true", timeout=10).text
    assert "function_call_output" not in raw


def test_next_turn_after_a_fast_tool_runs_once_at_once(
    client: openai.OpenAI, fleet: Fleet, redis_client: redis.Redis
) -> None:
    """The tool's callback takes the lease the run that queued it handed over: the next turn
    runs at once, once, and nothing is left to the sweeper (which would wait out the tool's
    60 s deadline)."""
    response = client.responses.create(
        model="antwort-sim",
        input="fast_echo",
        tools=internal("fast_echo"),  # type: ignore[arg-type]
        background=True,
    )

    final = wait_for_status(client, response.id, TERMINAL, timeout=45)  # the sweeper: 60 s

    assert final.status == "completed"
    assert kinds(final) == ["function_call", "function_call_output", "message"]
    events = list(client.responses.retrieve(response.id, stream=True))
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert [event.type for event in events].count("response.completed") == 1
    record = Keys(fleet.env["ANTWORT_KEY_PREFIX"]).record(response.id)
    assert redis_client.hexists(record, "turn1_seq")  # turn 1 started once, as a first run


def test_tool_holding_the_gil_times_out_and_the_worker_serves_others_meanwhile(
    client: openai.OpenAI,
) -> None:
    started = time.monotonic()
    response = client.responses.create(
        model="antwort-sim",
        input="gil_holder and fast_echo",
        tools=internal("gil_holder", "fast_echo"),  # type: ignore[arg-type]
    )
    assert response.status == "completed"
    holder, fast = [i.output for i in response.output if i.type == "function_call_output"]  # type: ignore[union-attr]
    assert holder == "Error: tool 'gil_holder' timed out after 1 s."
    assert fast == "fast_echo done"
    assert time.monotonic() - started < 30  # in the worker itself: minutes
    again = client.responses.create(
        model="antwort-sim",
        input="fast_echo",
        tools=internal("fast_echo"),  # type: ignore[arg-type]
    )  # a new tool host follows the killed one
    outputs = [i.output for i in again.output if i.type == "function_call_output"]  # type: ignore[union-attr]
    assert outputs == ["fast_echo done"]
