"""Why a turn task that finds the lease held needs no retry: the callback race cannot happen.

The turn task once looked again (a Celery retry) when a tool's callback found the lease still
held by the run that had queued the tools. A run now hands its lease over before it queues what
follows, so even the earliest possible callback — the tools and the next turn run on other
workers while the queuing run is still inside its send — takes the lease at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from app.config import Settings
from app.lease import LeaseKeeper
from app.responses import create_response
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from app.tool_calls import ToolDeps, run_tool_call
from app.tools.base import ExecutorRegistry
from app.tools.internal import InternalExecutor, load_registry
from tests.support.dispatch import RecordingDispatcher
from tests.support.model import ScriptedModel, calls, text


class ImpatientFleet(RecordingDispatcher):
    """Runs the tools and their callback turn on "other workers" inside the send itself."""

    def __init__(self, *, tools: ToolDeps, callback_deps: Callable[[], RunDeps]) -> None:
        super().__init__()
        self.tools = tools
        self.callback_deps = callback_deps
        self.callback_outcomes: list[str] = []

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        super().enqueue_tools(response_id, calls, then_turn=then_turn)
        for call_id, _queue in calls:
            assert run_tool_call(self.tools, response_id, call_id) == "ok"
        # the queuing run has not returned yet: its own clean-up is still to come
        self.callback_outcomes.append(
            advance_response(self.callback_deps(), response_id, then_turn)
        )


def test_a_tool_callback_arriving_inside_the_queuing_run_takes_the_lease_at_once(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(internal_tool_modules="tests.support.tools", lease_seconds=30)
    registry = load_registry(settings.internal_tool_module_list)
    registry.initialize_all()
    model = ScriptedModel(calls(("call_a", "fast_echo", json.dumps({"text": "a"}))), text("done"))

    def worker(fleet: RecordingDispatcher) -> RunDeps:
        """A worker process of its own: its own lease keeper."""
        return RunDeps(
            store=store,
            provider=model,
            settings=settings,
            dispatcher=fleet,
            leases=LeaseKeeper(store, lease_seconds=settings.lease_seconds),
        )

    fleet = ImpatientFleet(
        tools=ToolDeps(
            store=store, executors=ExecutorRegistry([InternalExecutor(registry)]), settings=settings
        ),
        callback_deps=lambda: worker(fleet),
    )
    body = {"input": "go", "tools": [{"type": "internal", "name": "fast_echo"}]}
    response, _ = create_response(store, fleet, settings, body)

    assert advance_response(worker(fleet), response.id, 0) == "waiting"

    # The callback ran while the queuing run was still inside enqueue_tools, and it was not
    # "skipped": nothing is left for a retry or the sweeper to pick up.
    assert fleet.callback_outcomes == ["completed"]
    assert store.get(response.id).response.status == "completed"
    assert not store.redis.exists(store.keys.lease(response.id))
