"""Jobs a gateway waits for: a request answered by one model call on an ``inference`` worker.

Two endpoints answer that way, each a kind of job: ``POST /v1/responses/compact``
(``compaction``, :mod:`app.compaction`) and ``POST /v1/responses/input_tokens``
(``input_tokens``, :mod:`app.token_count`). The gateway validates the request, stores the job
(what the worker needs, JSON, with a TTL) and queues the kind's task (:func:`start_job`); a
worker takes the job (:func:`held_job`), does it and pushes the answer, or an error, to the
job's result list (:func:`push_result`, :func:`fail_job`), which the gateway pops
(:func:`wait_for_result`). A job is answered once: a redelivered task finds the answer there
(or the job gone once the gateway took it) and does nothing.

A worker that dies mid-job would leave its message to Celery's redelivery (the visibility
timeout, an hour). So the worker holds a lease on the job while it runs (``lease_seconds``,
renewed every third of it, as a turn's), and the waiting gateway looks between its waits: a job
that was started and whose lease lapsed without an answer is queued again, at once; one that no
worker started within ``queued_grace_seconds`` (its message was lost) too, as a response's first
turn is. A job that kills every worker it runs on is failed after ``max_task_deliveries``
(``workers.tasks``).

A job is a model call on the fleet, so its tenant's limits and fair share take it as they take
a response (:func:`start_job`): it may wait parked for a place, and holds one until its gateway
is answered (:func:`wait_for_answer`).
"""

from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import redis

from app.aead import MissingSecretError
from app.config import Settings
from app.dispatch import Dispatcher, QueueUnavailableError
from app.errors import (
    AppError,
    InvalidRequestError,
    ModelBehaviorError,
    ServerError,
    UpstreamError,
    retry_later,
)
from app.fairness import FairShare
from app.inbox import Inbox
from app.lease import QueuedWatch
from app.limits import HOLD_SECONDS, Caller
from app.protocol.request import CreateResponseRequest
from app.refusals import described
from app.relay import EventHub
from app.store import ResponseStore
from app.store.base import text
from app.store.events import WAKE_LINE, publish
from app.telemetry import metrics

JobKind = Literal["compaction", "input_tokens"]

BLOCK_SECONDS = 3.0
"""The longest one ``BLPOP`` of a wait blocks for (a wait is made of several)."""
RESULT_TTL_SECONDS = 600
"""How long an answer waits for its gateway (and a job outlives the gateway's wait)."""

logger = logging.getLogger(__name__)


class JobQueue(Protocol):
    """Queues jobs on the ``inference`` queue, one task per kind (:mod:`broker.jobs`)."""

    def enqueue_job(self, kind: JobKind, job_id: str) -> None:
        """Queue the job (:class:`QueueUnavailableError`: the broker is away)."""


def checked_body(body: Any, fields: frozenset[str]) -> dict[str, Any]:
    """The request's body: a JSON object of the endpoint's ``fields`` only.

    Raises:
        InvalidRequestError: not an object, or a field the endpoint does not take.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    for name in body:
        if name not in fields:
            raise InvalidRequestError(
                f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter"
            )
    return dict(body)


def job_ttl_seconds(settings: Settings) -> int:
    """How long a job is kept: its gateway's wait, then time for the answer to be taken."""
    return int(settings.sync_timeout_seconds) + RESULT_TTL_SECONDS


def start_job(  # noqa: PLR0913 - the caller and its request, keywords
    store: ResponseStore,
    queue: JobQueue,
    settings: Settings,
    kind: JobKind,
    job_id: str,
    job: dict[str, Any],
    *,
    caller: Caller,
    request: CreateResponseRequest,
) -> None:
    """Admit the job against its caller's limits (as ``request`` would be), store it, queue it.

    It takes a place of its tenant's fair share, or is parked until one frees (its gateway
    queues it then: :func:`wait_for_result`). Once started, the job counts in flight and holds
    its place until its gateway is answered (:func:`wait_for_answer`); a job that could not be
    queued is released here.

    Raises:
        RateLimitError: a limit of the caller's tenant refuses it.
        AppError: a 503 to retry when the broker is away, a 500 when the send failed otherwise.
    """
    caller.admit(job_id, request)
    ttl = job_ttl_seconds(settings)
    fair = FairShare(store, settings, tenants=caller.tenants())
    try:
        store.redis.set(store.keys.job(kind, job_id), json.dumps(job), ex=ttl)
        if fair.submit_job(caller.tenant.name, kind, job_id):
            _enqueue(queue, kind, job_id)
    except BaseException:
        caller.release(job_id)
        fair.end_job(caller.tenant.name, kind, job_id)
        raise


def wait_for_answer(  # noqa: PLR0913 - who waits, and what starts the work it frees a place for
    store: ResponseStore,
    queue: JobQueue,
    settings: Settings,
    kind: JobKind,
    job_id: str,
    *,
    caller: Caller,
    dispatcher: Dispatcher,
    hub: EventHub | None = None,
) -> dict[str, Any]:
    """The gateway's wait for a job it started (:func:`wait_for_result`), its places held.

    Meanwhile the job's place in flight and its fair share's place are renewed; once it is
    answered (or the wait fails) both are freed, and the place goes to the tenant's next
    parked work (``dispatcher`` queues a parked response's first turn). The tokens its model
    call took beyond the job's reservation are charged to the tenant (:meth:`Caller.charge`).
    """
    fair, tenant = FairShare(store, settings), caller.tenant.name

    def renew() -> None:
        caller.hold(job_id)
        fair.hold_job(tenant, kind, job_id)

    watch = Watch(
        queue=queue,
        every=min(settings.lease_seconds, HOLD_SECONDS),
        unstarted=QueuedWatch(
            grace_seconds=settings.queued_grace_seconds,
            max_resends=settings.max_task_deliveries,
        ),
        queued=not fair.is_parked(tenant, kind, job_id),
        held=lambda: fair.holds_job(tenant, kind, job_id),
        on_wait=renew,
        hub=hub,
    )
    try:
        answer = wait_for_result(
            store, kind, job_id, timeout_seconds=settings.sync_timeout_seconds, watch=watch
        )
        caller.charge(tokens_taken(kind, answer))
        return answer
    finally:
        caller.release(job_id)
        fair.end_job(tenant, kind, job_id)
        fair.release(dispatcher, tenant)


def tokens_taken(kind: JobKind, answer: dict[str, Any]) -> int:
    """The tokens a job's model call took: a compaction's usage, a count's prompt and 1 token."""
    if kind == "compaction":
        return int((answer.get("usage") or {}).get("total_tokens") or 0)
    counted = answer.get("input_tokens")
    return int(counted) + 1 if counted is not None else 0


def _enqueue(queue: JobQueue, kind: JobKind, job_id: str) -> None:
    try:
        queue.enqueue_job(kind, job_id)
    except QueueUnavailableError as exc:
        logger.warning("answered 503, the %s job was not queued: %s", kind, exc)
        raise retry_later(exc.client_message) from exc
    except Exception as exc:
        logger.exception("could not enqueue the %s job", kind)
        raise ServerError(f"The server could not queue the {_named(kind)}.") from exc


@dataclass(frozen=True, slots=True, kw_only=True)
class Watch:
    """What a waiting gateway looks after between its waits (:func:`wait_for_result`)."""

    queue: JobQueue
    """Where the job is queued (again)."""
    every: float = 3.0
    """Seconds between looks (``lease_seconds``: a dead worker's lease has lapsed by then)."""
    unstarted: QueuedWatch = QueuedWatch()
    """When a queued job that no worker started is queued again (its message was lost)."""
    queued: bool = True
    """False: the fair share parked it; it is queued once it gets its place."""
    held: Callable[[], bool] | None = None
    """While it is parked: whether the fair share still holds it (False: a process of an older
    fleet dropped it; it is queued at once)."""
    on_wait: Callable[[], None] | None = None
    """Called at each look (the job's places are renewed: :func:`wait_for_answer`)."""
    hub: EventHub | None = None
    """The gateway's: a waiter is woken by a publish and holds no Redis connection meanwhile
    (None: it blocks on one, ``BLPOP``)."""


def wait_for_result(
    store: ResponseStore,
    kind: JobKind,
    job_id: str,
    *,
    timeout_seconds: float,
    watch: Watch | None = None,
) -> dict[str, Any]:
    """The job's answer once a worker pushed it; the job is removed.

    ``watch`` (None: none): between its waits the gateway queues again a job that was lost:
    one whose worker died (its lease lapsed without an answer), one Redis lost (it restarted
    empty; the job is stored again as it was), or one no worker started in time (its message
    was lost: a broker restarted empty, a failover; as a response's first turn,
    ``ANTWORT_QUEUED_GRACE_SECONDS`` then twice as long each time, ``ANTWORT_MAX_TASK_DELIVERIES``
    times at most; a message that waited its turn behind others runs as a no-op). A job the
    fair share parked is queued once it gets its place.

    Raises:
        AppError: the worker's error (the model failed, …), or a ``ServerError`` on timeout.
    """
    key = store.keys.job_result(kind, job_id)
    if watch is None:  # short blocks: a client's socket timeout may be shorter than the wait
        deadline = time.monotonic() + timeout_seconds
        while (remaining := deadline - time.monotonic()) > 0:
            popped = store.redis.blpop([key], timeout=min(remaining, BLOCK_SECONDS))
            if popped is not None:
                return _answer(store, kind, job_id, popped[1])
        raise _timed_out(kind, timeout_seconds)
    hub = watch.hub
    inbox = None if hub is None else hub.listen(job_id, keepalive_seconds=watch.every)
    try:
        answer = _watched(store, kind, job_id, timeout_seconds, watch, inbox)
    finally:
        if hub is not None and inbox is not None:
            hub.unlisten(job_id, inbox)
    return _answer(store, kind, job_id, answer)


def _watched(
    store: ResponseStore,
    kind: JobKind,
    job_id: str,
    timeout_seconds: float,
    watch: Watch,
    inbox: Inbox | None,
) -> bytes | str:
    """The job's answer as popped, its watch kept between waits (:func:`wait_for_result`)."""
    key = store.keys.job_result(kind, job_id)
    lists = [key, store.keys.job_placed(kind, job_id)]
    deadline = time.monotonic() + timeout_seconds
    job = store.redis.get(store.keys.job(kind, job_id))
    queued_at = time.monotonic() if watch.queued else None
    resends = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out(kind, timeout_seconds)
        popped = _next_arrival(store, lists, inbox, min(remaining, watch.every))
        if popped is not None and popped[0] == key:
            return popped[1]
        if popped is not None:  # parked, it got its place: queue it now
            _enqueue(watch.queue, kind, job_id)
            queued_at = time.monotonic()
            continue
        if watch.on_wait is not None:
            watch.on_wait()
        if queued_at is None and watch.held is not None and not watch.held():
            logger.warning("%s job %s was dropped while parked; queueing it", kind, job_id)
            _enqueue(watch.queue, kind, job_id)
            queued_at = time.monotonic()
            continue
        overdue = (
            queued_at is not None
            and resends < watch.unstarted.max_resends
            and time.monotonic() - queued_at >= watch.unstarted.next_wait(resends)
        )
        lost = _lost(store, kind, job_id, job, ttl=remaining, unstarted=overdue)
        if lost:
            logger.warning("%s job %s: %s; queueing it again", kind, job_id, lost)
            metrics.JOB_REQUEUES.labels(kind, lost).inc()
            watch.queue.enqueue_job(kind, job_id)
            queued_at, resends = time.monotonic(), resends + 1


def _next_arrival(
    store: ResponseStore, lists: list[str], inbox: Inbox | None, timeout: float
) -> tuple[str, bytes | str] | None:
    """The first of ``lists`` to hold an item, and the item popped; None after ``timeout``.

    Without an inbox, a ``BLPOP`` (a connection held while it waits). With one, what is
    there is popped, else the wait is for the hub's wake-up (a publish, or quiet after the
    inbox's keepalive) and what it brought; a wake-up with nothing (the hub subscribed again)
    is None too: the caller looks again.
    """
    if inbox is None:
        popped = store.redis.blpop(lists, timeout=timeout)
        return None if popped is None else (text(popped[0]), popped[1])
    for attempt in range(2):
        pipe = store.redis.pipeline(transaction=False)
        for name in lists:
            pipe.lpop(name)
        for name, item in zip(lists, pipe.execute(), strict=True):
            if item is not None:
                return name, item
        if attempt == 0:
            try:
                inbox.take()
            except queue.Empty:
                return None
    return None


def _answer(store: ResponseStore, kind: JobKind, job_id: str, raw: bytes | str) -> dict[str, Any]:
    """The popped answer (the job is removed); a worker's error raised."""
    store.redis.delete(store.keys.job(kind, job_id))
    result: dict[str, Any] = json.loads(raw)
    error = result.get("error")
    if error is not None:
        raise _error_from(error)
    return result


def _timed_out(kind: JobKind, timeout_seconds: float) -> ServerError:
    return ServerError(
        f"The {_named(kind)} did not finish within {timeout_seconds:.0f}s; try again later."
    )


def run_job(
    store: ResponseStore,
    kind: JobKind,
    job_id: str,
    do: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    lease_seconds: float,
) -> str:
    """The worker's side: do the job and push its answer; returns what happened.

    The answer is the error the request gets when the job fails. A redelivered task whose
    answer was pushed (or popped and its job removed) does nothing, and neither does one while
    another delivery holds the job's lease.
    """
    with held_job(store, kind, job_id, lease_seconds=lease_seconds) as job:
        if job is None:
            return "skipped"
        try:
            result = do(job)
        except (InvalidRequestError, UpstreamError, ModelBehaviorError, MissingSecretError) as exc:
            if isinstance(exc, MissingSecretError):  # the fleet's configuration: the operator's
                logger.error("%s %s failed: %s", _named(kind), job_id, exc.message)
            fail_job(store, kind, job_id, exc)
            return "failed"
        push_result(store, kind, job_id, result)
        return "completed"


def _lost(
    store: ResponseStore,
    kind: JobKind,
    job_id: str,
    job: bytes | str | None,
    *,
    ttl: float,
    unstarted: bool,
) -> str:
    """Why the job must be queued again, its metric's reason ("": it need not).

    ``redis_lost``: Redis lost it (it is stored again, from ``job``); ``worker_died``: it was
    started and its lease lapsed (the start is forgotten, so that one death queues the job
    once); ``not_started``: it was not started and ``unstarted`` says it is overdue.
    """
    stored = store.keys.job(kind, job_id)
    started, lease = store.keys.job_started(kind, job_id), store.keys.job_lease(kind, job_id)
    pipe = store.redis.pipeline(transaction=False)
    pipe.exists(stored)
    pipe.exists(started)
    pipe.exists(lease)
    is_stored, was_started, is_held = pipe.execute()
    if not is_stored:
        if job is None:
            return ""
        restored = store.redis.set(stored, job, nx=True, ex=int(ttl) + RESULT_TTL_SECONDS)
        return "redis_lost" if restored else ""
    if not was_started:
        return "not_started" if unstarted and not is_held else ""
    if is_held:
        return ""
    return "worker_died" if store.redis.delete(started) else ""


@contextmanager
def held_job(
    store: ResponseStore, kind: JobKind, job_id: str, *, lease_seconds: float
) -> Iterator[dict[str, Any] | None]:
    """The worker's side: the job to do, its lease held (and renewed) meanwhile.

    None when it was answered (or taken, or expired), or another delivery holds it.
    """
    raw = store.redis.get(store.keys.job(kind, job_id))
    if raw is None or store.redis.exists(store.keys.job_result(kind, job_id)):
        yield None
        return
    token = secrets.token_hex(8)
    lease, started = store.keys.job_lease(kind, job_id), store.keys.job_started(kind, job_id)
    milliseconds = int(lease_seconds * 1000)
    pipe = store.redis.pipeline(transaction=True)
    pipe.set(lease, token, nx=True, px=milliseconds)
    pipe.set(started, 1, ex=int(lease_seconds) + RESULT_TTL_SECONDS)
    if not pipe.execute()[0]:
        yield None  # another delivery runs it; the gateway watches that one's lease
        return
    done = threading.Event()
    renewal = threading.Thread(
        target=_renew,
        args=(store, lease, token, milliseconds, done),
        name=f"{kind}-lease",
        daemon=True,
    )
    renewal.start()
    try:
        yield json.loads(raw)
    finally:
        done.set()
        renewal.join(timeout=lease_seconds)
        if store.redis.get(lease) in (token, token.encode()):
            store.redis.delete(lease, started)  # answered: the gateway has nothing to watch


def _renew(
    store: ResponseStore, lease: str, token: str, milliseconds: int, done: threading.Event
) -> None:
    while not done.wait(milliseconds / 3000):
        try:
            if store.redis.get(lease) not in (token, token.encode()):
                return  # it lapsed (this worker stalled): the job may run elsewhere now
            store.redis.pexpire(lease, milliseconds)
        except redis.RedisError as exc:
            logger.warning("could not renew a job's lease; trying again: %s", described(exc))


def push_result(store: ResponseStore, kind: JobKind, job_id: str, result: dict[str, Any]) -> None:
    """Push the answer the gateway pops (kept a while in case it is not waiting yet)."""
    key = store.keys.job_result(kind, job_id)
    pipe = store.redis.pipeline(transaction=True)
    pipe.rpush(key, json.dumps(result))
    pipe.expire(key, RESULT_TTL_SECONDS)
    pipe.execute()
    publish(store.redis, store.keys.channel(job_id), WAKE_LINE)  # its gateway's hub wakes it


def fail_job(store: ResponseStore, kind: JobKind, job_id: str, error: AppError) -> None:
    """Hand the waiting gateway an error instead of an answer."""
    body = {**error.to_dict()["error"], "status": error.status}
    push_result(store, kind, job_id, {"error": body})


def _error_from(error: dict[str, Any]) -> AppError:
    status = int(error.get("status", 500))
    kind: type[AppError] = ServerError
    if status == 400:
        kind = InvalidRequestError
    elif status == UpstreamError.status:
        kind = UpstreamError
    elif error.get("type") == ModelBehaviorError.type:
        kind = ModelBehaviorError
    return kind(error["message"], param=error.get("param"), code=error.get("code"))


def _named(kind: JobKind) -> str:
    return "compaction" if kind == "compaction" else "token count"
