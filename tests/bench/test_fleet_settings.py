"""The benchmark's fleet takes ``ANTWORT_*`` settings from ``--set``, and only from there."""

import pytest

from bench.fleet import Fleet, parse_setting
from bench.run import _parser


def test_fleet_env_carries_the_settings_given_and_none_of_the_shell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTWORT_LEAN_HTTP", "0")  # the developer's shell

    env = Fleet(settings={"ANTWORT_FAST_PUBLISH": "0"}).env()

    assert env["ANTWORT_FAST_PUBLISH"] == "0"
    assert "ANTWORT_LEAN_HTTP" not in env
    assert "ANTWORT_FAST_PUBLISH" not in Fleet().env()


def test_run_parses_repeated_set_options() -> None:
    args = _parser().parse_args(
        ["--only", "core", "--set", "ANTWORT_LEAN_HTTP=0", "--set", "ANTWORT_TOOL_RUNNER_POOL=1"]
    )

    assert dict(args.settings) == {"ANTWORT_LEAN_HTTP": "0", "ANTWORT_TOOL_RUNNER_POOL": "1"}


@pytest.mark.parametrize("text", ["ANTWORT_FAST_PUBLISH", "PATH=/x", "ANTWORT_REDIS_URL=redis://x"])
def test_a_setting_the_fleet_cannot_take_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"NAME=VALUE|cannot be given"):
        parse_setting(text)


def test_a_wide_fleet_runs_the_example_mcp_server_and_the_mcp_and_sandbox_workers() -> None:
    wide = Fleet(mcp_workers=1, sandbox_workers=1)

    commands = wide.commands()

    assert commands["mcp-server"][1:] == ["examples/mcp_server.py", "--port", str(wide.mcp_port)]
    assert commands["mcp0"][-2:] == ["--queues", "tools.mcp"]
    assert commands["sandbox0"][-2:] == ["--queues", "tools.sandbox"]
    assert wide.env()["ANTWORT_MCP_ALLOWED_HOSTS"] == "127.0.0.1"
    assert wide.mcp_url == f"http://127.0.0.1:{wide.mcp_port}/mcp"
    assert {"mcp-server", "mcp0", "sandbox0"}.isdisjoint(Fleet().commands())
    assert "ANTWORT_MCP_ALLOWED_HOSTS" not in Fleet().env()
