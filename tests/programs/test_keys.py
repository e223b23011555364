"""``antwort keys``: the command line over the key store (the gateway's side: tests/gateway)."""

from __future__ import annotations

import pytest

from programs.cli import main as antwort


@pytest.fixture
def fleet_env(redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTWORT_REDIS_URL", redis_url)
    monkeypatch.setenv("ANTWORT_KEY_PREFIX", key_prefix)


def test_keys_limits_are_set_shown_and_cleared(
    fleet_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert antwort(["keys", "limits", "team-a"]) == 0
    assert capsys.readouterr().out == "team-a: the fleet defaults\n"

    assert antwort(["keys", "limits", "team-a", "--requests-per-minute", "60"]) == 0
    assert antwort(["keys", "limits", "team-a", "--max-in-flight", "4"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "team-a: requests_per_minute=60, max_in_flight=4"
    )
    assert antwort(["keys", "limits", "team-a", "--requests-per-minute", "none"]) == 0
    assert capsys.readouterr().out == "team-a: max_in_flight=4\n"


def test_keys_create_prints_the_key_once_and_list_never(
    fleet_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert antwort(["keys", "create", "--tenant", "team-a", "--tokens-per-minute", "1000"]) == 0
    created = capsys.readouterr().out
    token = created.rsplit(" ", 1)[1].strip()
    assert token.startswith("ak-")

    assert antwort(["keys", "list"]) == 0
    listed = capsys.readouterr().out
    assert "team-a" in listed and token not in listed and token[-4:] in listed
    assert antwort(["keys", "limits", "team-a"]) == 0
    assert capsys.readouterr().out == "team-a: tokens_per_minute=1000\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["keys", "create", "--tenant", "bad name"],
        ["keys", "create"],
        ["keys", "limits", "team-a", "--max-in-flight", "-1"],
        ["keys"],
    ],
)
def test_keys_bad_arguments_are_usage_errors(fleet_env: None, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        antwort(argv)
    assert exited.value.code == 2


def test_keys_wants_the_fleets_redis(capsys: pytest.CaptureFixture[str]) -> None:
    assert antwort(["keys", "list"]) == 2
    assert "ANTWORT_REDIS_URL" in capsys.readouterr().err
