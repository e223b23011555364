"""Stopping an ``EventHub`` that a test started (its thread waits for the next message)."""

from __future__ import annotations

from app.relay import EventHub
from app.store import ResponseStore
from app.store.events import END_LINE, publish


def stop_hub(hub: EventHub, store: ResponseStore) -> None:
    """Stop ``hub`` (on ``store``'s Redis and keys) and wait for its thread, if it started."""
    hub.stop()
    thread = hub._thread
    if thread is None:
        return
    publish(store.redis, store.keys.channel("wake-up"), END_LINE)  # ends the hub's wait
    thread.join(timeout=10)
