"""The deployment files: compose.yaml validates; the example MCP server is wired as `example`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from app.tools.mcp.servers import ServersFile


def test_compose_file_is_valid_and_has_the_example_mcp_server(repo_root: Path) -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed")

    def config(*options: str) -> subprocess.CompletedProcess[str]:
        argv = [binary, "-f", "compose.yaml", "config", *options]
        return subprocess.run(argv, cwd=repo_root, capture_output=True, text=True, timeout=60)

    checked = config("-q")
    assert checked.returncode == 0, checked.stderr
    assert "mcp-example" in config("--services").stdout.split()


@pytest.mark.parametrize(
    ("name", "url", "user"),
    [
        ("mcp_servers.json", "http://mcp-example:8765/mcp", "compose.yaml"),
        ("mcp_servers.local.json", "http://127.0.0.1:8765/mcp", "Procfile"),
    ],
)
def test_example_servers_files_declare_the_example_server(
    repo_root: Path, name: str, url: str, user: str
) -> None:
    parsed = ServersFile.model_validate_json((repo_root / "examples" / name).read_text())
    assert list(parsed.servers) == ["example"]
    example = parsed.servers["example"]
    assert example.url == url and example.require_approval == "never" and example.description
    assert f"examples/{name}" in (repo_root / user).read_text()


def test_procfile_runs_the_example_mcp_server_on_the_local_files_port(repo_root: Path) -> None:
    processes = dict(
        line.split(": ", 1)
        for line in (repo_root / "Procfile").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert processes["mcp-example"] == (
        "python examples/mcp_server.py --host 127.0.0.1 --port 8765"
    )
