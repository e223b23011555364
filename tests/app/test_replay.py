"""A re-run's events against what the run before it emitted: text deltas trimmed, logprobs too."""

from __future__ import annotations

import json
from typing import Any

from app.protocol.events import output_text_delta
from app.replay import ReplayGuard
from app.store import StoredEvent


def _delta(text: str, *tokens: str) -> dict[str, Any]:
    logprobs = [{"token": t, "logprob": -0.5, "bytes": [], "top_logprobs": []} for t in tokens]
    return output_text_delta("msg_1", 0, 0, text, logprobs)


def _emitted(*events: dict[str, Any]) -> list[StoredEvent]:
    return [
        StoredEvent(sequence_number=n, type=e["type"], data=json.dumps(e))
        for n, e in enumerate(events)
    ]


def test_a_re_run_s_delta_is_trimmed_with_the_logprobs_of_what_was_sent() -> None:
    guard = ReplayGuard(_emitted(_delta("Hello wo", "Hello", " wo")))

    again = guard.filter(_delta("Hello world", "Hello", " world"))

    assert again is not None
    assert again["delta"] == "rld"
    # " world" ends past what was sent: its logprob goes with the rest of its text
    assert [t["token"] for t in again["logprobs"]] == [" world"]
    assert guard.filter(_delta("!", "!")) == _delta("!", "!")
