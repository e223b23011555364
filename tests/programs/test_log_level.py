"""``ANTWORT_LOG_LEVEL`` and ``antwort worker --loglevel`` (end to end: tests/e2e/test_logs.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from pydantic import ValidationError

from app.config import Settings
from programs import cli
from programs.supervisor import free_port
from tests.support.sentinel import wait_for


def test_the_level_is_read_in_any_case_and_an_unknown_one_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTWORT_LOG_LEVEL", raising=False)
    assert Settings(log_level="WARNING").log_level == "warning"
    assert Settings().log_level == "info"
    with pytest.raises(ValidationError, match="log_level"):
        Settings(log_level="loud")


def test_antwort_worker_passes_its_loglevel_on(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(cli, "_exec", started.append)
    cli.main(["worker", "--queues", "tools.mcp", "--loglevel", "debug"])
    cli.main(["worker", "--queues", "tools.mcp"])  # ANTWORT_LOG_LEVEL's, read by the worker
    assert started == [
        ["-m", "workers.main", "--queues=tools.mcp", "--loglevel=debug"],
        ["-m", "workers.main", "--queues=tools.mcp"],
    ]


def test_a_worker_refuses_an_unknown_loglevel_naming_the_levels(redis_url: str) -> None:
    env = {**os.environ, "ANTWORT_REDIS_URL": redis_url}
    ran = subprocess.run(
        [sys.executable, "-m", "workers.main", "--loglevel", "loud"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 2
    assert "invalid choice: 'LOUD' (choose from 'DEBUG', 'INFO', 'WARNING'" in ran.stderr


def test_antwort_sim_logs_at_antwort_log_level() -> None:
    port = free_port()
    env = {**os.environ, "ANTWORT_LOG_LEVEL": "warning"}
    sim = subprocess.Popen(
        [sys.executable, "-m", "programs.cli", "sim", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip

    def serving() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(serving, timeout=30, what="the simulator")
    finally:
        sim.terminate()
        output, _ = sim.communicate(timeout=30)
    assert output == ""  # not its INFO line "… listening on …"
