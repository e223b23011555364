"""Leases and the sweeper: how a turn survives the death of the worker that ran it.

A turn holds a lease (a Redis key with a TTL, ``lease_seconds``: 3 s by default) while it runs;
one thread per process renews the leases of that process's turns every third of a lease, all in
one round trip. A worker that dies stops renewing; within a lease the sweeper of any other
worker (it looks every third of a lease) sees the lapsed lease of an ``in_progress`` response
and enqueues that turn again. A tool call's claim is renewed the same way by the task running
it (``app.tool_calls``), and a claim that lapses without a result sends the response's turn
round again too, which dispatches the call anew. Celery's own redelivery (the visibility
timeout, an hour) would be far slower.

The lease is taken with ``SET NX``, so two runs of one turn never overlap, by the same script
that reads the turn (``app/store/lua/load_turn.lua``); renewing and releasing have a script each.
Runs of a turn that took the lease are counted (per response and turn), and the count is reset
when a run gives its lease back: it counts the runs that died in a row, which a poison turn
keeps raising until ``max_task_deliveries``.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass

import redis

from app.dispatch import Dispatcher
from app.fairness import FairShare
from app.refusals import described
from app.store import LeaseRequest, OpenedTurn, ResponseStore, StoredResponse
from app.store.base import text
from app.store.scripts import LuaScript, key
from app.store.status import ResponseStatus
from app.store.turns import RENEW_LEASE, RenewLeaseCall
from app.telemetry import metrics, tracing
from app.tool_share import ToolShare

logger = logging.getLogger(__name__)


Acquired = OpenedTurn
"""What :meth:`LeaseKeeper.acquire` found: the lease taken, the start count, the turn read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseLeaseCall:
    """The operands of ``release_lease.lua``."""

    lease: str = key()
    active: str = key()
    starts: str = key()
    """The turn's count of starts, reset: this run ended without dying."""
    token: str
    response_id: str
    wait_until: float | None
    """Epoch seconds until the sweeper's watch goes on (None: the watch ends)."""


RELEASE_LEASE = LuaScript("release_lease", ReleaseLeaseCall)


class LeaseKeeper:
    """Takes, renews and releases the leases of one process's running turns."""

    def __init__(self, store: ResponseStore, *, lease_seconds: float):
        self._store = store
        self._lease_seconds = lease_seconds
        self._held: dict[str, tuple[str, int]] = {}
        """Response id → the lease's token and the turn its run started."""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._release = store.script(RELEASE_LEASE)
        self._renew = store.script(RENEW_LEASE)

    def acquire(self, response_id: str, turn: int, *, counts_start: bool = False) -> Acquired:
        """Take the response's lease and read ``turn`` (:meth:`ResponseStore.load_turn`).

        One round trip: the sweeper's watch goes on with the lease, and with ``counts_start``
        the turn's start is counted in the same step (:meth:`ResponseStore.open_turn`).
        """
        token = secrets.token_hex(8)

        def hold() -> None:  # renewed from the moment it is taken, before the turn is read
            with self._lock:
                self._held[response_id] = (token, turn)
                self._start_renewer()

        return self._store.open_turn(
            response_id,
            turn,
            lease=LeaseRequest(
                token=token,
                milliseconds=int(self._lease_seconds * 1000),
                deadline=self._store.now() + self._lease_seconds,
            ),
            counts_start=counts_start,
            on_taken=hold,
        )

    def release(self, response_id: str, *, wait_until: float | None = None) -> None:
        """Give the lease back.

        Args:
            response_id: The response whose run ended.
            wait_until: The run handed work to tool workers: if no run has started by then
                (epoch seconds), the sweeper enqueues one.
        """
        with self._lock:
            held = self._held.pop(response_id, None)
        if held is not None:
            token, turn = held
            keys = self._store.keys
            self._release(
                ReleaseLeaseCall(
                    lease=keys.lease(response_id),
                    active=keys.active_of(response_id),
                    starts=keys.turn_starts(response_id, turn),
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
        """Under the lock: a renewer runs while a lease is held (one at a time)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._renew_while_held, name="lease-renewer", daemon=True
            )
            self._thread.start()

    def _renew_while_held(self) -> None:
        while True:
            time.sleep(self._lease_seconds / 3)
            # The lock is held over the round trip: a lease released meanwhile is never taken
            # back by a renewal that started before (renew_lease.lua takes back lapsed leases).
            with self._lock:
                held = dict(self._held)
                if not held:  # nothing to renew: the next acquire starts another renewer
                    self._thread = None
                    return
                try:
                    self.renew(held)
                except redis.RedisError as exc:
                    logger.warning(
                        "could not renew %d leases; trying again: %s", len(held), described(exc)
                    )

    def renew(self, held: dict[str, tuple[str, int]]) -> None:
        """Extend the ``held`` leases, all in one round trip however many the process holds."""
        keys, now = self._store.keys, self._store.now()
        pipe = self._store.redis.pipeline(transaction=False)
        for response_id, (token, _turn) in held.items():
            self._renew(
                RenewLeaseCall(
                    lease=keys.lease(response_id),
                    watch=keys.active_of(response_id),
                    token=token,
                    lease_ms=int(self._lease_seconds * 1000),
                    deadline=now + self._lease_seconds,
                    member=response_id,
                ),
                client=pipe,
            )
        pipe.execute()


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedWatch:
    """How a ``queued`` response whose first turn never starts is queued again."""

    grace_seconds: float = 30.0
    """``ANTWORT_QUEUED_GRACE_SECONDS``: the first wait; each later one is twice the last."""
    max_resends: int = 3
    """``ANTWORT_MAX_TASK_DELIVERIES``: how often turn 0 is queued again, at most."""

    def next_wait(self, resends: int) -> float:
        """Seconds until the look after the ``resends``-th re-send (1: the first)."""
        return self.grace_seconds * float(2**resends)


class StaleSweepError(Exception):
    """A sweep waited on Redis past its time: what it read may predate an outage."""


def _check_fresh(fresh_until: float | None) -> None:
    if fresh_until is not None and time.monotonic() > fresh_until:
        raise StaleSweepError


def sweep(
    store: ResponseStore,
    dispatcher: Dispatcher,
    *,
    lease_seconds: float,
    queued: QueuedWatch = QueuedWatch(),
    fresh_until: float | None = None,
) -> list[str]:
    """Re-enqueue the current turn of every in-progress response whose run or tool call died.

    Two watches lapse: a response's (its run's lease lapsed, the work it handed on did not
    start a run by its deadline, or a ``queued`` response's first turn never started), and a
    running tool call's (its claim lapsed without a result: the worker running it died). Either
    way the response's current turn runs again; it collects the results there are and
    dispatches the missing calls again. A ``queued`` response stays watched: its turn 0 is
    queued again after each wait (:class:`QueuedWatch`), up to ``queued.max_resends`` times.

    ``fresh_until`` (monotonic seconds): past it, nothing more is sent round
    (:class:`StaleSweepError`). A read that rode out an outage of Redis finds every lease and
    claim lapsed, their holders not yet back to take them again.
    """
    keys = store.keys
    requeued: list[str] = []
    for response_id in _lapsed(store, keys.active_sets):
        if store.redis.exists(keys.lease(response_id)):
            continue  # renewed in the meantime
        _check_fresh(fresh_until)
        if _requeue(store, dispatcher, response_id, lease_seconds=lease_seconds, queued=queued):
            requeued.append(response_id)
    for member in _lapsed(store, keys.running_call_sets):
        response_id, call_id = keys.running_call_of(member)
        if store.is_tool_call_claimed(response_id, call_id):
            continue  # renewed in the meantime, or claimed by another delivery
        _check_fresh(fresh_until)
        store.redis.zrem(keys.running_calls_of(response_id), member)
        if store.has_tool_result(response_id, call_id) or store.redis.exists(
            keys.lease(response_id)
        ):
            continue  # done after all, or a run of the response is under way
        if _requeue(store, dispatcher, response_id, lease_seconds=lease_seconds, queued=queued):
            requeued.append(response_id)
    return requeued


def _lapsed(store: ResponseStore, watches: list[str]) -> list[str]:
    """Members of sorted sets of watches (one, or a cluster's one per shard) whose time passed."""
    now = store.now()
    pipe = store.redis.pipeline(transaction=False)
    for watch in watches:
        pipe.zrangebyscore(watch, "-inf", now)
    return [
        text(member) for raw in pipe.execute() for member in raw if isinstance(member, bytes | str)
    ]


def _requeue(
    store: ResponseStore,
    dispatcher: Dispatcher,
    response_id: str,
    *,
    lease_seconds: float,
    queued: QueuedWatch,
) -> bool:
    """Enqueue the response's current turn again, unless another sweeper does or it ended."""
    keys = store.keys
    if not store.redis.set(
        keys.sweep_claim(response_id), "1", nx=True, ex=max(1, int(lease_seconds))
    ):
        return False  # another sweeper has it
    store.redis.zrem(keys.active_of(response_id), response_id)
    stored = store.load(response_id)
    if stored is None or stored.response.status not in _SWEPT:
        return False
    if stored.response.status == ResponseStatus.QUEUED:
        return _resend_queued(store, dispatcher, stored, queued=queued)
    logger.warning("turn %d of %s lost its worker; enqueuing it again", stored.turn, response_id)
    _enqueue_again(dispatcher, stored)
    return True


def _resend_queued(
    store: ResponseStore, dispatcher: Dispatcher, stored: StoredResponse, *, queued: QueuedWatch
) -> bool:
    """Queue turn 0 of a response that never started again, and watch it for the next time.

    Its first turn's message was taken off the queue and lost (the worker holding it died, or
    its connection dropped), or it waits behind a long queue: another message is harmless,
    since the run that comes second finds the turn taken or done.
    """
    response_id = stored.response.id
    resends = store.count_queued_resend(response_id)
    if resends > queued.max_resends:
        logger.error("turn 0 of %s never started; queued %d times", response_id, resends)
        return False
    logger.warning("turn 0 of %s never started; enqueuing it again", response_id)
    store.watch_queued(response_id, until=store.now() + queued.next_wait(resends))
    _enqueue_again(dispatcher, stored)
    return True


def _enqueue_again(dispatcher: Dispatcher, stored: StoredResponse) -> None:
    """Queue the response's current turn once more, in the response's trace."""
    with tracing.resumed(stored.extra.get("trace")):
        dispatcher.enqueue_turn(stored.response.id, stored.turn, retry=True)
    metrics.SWEEPER_RERUNS.labels(stored.response.status.value).inc()


_SWEPT = frozenset({ResponseStatus.QUEUED, ResponseStatus.IN_PROGRESS})
"""Statuses whose lapsed watch sends the current turn round again."""


def sweep_interval(lease_seconds: float) -> float:
    """How often a sweeper looks: a third of a lease (a second with the default lease)."""
    return lease_seconds / 3


class Sweeper:
    """Sweeps every :func:`sweep_interval` (a daemon thread of each inference worker).

    When Redis was away (a look failed, or waited on Redis longer than a sweep interval: the
    ping before a sweep, or the sweep's own reads), the sweeper holds off for a lease: the
    leases and claims of live runs lapsed during the outage, since nobody could renew them, and
    their holders take them back with their next renewal (``renew_lease.lua``). Only what is
    still lapsed after that is sent round again.
    """

    def __init__(
        self,
        store: ResponseStore,
        dispatcher: Dispatcher,
        *,
        lease_seconds: float,
        fair: FairShare | None = None,
        tools: ToolShare | None = None,
        queued: QueuedWatch = QueuedWatch(),
    ):
        self._store = store
        self._dispatcher = dispatcher
        self._lease_seconds = lease_seconds
        self._fair = fair
        """Tenants' fair share: each sweep starts the parked responses that got a place."""
        self._tools = tools
        """Tenants' places on the tool queues: each sweep goes on with the parked responses
        that got one (places of ended responses are free)."""
        self._queued = queued
        self._hold_until = 0.0
        self._was_away = False

    def tick(self) -> list[str]:
        """One look: the responses sent round again (none while holding off after an outage)."""
        interval = sweep_interval(self._lease_seconds)
        try:
            started = time.monotonic()
            self._store.redis.ping()
            if self._was_away or time.monotonic() - started > interval:
                logger.warning("Redis is back; sweeping again in %g s", self._lease_seconds)
                self._hold_until = time.monotonic() + self._lease_seconds
                self._was_away = False
            if time.monotonic() < self._hold_until:
                return []
            swept = sweep(
                self._store,
                self._dispatcher,
                lease_seconds=self._lease_seconds,
                queued=self._queued,
                fresh_until=time.monotonic() + interval,
            )
            if self._fair is not None:
                self._fair.release_all(self._dispatcher)
            if self._tools is not None:
                self._tools.release_all(self._dispatcher)
            return swept
        except StaleSweepError:
            logger.warning("a sweep waited on Redis; sweeping again in %g s", self._lease_seconds)
            self._hold_until = time.monotonic() + self._lease_seconds
            return []
        except redis.RedisError as exc:  # away, or refusing (app.refusals): its message says all
            self._was_away = True
            logger.warning("sweep failed; trying again: %s", described(exc))
            return []

    def run_forever(self) -> None:
        """Tick forever."""
        while True:
            time.sleep(sweep_interval(self._lease_seconds))
            self.tick()


def run_sweeper(
    store: ResponseStore,
    dispatcher: Dispatcher,
    *,
    lease_seconds: float,
    queued: QueuedWatch,
    fair: FairShare | None = None,
    tools: ToolShare | None = None,
) -> None:
    """Sweep forever (a daemon thread of each inference worker; see :class:`Sweeper`)."""
    Sweeper(
        store, dispatcher, lease_seconds=lease_seconds, fair=fair, tools=tools, queued=queued
    ).run_forever()
