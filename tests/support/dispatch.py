"""A Dispatcher that records what it is asked to queue (for tests without a broker)."""

from __future__ import annotations

from collections.abc import Sequence


class RecordingDispatcher:
    """Records turns and revokes; tool chords are not expected where it is used."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, int]] = []
        self.revoked: list[tuple[str, int]] = []

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        self.turns.append((response_id, turn))

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        raise AssertionError("no server-side tools here")

    def revoke_response(self, response_id: str, turn: int, call_ids: Sequence[str] = ()) -> None:
        self.revoked.append((response_id, turn))
