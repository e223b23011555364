"""The sandbox kind through the gateway: code_interpreter turns, containers, limits, abuse."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import assert_error_body, check_sequence, raw_events

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")

INTERPRETER: list[Any] = [{"type": "code_interpreter", "container": {"type": "auto"}}]
CI = "code_interpreter_call"
STREAM_EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


def run_code(client: openai.OpenAI, code: str, **kwargs: Any) -> Response:
    return client.responses.create(
        model="antwort-sim",
        input=f"please use code_interpreter code=```{code}```",
        tools=INTERPRETER,
        **kwargs,
    )


def the_call(response: Response) -> Any:
    (call,) = [item for item in response.output if item.type == "code_interpreter_call"]
    return call


def test_code_interpreter_turn_runs_code_and_answers_with_its_output(
    client: openai.OpenAI,
) -> None:
    response = run_code(client, "import math\nprint(math.factorial(10))")
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["code_interpreter_call", "message"]
    call = the_call(response)
    assert call.status == "completed" and call.code == "import math\nprint(math.factorial(10))"
    assert call.container_id.startswith("cntr_")
    assert [(o.type, o.logs) for o in call.outputs] == [("logs", "3628800")]
    assert response.output_text == "Tool results: 3628800"
    assert response.tools[0].type == "code_interpreter"


def streamed(fleet: Fleet, prompt: str, tools: list[Any]) -> list[dict[str, Any]]:
    """The events of a streamed create, checked: in sequence, each one the SDK knows."""
    body = {"model": "antwort-sim", "input": prompt, "tools": tools, "stream": True}
    events = raw_events(httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=60))
    check_sequence(events)
    for event in events:
        STREAM_EVENTS.validate_python(event)
    return events


def test_code_interpreter_streams_openais_events(fleet: Fleet) -> None:
    events = streamed(fleet, "code_interpreter code=```print('a')\nprint('b')```", INTERPRETER)
    ci_id = next(e["item"]["id"] for e in events if e.get("item", {}).get("type") == CI)
    ci = [e["type"] for e in events if ci_id in (e.get("item_id"), e.get("item", {}).get("id"))]
    assert ci == [
        "response.output_item.added",
        "response.code_interpreter_call.in_progress",
        *["response.code_interpreter_call_code.delta"] * (len(ci) - 6),
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.output_item.done",
    ]
    code = "".join(e["delta"] for e in events if e["type"].endswith("_code.delta"))
    assert code == "print('a')\nprint('b')"
    done = [e for e in events if e["type"] == "response.output_item.done"][0]["item"]
    assert done["outputs"] == [{"type": "logs", "logs": "a\nb"}]


def test_files_are_kept_across_calls_of_a_response_chain(client: openai.OpenAI) -> None:
    first = run_code(client, "open('notes.txt', 'w').write('remembered')")
    assert the_call(first).status == "completed"
    second = run_code(client, "print(open('notes.txt').read())", previous_response_id=first.id)
    assert the_call(second).outputs[0].logs == "remembered"
    assert the_call(second).container_id == the_call(first).container_id
    unrelated = run_code(client, "print(open('notes.txt').read())")
    assert the_call(unrelated).status == "failed"
    assert "FileNotFoundError" in the_call(unrelated).outputs[0].logs


def test_timeout_kills_the_code_and_the_model_sees_an_error(client: openai.OpenAI) -> None:
    response = run_code(client, "import time\nprint('start', flush=True)\nwhile True: pass")
    assert response.status == "completed"
    call = the_call(response)
    assert call.status == "failed"
    assert call.outputs[0].logs.startswith("start\nError: the code timed out after")
    assert "timed out" in response.output_text


ABUSE = {
    "worker_files": ("print(open('/proc/1/root/etc/hostname').read())", "Error"),
    "worker_environment": ("import os\nprint(os.environ['ANTWORT_REDIS_URL'])", "KeyError"),
    "loopback_redis": (
        "import socket\nsocket.create_connection(('127.0.0.1', 6379), timeout=2)",
        "Error",
    ),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", "BlockingIOError"),
    "memory_bomb": ("a = []\nwhile True:\n    a.append(bytearray(10**7))", "MemoryError"),
    "ten_gb_file": (
        "f = open('big', 'wb')\nfor _ in range(10240):\n    f.write(b'0' * 2**20)",
        "Error",
    ),
    "write_outside": ("open('/usr/lib/evil.py', 'w')", "Read-only file system"),
    "kill_parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "abnormally"),
}


@pytest.mark.parametrize("case", sorted(ABUSE))
def test_abuse_is_contained_and_reported_as_an_error(client: openai.OpenAI, case: str) -> None:
    code, expected = ABUSE[case]
    response = run_code(client, code)
    assert response.status == "completed"
    call = the_call(response)
    assert call.status == "failed", call.outputs
    assert expected in call.outputs[0].logs
    assert "Error" in response.output_text  # the model was told
    healthy = run_code(client, "print(6 * 7)")  # the worker is still there and well
    assert the_call(healthy).outputs[0].logs == "42"


def test_abuse_process_left_running_does_not_outlive_the_call(client: openai.OpenAI) -> None:
    spawn = "import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)"
    first = run_code(client, spawn + "\nopen('pid', 'w').write('x')")
    assert the_call(first).status == "completed"
    check = "import os\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))"
    second = run_code(client, check, previous_response_id=first.id)
    # only the new sandbox's own processes: its init, the runner and this code
    assert len(json.loads(the_call(second).outputs[0].logs.replace("'", '"'))) <= 3


def test_operator_sandboxed_tool_is_a_function_call(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="antwort-sim",
        input='word_count text="one two three four"',
        tools=[{"type": "sandbox", "name": "word_count"}],  # type: ignore[list-item]
    )
    assert [item.type for item in response.output] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    assert response.output[1].output == "4"  # type: ignore[union-attr]


def test_unsupported_container_options_are_a_400(fleet: Fleet) -> None:
    tool = {"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["file_1"]}}
    body = {"model": "antwort-sim", "input": "hi", "tools": [tool]}
    error = assert_error_body(httpx.post(f"{fleet.base_url}/v1/responses", json=body), 400)
    assert error["param"] == "tools.0.container.file_ids"


def test_code_interpreter_output_can_be_sent_back_as_input(client: openai.OpenAI) -> None:
    first = run_code(client, "open('kept.txt', 'w').write('stateless')", store=False)
    follow = client.responses.create(
        model="antwort-sim",
        input=[
            *[item.to_dict() for item in first.output],  # type: ignore[misc]
            {
                "role": "user",
                "content": "code_interpreter code=```print(open('kept.txt').read())```",
            },
        ],
        tools=INTERPRETER,
    )
    assert the_call(follow).container_id == the_call(first).container_id
    assert the_call(follow).outputs[0].logs == "stateless"


def test_sandbox_worker_refuses_to_start_without_bubblewrap(redis_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTWORT_")}
    env.update(ANTWORT_REDIS_URL=redis_url, ANTWORT_SANDBOX_BWRAP="/nonexistent/bwrap")
    argv = [sys.executable, "-m", "workers.main", "--queues=tools.sandbox"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "apt-get install bubblewrap" in done.stderr


HOSTED_SHELL: list[Any] = [{"type": "shell", "environment": {"type": "container_auto"}}]


def run_shell(client: openai.OpenAI, *commands: str, **kwargs: Any) -> Response:
    call = json.dumps({"commands": list(commands)})
    return client.responses.create(
        model="antwort-sim", input=f"Run. [call shell {call}]", tools=HOSTED_SHELL, **kwargs
    )


def test_hosted_shell_runs_the_commands_in_the_chains_container(client: openai.OpenAI) -> None:
    first = run_shell(client, "echo kept > notes.txt; cat notes.txt", "ls; echo oops >&2; exit 3")

    assert first.status == "completed"
    assert [item.type for item in first.output] == ["shell_call", "shell_call_output", "message"]
    call, result, _ = first.output
    container = call.environment.container_id  # type: ignore[union-attr]
    assert container.startswith("cntr_")
    assert first.tools[0].environment.container_id == container  # type: ignore[union-attr]
    assert result.call_id == call.call_id and result.id.startswith("sho_")  # type: ignore[union-attr]
    assert [
        (entry.stdout, entry.stderr, entry.outcome.model_dump())
        for entry in result.output  # type: ignore[union-attr]
    ] == [
        ("kept\n", "", {"type": "exit", "exit_code": 0}),
        ("notes.txt\n", "oops\n", {"type": "exit", "exit_code": 3}),
    ]
    assert first.output_text == "Tool results: kept [exit 0] notes.txt oops [exit 3]"
    # the code interpreter of the chain reads the shell's files
    code = client.responses.create(
        model="antwort-sim",
        input="code_interpreter code=```print(open('notes.txt').read().strip())```",
        tools=INTERPRETER,
        previous_response_id=first.id,
    )
    assert the_call(code).container_id == container
    assert the_call(code).outputs[0].logs == "kept"


def test_hosted_shell_streams_its_two_items(fleet: Fleet) -> None:
    prompt = 'Run. [call shell {"commands": ["echo streamed"], "timeout_ms": 5000}]'
    events = streamed(fleet, prompt, HOSTED_SHELL)
    items = [(e["type"], e["item"]["type"], e["output_index"]) for e in events if "item" in e]
    assert items[:4] == [
        ("response.output_item.added", "shell_call", 0),
        ("response.output_item.done", "shell_call", 0),
        ("response.output_item.added", "shell_call_output", 1),
        ("response.output_item.done", "shell_call_output", 1),
    ]
    shell = [(e["type"], e.get("command"), e.get("delta")) for e in events if "shell" in e["type"]]
    assert shell == [
        ("response.shell_call_command.added", "", None),
        ("response.shell_call_command.delta", None, "echo streamed"),
        ("response.shell_call_command.done", "echo streamed", None),
        ("response.shell_call_output_content.delta", None, {"stdout": "streamed\n", "stderr": ""}),
        ("response.shell_call_output_content.done", None, None),
    ]
    done = events[-1]["response"]
    assert done["status"] == "completed"
    assert done["output"][1]["output"][0]["stdout"] == "streamed\n"


def test_hosted_shell_items_sent_back_as_input_keep_the_container(client: openai.OpenAI) -> None:
    first = run_shell(client, "echo stateless > kept.txt", store=False)
    follow = client.responses.create(
        model="antwort-sim",
        input=[
            *[item.to_dict() for item in first.output],  # type: ignore[misc]
            {"role": "user", "content": 'Again. [call shell {"commands": ["cat kept.txt"]}]'},
        ],
        tools=HOSTED_SHELL,
        store=False,
    )
    assert follow.output[1].output[0].stdout == "stateless\n"  # type: ignore[union-attr]
    env = follow.output[0].environment  # type: ignore[union-attr]
    assert env.container_id == first.output[0].environment.container_id  # type: ignore[union-attr]


def test_hosted_shell_options_the_sandbox_lacks_are_a_400(fleet: Fleet) -> None:
    for environment, param in (
        ({"type": "container_auto", "file_ids": ["file_1"]}, "file_ids"),
        ({"type": "container_reference"}, "container_id"),
        ({"type": "docker"}, None),
    ):
        tool = {"type": "shell", "environment": environment}
        body = {"model": "antwort-sim", "input": "hi", "tools": [tool]}
        error = assert_error_body(httpx.post(f"{fleet.base_url}/v1/responses", json=body), 400)
        if param is not None:
            assert error["param"] == f"tools.0.environment.{param}"
        else:
            assert error["param"].startswith("tools.0")
