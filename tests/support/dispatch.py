"""A Dispatcher and a compaction queue that record what they are asked to queue (no broker)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ToolChord:
    """One ``enqueue_tools`` call: the calls and the turn queued after them."""

    response_id: str
    calls: list[tuple[str, str]]
    """``(call_id, queue)`` in dispatch order."""
    then_turn: int


class RecordingDispatcher:
    """Records turns, tool chords and revokes instead of queueing them."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, int]] = []
        self.chords: list[ToolChord] = []
        self.revoked: list[tuple[str, int]] = []
        self.revoked_calls: list[str] = []

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        self.turns.append((response_id, turn))

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        self.chords.append(ToolChord(response_id, list(calls), then_turn))

    def revoke_response(self, response_id: str, turn: int, call_ids: Sequence[str] = ()) -> None:
        self.revoked.append((response_id, turn))
        self.revoked_calls.extend(call_ids)


class RecordingJobQueue:
    """Records the jobs a gateway waits for instead of queueing them."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.kinds: list[str] = []

    def enqueue_job(self, kind: str, job_id: str) -> None:
        self.jobs.append(job_id)
        self.kinds.append(kind)
