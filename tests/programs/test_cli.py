"""``antwort``'s own checks before it hands over to a server."""

from __future__ import annotations

import pytest

from programs import cli


def test_invalid_settings_are_a_line_each_naming_the_variable_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANTWORT_MAX_PARALLEL_TOOLS", "0")
    monkeypatch.setenv("ANTWORT_LOG_LEVEL", "loud")
    assert cli.main(["status"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "antwort: ANTWORT_MAX_PARALLEL_TOOLS: Input should be greater than or equal to 1",
        "antwort: ANTWORT_LOG_LEVEL: Input should be 'debug', 'info', 'warning', 'error' or "
        "'critical'",
    ]


def test_a_check_across_settings_is_a_line_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANTWORT_REDIS_URL", "redis+cluster://127.0.0.1:7000")
    monkeypatch.delenv("ANTWORT_BROKER_URL", raising=False)
    assert cli.main(["status"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("antwort: Value error, the Celery broker cannot be a Redis Cluster")
