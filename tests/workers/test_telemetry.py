"""A worker's task record when one task id runs twice at once in the same process.

After the broker connection drops, Celery hands an unacknowledged message out again, and it
may reach the very worker still running it (the lease then keeps the second run from
acting). Each run must close its own record: its duration, its log line, its context.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from celery import Celery, signals

from app.telemetry import logs, stamps
from workers.telemetry import TaskRecorder


@pytest.fixture
def recorder() -> Iterator[TaskRecorder]:
    recorder = TaskRecorder()
    recorder.install()
    yield recorder
    signals.task_prerun.disconnect(dispatch_uid="antwort.prerun")
    signals.task_postrun.disconnect(dispatch_uid="antwort.postrun")


def test_two_runs_of_one_task_id_each_close_their_own_record(
    recorder: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    celery = Celery("telemetry-test", set_as_current=False)
    entered = {"first": threading.Event(), "second": threading.Event()}
    leave = {"first": threading.Event(), "second": threading.Event()}
    inside: dict[str, str] = {}
    after: dict[str, tuple[str, dict[str, object]]] = {}

    @celery.task(name="antwort.test_task", shared=False)
    def task(which: str) -> str:
        inside[which] = stamps.current_json()
        entered[which].set()
        assert leave[which].wait(10)
        return "ok"

    def run(which: str) -> None:
        task.apply(args=(which,), task_id="same-task-id")
        after[which] = (stamps.current_json(), logs.context())

    threads = {which: threading.Thread(target=run, args=(which,)) for which in entered}
    caplog.set_level(logging.INFO)
    threads["first"].start()
    assert entered["first"].wait(10)
    threads["second"].start()  # the redelivery, while the first run still holds its thread
    assert entered["second"].wait(10)
    leave["first"].set()  # the first run ends first
    threads["first"].join(10)
    leave["second"].set()
    threads["second"].join(10)

    assert all(inside[which] for which in entered)  # each run had its stamp
    assert after == {"first": ("", {}), "second": ("", {})}  # and each put its context back
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    ended = [r for r in caplog.records if r.name == "antwort.task"]
    assert [r.outcome for r in ended] == ["ok", "ok"]  # type: ignore[attr-defined]
