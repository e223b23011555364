"""Leases and the sweeper: how a turn survives the death of the worker that ran it.

A turn holds a lease (a Redis key with a TTL) while it runs; one thread per process renews the
leases of that process's turns. A worker that dies stops renewing; within ``lease_seconds`` the
sweeper of any other worker sees the lapsed lease of an ``in_progress`` response and enqueues
that turn again. Celery's own redelivery (the visibility timeout, an hour) would be far slower.
The lease is taken with ``SET NX``, so two runs of one turn never overlap.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass

import redis

from app.dispatch import Dispatcher
from app.store import LOAD_TURN_LUA, LoadedTurn, ResponseStore, loaded_turn

logger = logging.getLogger(__name__)

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[3] == '' then
    redis.call('ZREM', KEYS[2], ARGV[2])
  else
    redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
  end
  return 1
end
return 0
"""
# KEYS: lease, active, deliveries, then load_turn's keys. ARGV: token, ttl ms, deadline,
# response id, "1" to count this delivery, deliveries ttl, then load_turn's argument. Returns
# {1 when taken, the delivery count (0 when none was counted), what load_turn returned (only
# when taken)}: the lease and the turn's first read in one step.
_ACQUIRE = (
    LOAD_TURN_LUA
    + """
local deliveries = 0
if ARGV[5] == '1' then
  deliveries = redis.call('INCR', KEYS[3])
  redis.call('EXPIRE', KEYS[3], ARGV[6])
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  local loaded = load_turn(KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[7], ARGV[8], ARGV[9], ARGV[10])
  return {1, deliveries, loaded}
end
return {0, deliveries}
"""
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Acquired:
    """What :meth:`LeaseKeeper.acquire` found."""

    taken: bool
    """False while another live run holds the lease."""
    deliveries: int
    """The delivery count of the named delivery (0 when none was named)."""
    loaded: LoadedTurn | None
    """The turn's first read (:meth:`ResponseStore.load_turn`), when the lease was taken."""


_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  return 1
end
return 0
"""


class LeaseKeeper:
    """Takes, renews and releases the leases of one process's running turns."""

    def __init__(self, store: ResponseStore, *, lease_seconds: float):
        self._store = store
        self._lease_seconds = lease_seconds
        self._held: dict[str, str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._acquire = store.redis.register_script(_ACQUIRE)
        self._release = store.redis.register_script(_RELEASE)
        self._renew = store.redis.register_script(_RENEW)

    def acquire(self, response_id: str, turn: int, *, delivery: str | None = None) -> Acquired:
        """Take the response's lease and read ``turn`` (:meth:`ResponseStore.load_turn`).

        One round trip: the sweeper's watch goes on with the lease, and ``delivery``, when
        named, is counted in the same step.
        """
        token = secrets.token_hex(8)
        keys = self._store.keys
        load_keys, load_args = self._store.load_turn_operands(response_id, turn)
        raw = self._acquire(
            keys=[
                keys.lease(response_id),
                keys.active,
                keys.deliveries(delivery or response_id),
                *load_keys,
            ],
            args=[
                token,
                int(self._lease_seconds * 1000),
                repr(time.time() + self._lease_seconds),
                response_id,
                "0" if delivery is None else "1",
                self._store.ttl_seconds,
                *load_args,
            ],
        )
        if not raw[0]:
            return Acquired(taken=False, deliveries=int(raw[1]), loaded=None)
        with self._lock:
            self._held[response_id] = token
            self._start_renewer()
        return Acquired(taken=True, deliveries=int(raw[1]), loaded=loaded_turn(raw[2]))

    def release(self, response_id: str, *, wait_until: float | None = None) -> None:
        """Give the lease back.

        Args:
            response_id: The response whose run ended.
            wait_until: The run handed work to tool workers: if no run has started by then
                (epoch seconds), the sweeper enqueues one.
        """
        with self._lock:
            token = self._held.pop(response_id, None)
        if token is not None:
            keys = self._store.keys
            deadline = "" if wait_until is None else repr(wait_until)
            self._release(
                keys=[keys.lease(response_id), keys.active], args=[token, response_id, deadline]
            )

    def held(self) -> int:
        """Leases this process holds now (for tests and metrics)."""
        with self._lock:
            return len(self._held)

    def forget(self, response_id: str) -> None:
        """Stop renewing a lease that a terminal write already freed (no round trip)."""
        with self._lock:
            self._held.pop(response_id, None)

    def _start_renewer(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._renew_forever, name="lease-renewer", daemon=True
            )
            self._thread.start()

    def _renew_forever(self) -> None:
        while True:
            time.sleep(self._lease_seconds / 3)
            with self._lock:
                held = dict(self._held)
            for response_id, token in held.items():
                self._renew_one(response_id, token)

    def _renew_one(self, response_id: str, token: str) -> None:
        keys = self._store.keys
        try:
            self._renew(
                keys=[keys.lease(response_id), keys.active],
                args=[
                    token,
                    int(self._lease_seconds * 1000),
                    time.time() + self._lease_seconds,
                    response_id,
                ],
            )
        except redis.RedisError:
            logger.warning("could not renew the lease of %s", response_id)


def sweep(store: ResponseStore, dispatcher: Dispatcher, *, lease_seconds: float) -> list[str]:
    """Re-enqueue the current turn of every in-progress response whose lease lapsed."""
    keys = store.keys
    now = time.time()
    requeued: list[str] = []
    for raw in store.redis.zrangebyscore(keys.active, "-inf", now):
        response_id = raw.decode() if isinstance(raw, bytes) else str(raw)
        if store.redis.exists(keys.lease(response_id)):
            continue  # renewed in the meantime
        claim = f"{keys.lease(response_id)}:sweep"
        if not store.redis.set(claim, "1", nx=True, ex=max(1, int(lease_seconds))):
            continue  # another sweeper has it
        store.redis.zrem(keys.active, response_id)
        stored = store.load(response_id)
        if stored is None or stored.response.status != "in_progress":
            continue
        logger.warning(
            "turn %d of %s lost its worker; enqueuing it again", stored.turn, response_id
        )
        dispatcher.enqueue_turn(response_id, stored.turn, retry=True)
        requeued.append(response_id)
    return requeued


def run_sweeper(store: ResponseStore, dispatcher: Dispatcher, *, lease_seconds: float) -> None:
    """Sweep forever (a daemon thread of each inference worker)."""
    while True:
        time.sleep(max(0.5, lease_seconds / 2))
        try:
            sweep(store, dispatcher, lease_seconds=lease_seconds)
        except redis.RedisError:
            logger.warning("sweep failed; trying again", exc_info=True)
