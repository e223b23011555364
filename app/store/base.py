"""What every part of the store shares: the client, the keyspace, the lifetimes, the scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from app import cooperation
from app.keys import Keys
from app.store.clock import RedisClock
from app.store.scripts import BoundScript, LuaScript, counted, key

if TYPE_CHECKING:
    from app.store.scripts import CallT


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendBatchCall:
    """The operands of ``append_batch.lua``: a guarded append to any list."""

    target: str = key()
    before: int
    """The items the list must hold for this batch to go on (else it went on already)."""
    ttl: int
    items: tuple[str, ...] = counted()


APPEND_BATCH = LuaScript("append_batch", AppendBatchCall)
HISTORY_SLACK_SECONDS = 24 * 3600
"""How much longer than a record a history list lives: a record's last write may come a turn
after the last read of its history."""


class StoreBase:
    """The state the store's parts share; :class:`app.store.ResponseStore` is all of them."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        keys: Keys,
        ttl_seconds: int,
        unstored_ttl_seconds: int = 300,
        stream_maxlen: int = 20_000,
        queues: redis.Redis | None = None,
    ):
        self.redis = client
        self.queues = client if queues is None else queues
        """Where Celery's queues are (``ANTWORT_BROKER_URL``'s Redis; else the store's)."""
        self.keys = keys
        self.ttl_seconds = ttl_seconds
        self.unstored_ttl_seconds = unstored_ttl_seconds
        self.stream_maxlen = stream_maxlen
        self.clock = RedisClock(client)
        """The fleet's one clock (:mod:`app.store.clock`): :meth:`now`."""
        self._scripts: dict[str, BoundScript[Any]] = {}

    def now(self) -> float:
        """Epoch seconds on the fleet's clock, Redis's: for any time another process reads."""
        return self.clock.now()

    @property
    def history_ttl(self) -> int:
        """A history list's lifetime (:mod:`app.store.history`), from its last use."""
        return self.ttl_seconds + HISTORY_SLACK_SECONDS

    def read_list(self, key: str, end: int | None = None, *, start: int = 0) -> list[bytes | str]:
        """The items of the list ``key`` from ``start`` up to ``end`` (None: its end), as stored.

        A batch a call (:data:`app.cooperation.BATCH` items): Redis serves everyone else between
        two (one read of 450,000 items held it 70 ms). Stops at the list's end.
        """
        raw: list[bytes | str] = []
        while True:
            first = start + len(raw)
            size = cooperation.BATCH if end is None else min(cooperation.BATCH, end - first)
            if size <= 0:
                return raw
            batch = self.redis.lrange(key, first, first + size - 1)
            raw.extend(batch)
            if len(batch) < size:
                return raw

    def append_list(self, key: str, items: Sequence[str], *, before: int, ttl: int) -> bool:
        """Append ``items`` to the list ``key``, which holds ``before`` items; whether all went on.

        A batch a call (``append_batch.lua``), each only where the one before left the list (a
        replay after a lost reply pushes nothing twice); Redis serves everyone else between two.
        Each batch sets the list to live ``ttl`` seconds. False when a batch found the list
        elsewhere (it went away meanwhile).
        """
        append = self.script(APPEND_BATCH)
        length = before
        for batch in cooperation.in_batches(items):
            call = AppendBatchCall(target=key, before=length, ttl=ttl, items=tuple(batch))
            length += len(batch)
            if int(append(call)) != length:
                return False
        return True

    def script(self, script: LuaScript[CallT]) -> BoundScript[CallT]:
        """``script`` registered with this store's client (once)."""
        bound = self._scripts.get(script.name)
        if bound is None:
            bound = self._scripts[script.name] = script.bind(self.redis)
        return bound


def text(raw: bytes | str) -> str:
    """A Redis reply as text."""
    return raw.decode() if isinstance(raw, bytes) else raw


def json_items(raw: Sequence[bytes | str]) -> list[dict[str, Any]]:
    """Items stored as JSON texts (a list's), parsed: one parse per batch of them, not per item.

    A batch is :data:`app.cooperation.BATCH` items, with a pause between two, so a long list
    lets its process's other threads (or greenlets) run while it is parsed.
    """
    items: list[dict[str, Any]] = []
    for batch in cooperation.in_batches(raw):
        if batch and isinstance(batch[0], bytes):
            joined: bytes | str = b"[" + b",".join(batch) + b"]"  # type: ignore[arg-type]
        else:
            joined = "[" + ",".join(map(text, batch)) + "]"
        items.extend(json.loads(joined))
    return items
