"""Leases and the sweeper: how a turn survives the death of the worker that ran it.

A turn holds a lease (a Redis key with a TTL) while it runs; one thread per process renews the
leases of that process's turns. A worker that dies stops renewing; within ``lease_seconds`` the
sweeper of any other worker sees the lapsed lease of an ``in_progress`` response and enqueues
that turn again. Celery's own redelivery (the visibility timeout, an hour) would be far slower.
The lease is taken with ``SET NX``, so two runs of one turn never overlap, by the same script
that reads the turn (``app/store/lua/load_turn.lua``); renewing and releasing have a script each.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass

import redis

from app.dispatch import Dispatcher
from app.store import LeaseRequest, OpenedTurn, ResponseStore
from app.store.scripts import LuaScript, key
from app.store.status import ResponseStatus

logger = logging.getLogger(__name__)


Acquired = OpenedTurn
"""What :meth:`LeaseKeeper.acquire` found: the lease taken, the delivery count, the turn read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RenewLeaseCall:
    """The operands of ``renew_lease.lua``."""

    lease: str = key()
    active: str = key()
    token: str
    lease_ms: int
    deadline: float
    """Epoch seconds: the sweeper's next look, should the lease lapse."""
    response_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseLeaseCall:
    """The operands of ``release_lease.lua``."""

    lease: str = key()
    active: str = key()
    token: str
    response_id: str
    wait_until: float | None
    """Epoch seconds until the sweeper's watch goes on (None: the watch ends)."""


RENEW_LEASE = LuaScript("renew_lease", RenewLeaseCall)
RELEASE_LEASE = LuaScript("release_lease", ReleaseLeaseCall)


class LeaseKeeper:
    """Takes, renews and releases the leases of one process's running turns."""

    def __init__(self, store: ResponseStore, *, lease_seconds: float):
        self._store = store
        self._lease_seconds = lease_seconds
        self._held: dict[str, str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._release = store.script(RELEASE_LEASE)
        self._renew = store.script(RENEW_LEASE)

    def acquire(self, response_id: str, turn: int, *, delivery: str | None = None) -> Acquired:
        """Take the response's lease and read ``turn`` (:meth:`ResponseStore.load_turn`).

        One round trip: the sweeper's watch goes on with the lease, and ``delivery``, when
        named, is counted in the same step.
        """
        token = secrets.token_hex(8)
        opened = self._store.open_turn(
            response_id,
            turn,
            lease=LeaseRequest(
                token=token,
                milliseconds=int(self._lease_seconds * 1000),
                deadline=time.time() + self._lease_seconds,
            ),
            delivery=delivery,
        )
        if opened.taken:
            with self._lock:
                self._held[response_id] = token
                self._start_renewer()
        return opened

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
            self._release(
                ReleaseLeaseCall(
                    lease=keys.lease(response_id),
                    active=keys.active,
                    token=token,
                    response_id=response_id,
                    wait_until=wait_until,
                )
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
                RenewLeaseCall(
                    lease=keys.lease(response_id),
                    active=keys.active,
                    token=token,
                    lease_ms=int(self._lease_seconds * 1000),
                    deadline=time.time() + self._lease_seconds,
                    response_id=response_id,
                )
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
        if not store.redis.set(
            keys.sweep_claim(response_id), "1", nx=True, ex=max(1, int(lease_seconds))
        ):
            continue  # another sweeper has it
        store.redis.zrem(keys.active, response_id)
        stored = store.load(response_id)
        if stored is None or stored.response.status != ResponseStatus.IN_PROGRESS:
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
