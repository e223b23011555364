"""The replay guard: a turn run again after its worker died repeats none of its events.

When a turn starts, the store remembers the last sequence number before it. A second run of
the same turn reads the events the first run emitted after that point and drops them from its
own output: structural events one for one, delta text by length. With a deterministic model the
client sees exactly one copy of every event; with a sampling model the text after the cut may
differ from what the dead run would have written, but nothing is repeated or lost.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from app.protocol.events import MERGEABLE_DELTAS, Event
from app.store import StoredEvent

_Key = tuple[str, int, str, int]


def _key(event: Event) -> _Key:
    item = event.get("item") or {}
    return (
        str(event["type"]),
        int(event.get("output_index", -1)),
        str(event.get("item_id") or item.get("id") or ""),
        int(event.get("content_index", -1)),
    )


class ReplayGuard:
    """Filters a re-run's events against what the earlier run already emitted."""

    def __init__(self, emitted: Iterable[StoredEvent]):
        self._structural: Counter[_Key] = Counter()
        self._text: dict[_Key, int] = {}
        self._consumed: Counter[_Key] = Counter()
        for stored in emitted:
            event = json.loads(stored.data)
            key = _key(event)
            if event["type"] in MERGEABLE_DELTAS:
                self._text[key] = self._text.get(key, 0) + len(event["delta"])
            else:
                self._structural[key] += 1

    def filter(self, event: Event) -> Event | None:
        """The part of ``event`` not yet emitted, or None."""
        key = _key(event)
        if event["type"] in MERGEABLE_DELTAS:
            delta: str = event["delta"]
            skip = max(0, min(len(delta), self._text.get(key, 0) - self._consumed[key]))
            self._consumed[key] += len(delta)
            if skip == len(delta):
                return None
            if not skip:
                return event
            trimmed = {**event, "delta": delta[skip:]}
            if event.get("logprobs"):
                trimmed["logprobs"] = _tokens_after(event["logprobs"], skip)
            return trimmed
        if self._structural[key] > 0:
            self._structural[key] -= 1
            return None
        return event


def _tokens_after(logprobs: list[dict[str, Any]], skip: int) -> list[dict[str, Any]]:
    """The logprobs of the tokens that end past the first ``skip`` characters of their text."""
    kept, end = [], 0
    for token in logprobs:
        end += len(token.get("token") or "")
        if end > skip:
            kept.append(token)
    return kept
