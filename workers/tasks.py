"""The tasks: thin shells that parse ids, call one ``app`` function and map the outcome."""

from __future__ import annotations

import logging
import threading

from celery import Task, shared_task

from app.config import Settings
from app.dispatch import Dispatcher
from app.fleet import make_run_deps
from app.lease import run_sweeper
from app.run import RunDeps, fail_response, run_turn

logger = logging.getLogger(__name__)

_deps: RunDeps | None = None
_deps_lock = threading.Lock()


def get_deps() -> RunDeps:
    """This process's collaborators, built once from the environment."""
    global _deps
    with _deps_lock:
        if _deps is None:
            _deps = make_run_deps(Settings())
        return _deps


def start_sweeper(dispatcher: Dispatcher) -> None:
    """Re-enqueue turns whose worker died (a daemon thread; every inference worker runs one)."""
    deps = get_deps()
    threading.Thread(
        target=run_sweeper,
        args=(deps.store, dispatcher),
        kwargs={"lease_seconds": deps.settings.lease_seconds},
        name="sweeper",
        daemon=True,
    ).start()


def set_deps(deps: RunDeps | None) -> None:
    """Inject collaborators (tests, ``antwort up``)."""
    global _deps
    with _deps_lock:
        _deps = deps


@shared_task(name="responses.run_turn", bind=True)
def run_turn_task(self: Task, response_id: str, turn: int) -> str:  # type: ignore[type-arg]
    """Run one model turn; redelivery is safe (the turn re-reads its state)."""
    deps = get_deps()
    deliveries = deps.store.count_delivery(f"{response_id}:t{turn}")
    if deliveries > deps.settings.max_task_deliveries:
        fail_response(
            deps.store,
            response_id,
            code="worker_lost",
            message=f"The turn was started {deliveries - 1} times and never finished.",
        )
        return "failed"
    try:
        return run_turn(deps, response_id, turn)
    except Exception:  # the task boundary: whatever broke, the response must not hang
        logger.exception("turn %d of %s crashed", turn, response_id)
        fail_response(
            deps.store, response_id, code="server_error", message="The turn failed on the worker."
        )
        return "failed"
