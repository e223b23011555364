"""A worker process SIGKILLed mid-turn: the response must still end.

Celery alone would redeliver the turn only after the broker's visibility timeout (an hour); the
turn's lease lapses much sooner and a surviving worker's sweeper enqueues it again.
"""

from __future__ import annotations

import signal
import time

import openai

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import TERMINAL, check_sequence, plain, validate_event, wait_for_status

RECOVERY_SECONDS = 60.0


def test_worker_death_sigkill_mid_turn_still_ends_the_response(
    fleet: Fleet, client: openai.OpenAI
) -> None:
    fleet.stop("worker-0")  # idle: a warm shutdown; the victim below must take the job
    try:
        fleet.start_worker("worker-victim")
        created = client.responses.create(
            model="antwort-sim", input="survive [tokens=300] [delay_ms=10]", background=True
        )
        running = wait_for_status(client, created.id, {"in_progress", *TERMINAL}, timeout=30)
        assert running.status == "in_progress", "the turn ended before the kill"
        with client.responses.retrieve(created.id, stream=True) as stream:
            for event in stream:  # some text is out: the kill lands mid-generation
                if event.type == "response.output_text.delta":
                    break
        fleet.stop("worker-victim", signal.SIGKILL)
        assert client.responses.retrieve(created.id).status == "in_progress"
        fleet.start_worker("worker-rescue")

        deadline = time.monotonic() + RECOVERY_SECONDS
        status = client.responses.retrieve(created.id).status
        while status not in TERMINAL and time.monotonic() < deadline:
            time.sleep(0.2)
            status = client.responses.retrieve(created.id).status
        assert status in TERMINAL, f"still {status} {RECOVERY_SECONDS:.0f}s after the kill"

        final = client.responses.retrieve(created.id)
        assert final.status == "completed", final.error
        assert len(final.output_text.split()) == 300
        with client.responses.retrieve(created.id, stream=True) as stream:
            events = [plain(event) for event in stream]
        # The re-run turn repeats no event: every sequence number once, one text, one end.
        check_sequence(events)
        for payload in events:
            validate_event(payload)
        types = [payload["type"] for payload in events]
        assert types.count("response.in_progress") == 1
        assert types.count("response.output_item.added") == 1
        assert types[-1] == "response.completed"
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert text == final.output_text
    finally:
        for name in ("worker-victim", "worker-rescue"):
            if name in fleet.procs:
                fleet.stop(name)
        fleet.start_worker("worker-0")
        _wait_until_served(client)


def _wait_until_served(client: openai.OpenAI) -> None:
    """The restarted default worker answers again (later tests rely on it)."""
    probe = client.responses.create(model="antwort-sim", input="probe [tokens=2]", background=True)
    assert wait_for_status(client, probe.id, TERMINAL, timeout=60).status == "completed"
