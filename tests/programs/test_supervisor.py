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
