"""A ``tools.internal`` worker SIGKILLed in the middle of a tool call: the call is retried, its
result is stored once, and the response completes.

Two deaths: the whole worker (its message stays unacked until the broker's visibility timeout;
the call's claim, no longer renewed, lapses within a lease and a sweeper dispatches the call
again), and only its pool child (Celery requeues the task at once; the new delivery finds the
dead delivery's claim and runs the call when the claim lapses). Either way the call runs again
within seconds with the default settings, long before its deadline (a minute). The
``counted_slow`` tool counts in Redis how often each call started and finished.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import httpx
import openai
import psutil
import pytest
import redis

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import (
    TERMINAL,
    check_sequence,
    freeze,
    kill_frozen,
    raw_events,
    tool_runs,
    wait_for_heartbeat,
    wait_for_status,
    wait_until_tool_runs,
)

RECOVERY_SECONDS = 30.0
RETRY_WITHIN_SECONDS = 60.0
"""From the kill to the call's second start: a bound that catches a call never retried, not a
speed target. That one (issue 16 §3: p50 ≤ 5 s, max ≤ 10 s) is measured by ``make chaos``
(``bench/results/chaos.md``). The whole-worker case's rescue is up before the kill: its start
is no part of the retry."""


def _pool_child(proc_pid: int) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = psutil.Process(proc_pid).children()
        if children:
            return children[0].pid
        time.sleep(0.1)
    raise AssertionError("the prefork worker has no pool child")


@pytest.mark.parametrize("victim", ["whole-worker", "pool-child"])
def test_tool_worker_sigkill_mid_call_retries_the_call_and_stores_it_once(
    fleet: Fleet, client: openai.OpenAI, counters: redis.Redis, victim: str
) -> None:
    prefix = fleet.env["ANTWORT_KEY_PREFIX"]
    fleet.stop("tools-0")  # idle: a warm shutdown; the victim below must take the call
    try:
        pool = ["--pool=prefork", "--concurrency=1"] if victim == "pool-child" else []
        worker = fleet.start_worker("tools-victim", "tools.internal", *pool)
        created = client.responses.create(
            model="antwort-sim",
            input=f"counted_slow ({victim}, {uuid.uuid4().hex})",  # call ids hash the input
            tools=[{"type": "internal", "name": "counted_slow"}],  # type: ignore[list-item]
            background=True,
        )
        call_id = wait_until_tool_runs(client, counters, prefix, created.id)

        if victim == "whole-worker":
            frozen = freeze(worker.pid)  # with its tool host: mid-call, until it is killed
            # the rescue is up before the kill, as in a fleet: its start is no part of the retry
            rescue = fleet.start_worker("tools-rescue", "tools.internal")
            wait_for_heartbeat(fleet.env, "tools.internal", rescue.pid)
            fleet.stop("tools-victim", signal.SIGKILL)
            kill_frozen(frozen)
        else:
            os.kill(_pool_child(worker.pid), signal.SIGKILL)
        killed_at = time.monotonic()
        # killed mid-call (the call's claim may have lapsed while the victim was frozen: then
        # the rescue may have started it again already)
        assert tool_runs(counters, prefix, call_id)[1] == 0
        while tool_runs(counters, prefix, call_id)[0] < 2:
            assert time.monotonic() - killed_at < RETRY_WITHIN_SECONDS, "the call was not retried"
            time.sleep(0.05)

        final = wait_for_status(client, created.id, TERMINAL, timeout=RECOVERY_SECONDS)

        assert final.status == "completed", final.error
        assert [item.type for item in final.output] == [
            "function_call",
            "function_call_output",
            "message",
        ]
        assert final.output[1].output == "counted_slow done"  # type: ignore[union-attr]
        assert final.output_text == "Tool results: counted_slow done"
        # Retried once: the killed run started but never finished; the retry ran to the end.
        # (Redispatches that found the retry's claim waited for its result instead of running.)
        assert tool_runs(counters, prefix, call_id) == (2, 1)
        replay = httpx.get(f"{fleet.base_url}/v1/responses/{created.id}?stream=true", timeout=30)
        events = raw_events(replay)
        check_sequence(events)
        types = [payload["type"] for payload in events]
        assert types.count("response.output_item.added") == 3  # the result was added once
        assert types.count("response.completed") == 1 and types[-1] == "response.completed"
    finally:
        for name in ("tools-victim", "tools-rescue"):
            if name in fleet.procs:
                fleet.stop(name)
        fleet.start_worker("tools-0", "tools.internal")
        _wait_until_tools_served(client)


def _wait_until_tools_served(client: openai.OpenAI) -> None:
    """The restarted default tool worker answers again (later tests rely on it)."""
    probe = client.responses.create(
        model="antwort-sim",
        input="fast_echo",
        tools=[{"type": "internal", "name": "fast_echo"}],  # type: ignore[list-item]
        background=True,
    )
    assert wait_for_status(client, probe.id, TERMINAL, timeout=60).status == "completed"
