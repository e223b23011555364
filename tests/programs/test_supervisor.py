"""The supervisor of ``antwort up``: which children it plans to start."""

from __future__ import annotations

import shutil

import pytest

from app.config import Settings
from programs.supervisor import plan


def test_antwort_up_runs_the_fleet_without_a_sandbox_worker_when_bwrap_is_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0",
        llm_base_url="http://127.0.0.1:1/v1",
        sandbox_bwrap="/nonexistent/bwrap",
    )
    names = [child.name for child in plan(settings, {}, "/tmp")]
    assert "worker[tools.sandbox]" not in names and "worker[inference]" in names
    assert "apt-get install bubblewrap" in capsys.readouterr().err
    if shutil.which("bwrap"):
        names = [
            child.name
            for child in plan(settings.model_copy(update={"sandbox_bwrap": None}), {}, "/tmp")
        ]
        assert "worker[tools.sandbox]" in names


def test_antwort_up_keeps_the_generated_key_in_its_state_directory_not_in_redis() -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/0", llm_base_url="http://127.0.0.1:1/v1")
    env: dict[str, str] = {}

    plan(settings, env, "/state")

    assert env["ANTWORT_SECRETS_FILE"] == "/state/secrets.key"
    configured: dict[str, str] = {}
    plan(settings.model_copy(update={"secrets_file": "/elsewhere.key"}), configured, "/state")
    assert "ANTWORT_SECRETS_FILE" not in configured  # the operator's own stays
