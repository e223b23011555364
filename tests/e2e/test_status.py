"""``antwort status`` against a real fleet: queues, workers and their metrics, failures."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import internal
from tests.e2e.own_fleet import own_fleet


@pytest.fixture(scope="module")
def no_sandbox_fleet(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A gateway, an inference and an internal-tools worker: nothing serves tools.sandbox."""
    with own_fleet(fleet.env, tmp_path_factory.mktemp("status-fleet")) as running:
        yield running


def status(fleet: Fleet, *flags: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "programs.cli", "status", *flags],
        env=fleet.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


def test_status_shows_queues_workers_the_oldest_waiting_response_and_failures(
    no_sandbox_fleet: Fleet,
) -> None:
    with openai.OpenAI(
        base_url=f"{no_sandbox_fleet.base_url}/v1", api_key="k", max_retries=0
    ) as client:
        failed_tool = client.responses.create(
            model="antwort-sim",
            input="failing_tool",
            tools=internal("failing_tool"),  # type: ignore[arg-type]
        )
        assert failed_tool.status == "completed"  # a failing tool is data for the model
        waiting = client.responses.create(
            model="antwort-sim",
            input="please use code_interpreter code=```print(1)```",
            tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
            background=True,
        )
    deadline = time.monotonic() + 30
    while True:  # until its call waits on tools.sandbox, which no worker serves
        found: dict[str, Any] = json.loads(status(no_sandbox_fleet, "--json"))
        queues = {queue["name"]: queue for queue in found["queues"]}
        if queues["tools.sandbox"]["depth"] == 1:
            break
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
    time.sleep(0.2)  # it has waited a while now

    found = json.loads(status(no_sandbox_fleet, "--json"))
    queues = {queue["name"]: queue for queue in found["queues"]}
    oldest = queues["tools.sandbox"]["oldest"]
    assert oldest["response_id"] == waiting.id and oldest["task"] == "tools.run_call"
    assert oldest["age_seconds"] >= 0.2
    assert queues["tools.sandbox"]["workers"] == []
    assert found["responses_in_flight"] >= 1
    for queue in ("inference", "tools.internal"):
        [worker] = queues[queue]["workers"]
        assert queues[queue]["depth"] == 0
        [url] = worker["metrics_urls"]
        assert "antwort_" in httpx.get(url, timeout=5).text  # a scrape target as listed
    [failure] = [f for f in found["recent_failures"] if f["kind"] == "tool.internal"]
    assert failure["code"] == "failing_tool" and failure["count"] == 1

    text = status(no_sandbox_fleet)
    assert f"oldest: {waiting.id}" in text
    assert "tool.internal" in text and "failing_tool" in text
