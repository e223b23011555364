"""Structured logs: JSON lines from the fleet's processes, one per task, with the work's ids."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import internal
from tests.e2e.own_fleet import assert_a_chord_and_a_stream_complete, own_fleet

SECRET = "sk-never-logged-0123456789"


@pytest.fixture(scope="module")
def json_fleet(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A fleet logging JSON at INFO, with a model key and gateway keys that must not leak."""
    with own_fleet(
        fleet.env,
        tmp_path_factory.mktemp("json-logs"),
        loglevel="INFO",
        ANTWORT_LOG_FORMAT="json",
        ANTWORT_LOG_LEVEL="info",
        ANTWORT_LLM_API_KEY=SECRET,
        ANTWORT_API_KEYS=f"{SECRET}-gateway",
    ) as running:
        yield running


CELERY_PRINTS = ("worker: Warm shutdown",)
"""What Celery writes to the terminal itself, not through logging (its stop notice)."""


def lines(log: Path) -> list[dict[str, Any]]:
    """Every line a worker logged, each parsed as JSON (a line that is not JSON fails)."""
    return [
        json.loads(line)
        for line in log.read_text().splitlines()
        if line.strip() and not line.startswith(CELERY_PRINTS)
    ]


def test_json_logs_carry_ids_one_line_per_task_and_no_secrets(json_fleet: Fleet) -> None:
    with openai.OpenAI(
        base_url=f"{json_fleet.base_url}/v1", api_key=f"{SECRET}-gateway", max_retries=0
    ) as client:
        response = client.responses.create(
            model="antwort-sim",
            input="please use calculator expression=6*7 (a private question)",
            tools=internal("calculator"),  # type: ignore[arg-type]
        )
    assert response.status == "completed"
    call_id = response.output[0].call_id  # type: ignore[union-attr]
    json_fleet.stop_all()  # every line written

    turns = [
        line
        for line in lines(json_fleet.log_dir / "inference.log")
        if line.get("task") == "responses.run_turn" and line.get("response_id") == response.id
    ]
    ended = [line for line in turns if "outcome" in line]
    assert [(line["turn"], line["outcome"]) for line in ended] == [(0, "waiting"), (1, "completed")]
    assert all(isinstance(line["duration_ms"], float) for line in ended)
    [tool] = [
        line
        for line in lines(json_fleet.log_dir / "tools.internal.log")
        if line.get("call_id") == call_id and "outcome" in line
    ]
    assert tool["response_id"] == response.id and tool["outcome"] == "ok"
    assert tool["task"] == "tools.run_call" and tool["level"] == "info"
    for log in json_fleet.log_dir.glob("*.log"):
        text = log.read_text()
        assert SECRET not in text
        assert "a private question" not in text  # no request bodies


def test_every_process_logs_at_antwort_log_level(fleet: Fleet, tmp_path: Path) -> None:
    """``ANTWORT_LOG_LEVEL`` sets the whole fleet's level: the gateway's (gunicorn's own
    included, also in JSON) and that of workers started without ``--loglevel``."""
    with own_fleet(
        fleet.env,
        tmp_path,
        loglevel=None,
        ANTWORT_LOG_FORMAT="json",
        ANTWORT_LOG_LEVEL="WARNING",
    ) as running:
        assert_a_chord_and_a_stream_complete(running)  # at INFO, a line a task and more
        running.stop_all()
    logged = {log.name: lines(log) for log in tmp_path.glob("*.log")}
    assert sorted(logged) == ["gateway.log", "inference.log", "tools.internal.log"]
    quieter = ("debug", "info")
    assert [
        (name, line) for name, found in logged.items() for line in found if line["level"] in quieter
    ] == []
