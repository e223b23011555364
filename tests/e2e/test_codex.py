"""Codex CLI, unmodified, against the fleet: ``codex exec`` runs a command the model asked for.

The CLI (npm ``@openai/codex``, pinned in the Makefile, installed into ``.venv/node`` by
``make test``) is configured as README's "Clients" section says: a model provider with
``wire_api = "responses"`` whose ``base_url`` is the gateway. Its first request carries its
default tool list (function tools, a ``namespace``, ``web_search``), ``client_metadata``,
``store: false`` and ``include: ["reasoning.encrypted_content"]``; the simulator is scripted by a
``[call exec_command {…}]`` directive to call Codex's shell tool; Codex runs the command and sends
the whole history back, and the answer carries the command's output.

With ``supports_websockets = true`` in the provider block, Codex speaks WebSocket mode instead:
its first message is a warm-up ``response.create`` with ``"stream": true`` and
``"generate": false`` (the prompt's state, no output); it waits for that response's
``response.completed``, then sends the turn with ``previous_response_id`` and only the new items.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.e2e.conftest import Fleet
from tests.e2e.test_metrics import scrape, value
from tests.support.sentinel import wait_for

CODEX = Path(__file__).resolve().parents[2] / ".venv" / "node" / "node_modules" / ".bin" / "codex"

ROUTE = "/v1/responses"

CONFIG = """\
model = "antwort-sim"
model_provider = "antwort"

[model_providers.antwort]
name = "Antwort Fleet"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "ANTWORT_API_KEY"
supports_websockets = {websockets}
"""


@pytest.mark.skipif(not CODEX.exists(), reason="Codex CLI not installed: `make codex`")
@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_exec_runs_the_command_the_model_asked_for(
    fleet: Fleet, tmp_path: Path, websockets: bool
) -> None:
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    config = CONFIG.format(base_url=fleet.base_url, websockets=str(websockets).lower())
    (home / "config.toml").write_text(config)
    sockets_before = handshakes(fleet)
    marker = f"codex-{uuid.uuid4().hex[:8]}"
    command = f"echo {marker} > proof.txt && cat proof.txt"
    prompt = f'Write the proof. [call exec_command {{"cmd": "{command}"}}]'

    done = subprocess.run(
        [
            str(CODEX),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",  # the test's tmp dir is the sandbox
            "--output-last-message",
            str(tmp_path / "answer.txt"),
            prompt,
        ],
        cwd=work,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home)}
        | {"ANTWORT_API_KEY": "unused"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "proof.txt").read_text().strip() == marker  # Codex ran it, on this machine
    answer = (tmp_path / "answer.txt").read_text()
    assert answer.startswith("Tool results: ") and marker in answer  # the fleet saw its output
    # and it spoke the transport asked (the gateway counts a socket once it has closed)
    if websockets:
        wait_for(
            lambda: handshakes(fleet) > sockets_before, timeout=30, what="Codex's WebSocket counted"
        )
    else:
        assert handshakes(fleet) == sockets_before


def handshakes(fleet: Fleet) -> float:
    """WebSocket connections the gateway served to their end so far (its metrics)."""
    samples = scrape(f"{fleet.base_url}/metrics")
    return value(samples, "antwort_http_request_duration_seconds_count", method="GET", route=ROUTE)
