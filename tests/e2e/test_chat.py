"""``antwort chat`` as a person runs it: a subprocess against the fleet's gateway."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import check_sequence

CHAT = [sys.executable, "-m", "programs.cli", "chat"]
CHAT_SECONDS = 90
"""How long one chat may take on a loaded machine (long_tool alone takes 5 s)."""


def chat(
    fleet: Fleet, *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CHAT, "--base-url", f"{fleet.base_url}/v1", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=CHAT_SECONDS,
        env={**fleet.env, "COLUMNS": "100"},
        cwd=cwd,
        check=False,
    )


def json_lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_chat_renders_plan_steps_results_and_answer(fleet: Fleet) -> None:
    done = chat(
        fleet,
        "--protocol=json",
        "--internal=fast_echo",
        "--internal=calculator",
        "fast_echo then calculator expression=6*7",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.rstrip() for line in done.stdout.splitlines()]
    assert lines[:4] == ["Plan", "✔ Run fast_echo", "✔ Run calculator", "✔ Write the answer"]
    assert lines[4:8] == ["✔ Run fast_echo", "  │ fast_echo done", "✔ Run calculator", "  │ 42"]
    assert lines[8] == "Tool results: fast_echo done; 42"
    assert lines[9].startswith("✔ completed  resp_")


def test_chat_shortens_results_unless_asked_for_them_whole(fleet: Fleet) -> None:
    short = chat(fleet, "--internal=big_output", "run big_output")
    assert short.returncode == 0, short.stderr
    assert "✔ big_output: note=sim" in short.stdout
    assert "characters: --full-results)" in short.stdout
    assert "x" * 1000 not in short.stdout
    whole = chat(fleet, "--internal=big_output", "--full-results", "run big_output")
    assert "--full-results)" not in whole.stdout
    assert "x" * 90 in whole.stdout and whole.stdout.count("x") == 2000  # result and answer, whole


def test_chat_json_prints_the_raw_events(fleet: Fleet) -> None:
    done = chat(fleet, "--json", "--protocol=json", "--internal=fast_echo", "use fast_echo")
    assert done.returncode == 0, done.stderr
    events = json_lines(done.stdout)
    check_sequence(events)
    types = [e["type"] for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "antwort:plan" in types and "antwort:step.completed" in types


def test_chat_session_chains_previous_response_id(fleet: Fleet) -> None:
    done = chat(fleet, "--json", stdin="hello\nand again\n")
    assert done.returncode == 0, done.stderr
    created = [e["response"] for e in json_lines(done.stdout) if e["type"] == "response.created"]
    assert len(created) == 2
    assert created[0]["previous_response_id"] is None
    assert created[1]["previous_response_id"] == created[0]["id"]


def test_chat_ctrl_c_cancels_the_response_on_the_server(
    fleet: Fleet, tmp_path: Path, counters: redis.Redis
) -> None:
    """Ctrl+C while a tool runs (held until then): the response is cancelled on the server,
    stdout holds events.

    stdout goes to a file: reading a pipe line by line reads ahead, and ``communicate`` then
    reads the pipe from where that read stopped, which can be inside a line (CI saw a line
    split at its newline, an empty line that is not an event).
    """
    out_path = tmp_path / "stdout.jsonl"
    with out_path.open("w") as out_file:
        proc = subprocess.Popen(
            [
                *CHAT,
                "--base-url",
                f"{fleet.base_url}/v1",
                "--json",
                "--internal=counted_gated",
                f"run counted_gated ({uuid.uuid4().hex})",  # call ids hash the input
            ],
            stdout=out_file,
            stderr=subprocess.PIPE,
            text=True,
            env=fleet.env,
        )
    try:
        events = _events_until(out_path, "response.output_item.done", proc)  # the tool runs
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    response_id = events[0]["response"]["id"]
    call_id = events[-1]["item"]["call_id"]  # the tool runs until the test lets it end
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        counters.set(f"{fleet.env['ANTWORT_KEY_PREFIX']}test:gate:{call_id}", 1)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert f"{response_id} is cancelled on the server." in err
    assert all(json.loads(line) for line in out_path.read_text().splitlines())  # events only
    stored = httpx.get(f"{fleet.base_url}/v1/responses/{response_id}", timeout=10).json()
    assert stored["status"] == "cancelled"


def _events_until(path: Path, event_type: str, proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """The complete JSON lines written to ``path`` up to the first ``event_type`` event."""
    deadline = time.monotonic() + CHAT_SECONDS
    while time.monotonic() < deadline and proc.poll() is None:
        events = json_lines(path.read_text().rpartition("\n")[0])  # complete lines only
        for index, event in enumerate(events):
            if event["type"] == event_type:
                return events[: index + 1]
        time.sleep(0.05)
    raise AssertionError(f"no {event_type} in {CHAT_SECONDS} s (exit {proc.poll()})")


def start_background(fleet: Fleet, body: dict[str, Any], events: int) -> tuple[str, int]:
    """Create a streamed background response; read ``events`` events, then hang up."""
    seen: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{fleet.base_url}/v1/responses", json=body, timeout=30) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: {"):
                seen.append(json.loads(line[6:]))
            if len(seen) == events:
                break
    return seen[0]["response"]["id"], seen[-1]["sequence_number"]


def test_chat_resume_reattaches_where_it_left_off(fleet: Fleet) -> None:
    body = {
        "model": "antwort-sim",
        "input": "slow_echo then fast_echo",
        "tools": [
            {"type": "internal", "name": "slow_echo"},
            {"type": "internal", "name": "fast_echo"},
        ],
        "metadata": {"antwort_tool_protocol": "json"},
        "include": ["antwort:progress"],
        "stream": True,
        "background": True,
    }
    response_id, last = start_background(fleet, body, events=3)
    done = chat(fleet, "--json", "--resume", response_id, "--after", str(last))
    assert done.returncode == 0, done.stderr
    events = json_lines(done.stdout)
    check_sequence(events, start=last + 1)
    assert events[-1]["type"] == "response.completed"

    again, _ = start_background(fleet, body, events=3)
    shown = chat(fleet, "--resume", again)  # from the start: the whole picture
    assert shown.returncode == 0, shown.stderr
    assert "✔ Run slow_echo" in shown.stdout and "✔ Write the answer" in shown.stdout
    assert "Tool results: slow_echo done; fast_echo done" in shown.stdout


def test_chat_answers_client_tool_calls_with_python_functions(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text(
        textwrap.dedent(
            '''
            def get_time(zone: str) -> str:
                """The time in a zone."""
                return f"12:00 in {zone}"
            '''
        )
    )
    for protocol in ("native", "json"):
        done = chat(
            fleet, f"--protocol={protocol}", "--tools=mytools", "get_time zone=UTC", cwd=tmp_path
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "│ 12:00 in UTC" in done.stdout
        assert "Tool results: 12:00 in UTC" in done.stdout


def test_chat_in_a_terminal_shows_spinners_then_the_ticked_plan(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A real terminal (tmux): the running step spins, and the final screen is ticked."""
    socket = f"antwort-chat-test-{tmp_path.name}"
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]
    command = shlex.join(
        [
            *CHAT,
            f"--base-url={fleet.base_url}/v1",
            "--protocol=json",
            "--internal=long_tool",
            "run long_tool",
        ]
    )

    def pane(command: str, *args: str) -> str:
        return subprocess.run(
            [*tmux, command, "-t", "chat", *args], capture_output=True, text=True, check=True
        ).stdout

    # The shell tmux runs the program in writes its exit status to a file: tmux's own
    # #{pane_dead_status} stayed empty for a whole run once (CI), its pane dead but no status.
    exit_file = tmp_path / "chat.exit"
    # remain-on-exit in the same command as the session: the pane outlives the program at once
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", "100", "-y", "30", "-s", "chat"]
        + [f"{command}; echo $? > {shlex.quote(str(exit_file))}"]
        + [";", "set-option", "-t", "chat", "remain-on-exit", "on"],
        check=True,
        env={**fleet.env, "TERM": "xterm-256color"},
    )
    try:
        screens = []  # while it runs
        deadline = time.monotonic() + CHAT_SECONDS
        # until the program's status is written and tmux has read the pane's terminal to its end
        while not (exit_file.exists() and exit_file.read_text().endswith("\n")) or (
            pane("display-message", "-p", "#{pane_dead}").strip() != "1"
        ):
            assert time.monotonic() < deadline, screens[-1:]
            screens.append(pane("capture-pane", "-p"))
            time.sleep(0.1)
        assert exit_file.read_text() == "0\n", pane("capture-pane", "-p", "-S", "-")
        # The final screen, from the start of the pane's history: tmux writes its "Pane is dead"
        # notice on a new bottom line, which scrolls the screen's first line ("Plan") into it.
        whole = pane("capture-pane", "-p", "-S", "-")
        final = [
            line.rstrip()
            for line in whole.splitlines()
            if line.strip() and not line.startswith("Pane is dead")
        ]
        assert final[:3] == ["Plan", "✔ Run long_tool", "✔ Write the answer"], whole
        assert final[3:6] == [
            "✔ Run long_tool",
            "  │ long_tool done",
            "Tool results: long_tool done",
        ]
        assert final[6].startswith("✔ completed  resp_")
        running = [s for s in screens if "Run long_tool" in s and "✔ Run long_tool" not in s]
        assert running, "the running step was never shown with a spinner"
        assert any(frame in running[-1] for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
