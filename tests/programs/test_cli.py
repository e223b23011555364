"""``antwort``'s own checks before it hands over to a server, and its errors: a line each."""

from __future__ import annotations

import pytest

from programs import cli
from programs.supervisor import free_port
from tests.support.private_redis import PrivateRedis


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


def test_a_redis_that_cannot_be_reached_is_a_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANTWORT_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("ANTWORT_REDIS_OUTAGE_SECONDS", "1")
    monkeypatch.delenv("ANTWORT_BROKER_URL", raising=False)

    assert cli.main(["status"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("antwort: the fleet's Redis: ConnectionError: Error 111 connecting")


@pytest.mark.parametrize("command", [["status"], ["keys", "list"]])
def test_a_redis_that_refuses_writes_is_a_line_not_a_traceback(
    private_redis: PrivateRedis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    """A failed snapshot makes Redis refuse even ``PING``, and so every command's connection."""
    monkeypatch.setenv("ANTWORT_REDIS_URL", private_redis.url)
    monkeypatch.delenv("ANTWORT_BROKER_URL", raising=False)
    private_redis.refuse_writes("disk")

    assert cli.main(command) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("antwort: the fleet's Redis: ResponseError: MISCONF ")
