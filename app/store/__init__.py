"""The response store and event log in Redis.

Scripts (``app/store/lua/``, one file each, run through typed calls: :mod:`app.store.scripts`)
hold every invariant that spans keys. The parts, by responsibility:

* :mod:`~app.store.records` — response records and their compare-and-set writes: a write
  checks the status against its transition (:mod:`~app.store.status`, the one status table)
  and emits its events in the same step, so ``response.completed`` exists exactly when the
  stored status says ``completed``;
* :mod:`~app.store.events` — the event log: emit (refused once the response is no longer
  active, so nothing is emitted after a cancel), stream reads, and the pub/sub line format;
* :mod:`~app.store.history` — the items before a response's input, kept once per chain (and
  per conversation) in a list that each response references (the length costs no round trip);
* :mod:`~app.store.turns` — a run's first read, which marks where its turn's events begin and
  starts a queued response, together with the lease (``app.lease``) when one is asked for;
* :mod:`~app.store.fence` — a run's emits and writes fenced with its lease token, so a run
  that lost its lease to another writes nothing;
* :mod:`~app.store.tool_calls` — tool results and the claims on calls;
* :mod:`~app.store.fleet` — delivery counts and worker heartbeats;
* :mod:`~app.store.conversations` — conversations and their items (a response that belongs to
  one adds its items with its final write);
* :mod:`~app.store.timeline` — the stamps and event times the console's timeline reads;
* :mod:`~app.store.clock` — the fleet's one clock, Redis's (:meth:`ResponseStore.now`), for any
  time one process sets and another compares with its own.

:class:`ResponseStore` is all of them over one client. The keyspace is :mod:`app.keys`.
"""

from __future__ import annotations

from app.store.conversations import Conversations, ItemPage
from app.store.events import EmitResult, EventLog, ExpiredCursorError, StoredEvent
from app.store.fence import NO_FENCE, Fence
from app.store.fleet import Fleet, RedeliveredTooOftenError
from app.store.history import Histories, HistoryRef
from app.store.records import Records, StoredResponse, WriteResult
from app.store.timeline import TimelineFacts, Timelines
from app.store.tool_calls import ClaimOutcome, OpenedCall, ToolCalls
from app.store.turns import LeaseRequest, LoadedTurn, OpenedTurn, Turns

__all__ = [
    "ClaimOutcome",
    "Conversations",
    "EmitResult",
    "ExpiredCursorError",
    "Fence",
    "HistoryRef",
    "ItemPage",
    "LeaseRequest",
    "LoadedTurn",
    "NO_FENCE",
    "OpenedCall",
    "OpenedTurn",
    "RedeliveredTooOftenError",
    "ResponseStore",
    "StoredEvent",
    "StoredResponse",
    "TimelineFacts",
    "WriteResult",
]


class ResponseStore(
    Records, Turns, Histories, EventLog, ToolCalls, Fleet, Conversations, Timelines
):
    """Responses, their input items, their event logs and conversations, in one Redis database."""
