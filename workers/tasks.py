"""The tasks: thin shells that parse ids, call one ``app`` function and map the outcome."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from celery import Task, current_app, shared_task

from app.compaction import fail_compaction, run_compaction
from app.config import Settings
from app.dispatch import Dispatcher
from app.errors import AppError, ServerError
from app.fairness import FairShare
from app.fleet import make_run_deps, make_tool_deps
from app.jobs import job_ttl_seconds
from app.lease import QueuedWatch, run_sweeper
from app.refusals import described, refusal_of
from app.run import RunDeps, StepOutcome, advance_response, fail_response
from app.store import RedeliveredTooOftenError, ResponseStore
from app.token_count import fail_count, run_count
from app.tool_calls import CallOutcome, ToolDeps, run_tool_call
from app.tool_share import ToolShare
from broker.dispatch import make_dispatcher
from broker.routing import COMPACT, COUNT_INPUT_TOKENS, RUN_TOOL_CALL, RUN_TURN

logger = logging.getLogger(__name__)

_deps: RunDeps | None = None
_tool_deps: ToolDeps | None = None
_deps_lock = threading.Lock()


def get_deps() -> RunDeps:
    """This process's turn collaborators, built once from the environment."""
    global _deps
    with _deps_lock:
        if _deps is None:
            settings = Settings()
            _deps = make_run_deps(settings, dispatcher=make_dispatcher(current_app, settings))
        return _deps


def get_tool_deps() -> ToolDeps:
    """This process's tool collaborators (executors initialised once)."""
    global _tool_deps
    with _deps_lock:
        if _tool_deps is None:
            settings = Settings()
            _tool_deps = make_tool_deps(settings, dispatcher=make_dispatcher(current_app, settings))
        return _tool_deps


def start_tools() -> None:
    """Worker start: initialize every internal tool now, not on the first task."""
    deps = get_tool_deps()
    names = [d.name for d in deps.internal_tools.list()] if deps.internal_tools else []
    logger.info("internal tools ready: %s", ", ".join(names) or "none")


def stop_tools() -> None:
    """Worker stop: shut every internal tool down (once)."""
    global _tool_deps
    with _deps_lock:
        deps, _tool_deps = _tool_deps, None
    if deps is not None and deps.internal_tools is not None:
        deps.internal_tools.shutdown_all()


def start_sweeper(dispatcher: Dispatcher) -> None:
    """Re-enqueue runs whose worker died (a daemon thread; every inference worker runs one)."""
    deps = get_deps()
    threading.Thread(
        target=run_sweeper,
        args=(deps.store, dispatcher),
        kwargs={
            "lease_seconds": deps.settings.lease_seconds,
            "fair": FairShare(deps.store, deps.settings),
            "tools": ToolShare(deps.store),
            "queued": QueuedWatch(
                grace_seconds=deps.settings.queued_grace_seconds,
                max_resends=deps.settings.max_task_deliveries,
            ),
        },
        name="sweeper",
        daemon=True,
    ).start()


_BUSY_RETRIES = 30


def _delivery(task: Task) -> str:  # type: ignore[type-arg]
    """The id a job's delivery is counted under: a retry of ours is not a redelivery.

    Turns and tool calls count their starts per response and turn, or per call, whatever task
    id delivered them (``advance_response``'s and ``run_tool_call``'s ``counts_start``).
    """
    delivery = str(task.request.id)
    if task.request.retries:
        delivery += f":retry{task.request.retries}"
    return delivery


@shared_task(name=RUN_TURN, bind=True)
def run_turn_task(self: Task, response_id: str, turn: int) -> str:  # type: ignore[type-arg]
    """Advance a response by one step; redelivery is safe (the run re-reads its state).

    (The task keeps its name on the wire; it runs :func:`app.run.advance_response`.)
    """
    deps = get_deps()
    outcome = _advance(deps, response_id, turn)
    if outcome in _ENDED and deps.dispatcher is not None:
        # the response's place in its tenant's fair share goes to the tenant's next one
        FairShare(deps.store, deps.settings).release_owner_of(deps.dispatcher, response_id)
    return outcome.value


_ENDED = frozenset(
    {
        StepOutcome.COMPLETED,
        StepOutcome.INCOMPLETE,
        StepOutcome.REQUIRES_ACTION,
        StepOutcome.CANCELLED,
        StepOutcome.FAILED,
    }
)


def _advance(deps: RunDeps, response_id: str, turn: int) -> StepOutcome:
    try:
        outcome = advance_response(deps, response_id, turn, counts_start=True)
    except RedeliveredTooOftenError as exc:  # a turn that kills its worker
        message = f"Turn {turn} was started {exc.deliveries - 1} times and never finished."
        fail_response(deps.store, response_id, code="worker_lost", message=message)
        return StepOutcome.FAILED
    except Exception as exc:  # the task boundary: whatever broke, the response must not hang
        fail_response(
            deps.store, response_id, code="server_error", message=_failed(exc, turn, response_id)
        )
        return StepOutcome.FAILED
    # "skipped" needs no second look: a run hands its lease over before it queues what follows
    # (app.run's _hand_off), so a turn finds the lease held only while another run of that same
    # turn is alive, and that run carries the response on (tests/workers/test_turn_task.py).
    return outcome


def _failed(exc: Exception, turn: int, response_id: str) -> str:
    """What the client is told when turn ``turn`` of ``response_id`` broke on the worker.

    A store that refuses writes for now (:mod:`app.refusals`: out of memory, say) is named, and
    logged in one line; anything else is a bug of ours, logged with its traceback.
    """
    why = refusal_of(exc)
    if why is None:
        logger.exception("turn %d of %s crashed", turn, response_id)
        return "The turn failed on the worker."
    logger.warning("turn %d of %s failed, the store %s: %s", turn, response_id, why, described(exc))
    return f"The turn failed on the worker: the server's store {why}."


@shared_task(name=RUN_TOOL_CALL, bind=True, max_retries=_BUSY_RETRIES)
def run_tool_call_task(self: Task, response_id: str, call_id: str) -> str:  # type: ignore[type-arg]
    """Execute one tool call; its result is stored before the task is acknowledged.

    Its Celery result is not stored (``task_ignore_result``): the chord counts its members all
    the same, and the call's result lives in the response store.
    """
    deps = get_tool_deps()
    try:
        outcome = run_tool_call(deps, response_id, call_id, counts_start=True)
    except RedeliveredTooOftenError as exc:
        message = f"Tool call {call_id} was started {exc.deliveries - 1} times and never finished."
        fail_response(deps.store, response_id, code="worker_lost", message=message)
        return StepOutcome.FAILED.value
    if outcome is CallOutcome.BUSY:  # another delivery still holds the call: look again later
        raise self.retry(countdown=1.0)
    return outcome.value


@shared_task(name=COMPACT, bind=True)
def compact_task(self: Task, compaction_id: str) -> str:  # type: ignore[type-arg]
    """Summarise a compaction job; the waiting gateway pops the answer."""
    return _run_job(self, compaction_id, run_compaction, fail_compaction, what="compaction")


@shared_task(name=COUNT_INPUT_TOKENS, bind=True)
def count_input_tokens_task(self: Task, job_id: str) -> str:  # type: ignore[type-arg]
    """Count a token count job's input tokens; the waiting gateway pops the answer."""
    return _run_job(self, job_id, run_count, fail_count, what="token count")


def _run_job(
    task: Task,  # type: ignore[type-arg]
    job_id: str,
    run: Callable[[RunDeps, str], str],
    fail: Callable[[ResponseStore, str, AppError], None],
    *,
    what: str,
) -> str:
    """Do a job a gateway waits for (:mod:`app.jobs`): it gets an answer, never a timeout."""
    deps = get_deps()
    deliveries = deps.store.count_delivery(
        _delivery(task), ttl_seconds=job_ttl_seconds(deps.settings)
    )
    if deliveries > deps.settings.max_task_deliveries:  # a job that kills its worker
        message = f"The {what} was started {deliveries - 1} times and never finished."
        fail(deps.store, job_id, ServerError(message))
        return "failed"
    try:
        return run(deps, job_id)
    except Exception:  # the task boundary: the gateway must get an answer, not a timeout
        logger.exception("%s %s crashed", what, job_id)
        fail(deps.store, job_id, ServerError(f"The {what} failed on the worker."))
        return "failed"
