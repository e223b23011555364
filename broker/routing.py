"""Task names, their queues and their ids: what a message on the wire says.

The names and id formats are a contract between gateways and workers of different releases
(a rolling upgrade has both on the queues at once): change them never, or with both sides.
"""

from __future__ import annotations

from typing import Any

RUN_TURN = "responses.run_turn"
"""The turn task (``workers.tasks.run_turn_task``)."""
RUN_TOOL_CALL = "tools.run_call"
"""The tool-call task (``workers.tasks.run_tool_call_task``)."""
COMPACT = "responses.compact"
"""The compaction task (``workers.tasks.compact_task``)."""
COUNT_INPUT_TOKENS = "responses.count_input_tokens"
"""The token count task (``workers.tasks.count_input_tokens_task``)."""
JOB_TASKS = {"compaction": COMPACT, "input_tokens": COUNT_INPUT_TOKENS}
"""The task of each kind of job a gateway waits for (:mod:`app.jobs`)."""

INFERENCE_QUEUE = "inference"
"""Turns and the jobs a gateway waits for (``app.jobs``); a tool call names its kind's queue
(``tools.<kind>``) when sent."""

TASK_ROUTES: dict[str, dict[str, Any]] = {
    RUN_TURN: {"queue": INFERENCE_QUEUE},
    RUN_TOOL_CALL: {"queue": "tools.internal"},
}
"""Celery's ``task_routes``: where a task goes when its sender names no queue."""


def turn_task_id(response_id: str, turn: int) -> str:
    """Deterministic id of a turn task (DESIGN.md)."""
    return f"{response_id}:t{turn}:infer"


def tool_task_id(response_id: str, call_id: str) -> str:
    """Deterministic id of a tool task (DESIGN.md)."""
    return f"{response_id}:{call_id}"


_JOB_TASK_SUFFIXES = {"compaction": "compact", "input_tokens": "count"}


def job_task_id(kind: str, job_id: str) -> str:
    """Id of a job's task (a compaction's: ``<id>:compact``): a job is done once."""
    return f"{job_id}:{_JOB_TASK_SUFFIXES[kind]}"
