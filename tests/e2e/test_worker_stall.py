"""A worker stalled (SIGSTOP) longer than its lease while its turn streams: the sweeper hands the
turn to another worker, and the stalled one, woken up mid-way through the rescue, is fenced out
(app/store/fence.py): every event once, the text an undisturbed run's, its late writes refused.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import openai
import redis

from app.keys import Keys
from tests.e2e.conftest import Fleet
from tests.e2e.helpers import (
    TERMINAL,
    check_sequence,
    plain,
    validate_event,
    wait_for_heartbeat,
    wait_for_status,
)
from tests.e2e.test_worker_death import _last_sequence_number, _wait_until_served

PROMPT = "stall [tokens=600] [delay_ms=10]"
"""Six seconds of text: the rescue still streams when the stalled worker wakes up."""
REFUSED = "another run holds the lease"
"""What a fenced-out run logs (app/run.py, app/sink.py's LeaseLostError)."""


def test_worker_stalled_past_its_lease_is_fenced_out_by_the_rescue(
    fleet: Fleet, client: openai.OpenAI
) -> None:
    baseline = client.responses.create(model="antwort-sim", input=PROMPT, background=True)
    undisturbed = wait_for_status(client, baseline.id, TERMINAL, timeout=60)
    fleet.stop("worker-0")  # idle: a warm shutdown; the victim below must take the job
    keys = Keys(fleet.env["ANTWORT_KEY_PREFIX"])
    store = redis.Redis.from_url(fleet.env["ANTWORT_REDIS_URL"])
    try:
        victim = fleet.start_worker("worker-victim")
        created = client.responses.create(model="antwort-sim", input=PROMPT, background=True)
        running = wait_for_status(client, created.id, {"in_progress", *TERMINAL}, timeout=30)
        assert running.status == "in_progress", "the turn ended before the stall"
        with client.responses.retrieve(created.id, stream=True) as stream:
            for event in stream:  # some text is out: the stall lands mid-generation
                if event.type == "response.output_text.delta":
                    break
        victim_lease = store.get(keys.lease(created.id))
        victim.send_signal(signal.SIGSTOP)
        stalled_at = _last_sequence_number(fleet, created.id)
        # started only now: a rescue takes seconds to start on a busy machine, in which a victim
        # still running could have ended its turn
        rescue = fleet.start_worker("worker-rescue")
        wait_for_heartbeat(fleet.env, "inference", rescue.pid)

        # The lease lapses, the rescue takes the turn over and streams past the stalled point.
        deadline = time.monotonic() + 30
        while _last_sequence_number(fleet, created.id) < stalled_at + 20:
            assert time.monotonic() < deadline, "the rescue never took the turn over"
            time.sleep(0.05)
        rescue_lease = store.get(keys.lease(created.id))
        assert rescue_lease is not None and rescue_lease != victim_lease
        assert client.responses.retrieve(created.id).status == "in_progress"
        victim.send_signal(signal.SIGCONT)  # wakes up while the rescue still streams

        final = wait_for_status(client, created.id, TERMINAL, timeout=60)
        assert final.status == "completed", final.error
        assert final.output_text == undisturbed.output_text
        with client.responses.retrieve(created.id, stream=True) as stream:
            _check_events([plain(event) for event in stream], text=undisturbed.output_text)
        deadline = time.monotonic() + 10
        while REFUSED not in _log(fleet, "worker-victim"):
            assert time.monotonic() < deadline, "the stalled worker's writes were not refused"
            time.sleep(0.1)
    finally:
        store.close()
        if "worker-victim" in fleet.procs:
            fleet.procs["worker-victim"].send_signal(signal.SIGCONT)
        for name in ("worker-victim", "worker-rescue"):
            if name in fleet.procs:
                fleet.stop(name)
        fleet.start_worker("worker-0")
        _wait_until_served(client)


def _log(fleet: Fleet, name: str) -> str:
    return (fleet.log_dir / f"{name}.log").read_text(errors="replace")


def _check_events(events: list[dict[str, Any]], *, text: str) -> None:
    """0..N, each once, one item, one end: nothing repeated by the stalled worker."""
    check_sequence(events)
    for payload in events:
        validate_event(payload)
    types = [payload["type"] for payload in events]
    assert types.count("response.output_item.added") == 1
    assert types.count("response.completed") == 1 and types[-1] == "response.completed"
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == text
