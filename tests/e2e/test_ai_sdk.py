"""The Vercel AI SDK, unmodified, against the fleet: a chat of two turns with a tool it runs.

The SDK (npm ``ai`` and ``@ai-sdk/openai``, pinned in the Makefile, installed into
``.venv/node`` by ``make test``) speaks the Responses API with ``store`` on, its default. From
its second request on it names every earlier reasoning item and assistant message by an
``item_reference`` alone, even between the steps of one ``generateText`` (a tool's result
goes back with a reference to the reasoning that called it). ``fixtures/ai_sdk_chat.mjs``
runs the chat; its ``fetch`` keeps a copy of each request body for the test to read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Fleet
from tests.support.mcp_servers import running
from tests.support.recording import Recorder

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / ".venv" / "node" / "node_modules"
SCRIPT = Path(__file__).parent / "fixtures" / "ai_sdk_chat.mjs"

pytestmark = pytest.mark.skipif(
    not (MODULES / "@ai-sdk" / "openai").exists(), reason="AI SDK not installed: `make ai-sdk`"
)


def ai_sdk_chat(fleet: Fleet, tmp_path: Path, marker: str, *mode: str) -> dict[str, Any]:
    """What the script printed: the answers, every step's response id, each request's body."""
    shutil.copy(SCRIPT, tmp_path / SCRIPT.name)
    (tmp_path / "node_modules").symlink_to(MODULES)  # an ES module finds packages beside it
    ran = subprocess.run(
        ["node", str(tmp_path / SCRIPT.name), f"{fleet.base_url}/v1", marker, *mode],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ANTWORT_API_KEY": "unused"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    chat: dict[str, Any] = json.loads(ran.stdout)
    return chat


def test_ai_sdk_chat_with_a_tool_names_its_earlier_items_and_the_model_sees_them(
    fleet: Fleet, client: openai.OpenAI, sim_recorder: Recorder, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    to_model = sim_recorder.watch(marker)

    chat = ai_sdk_chat(fleet, tmp_path, marker)

    assert chat["answers"][0] == "Tool results: Sunny in Oslo"
    assert chat["answers"][1].startswith("Simulated answer to: and?")
    called, answered, asked = (client.responses.retrieve(rid) for rid in chat["responses"])
    reasoning, call = called.output
    named = [
        [item["id"] for item in body["input"] if item.get("type") == "item_reference"]
        for body in chat["sent"]
    ]
    assert named == [[], [reasoning.id], [reasoning.id, *(item.id for item in answered.output)]]
    # the step after the tool: its call and reasoning, as the model produced them
    assistant, result = to_model[1]["messages"][1:3]
    assert assistant["reasoning_content"] == reasoning.content[0].text  # type: ignore[union-attr,index]
    assert assistant["tool_calls"][0]["id"] == call.call_id  # type: ignore[union-attr]
    assert (result["role"], result["content"]) == ("tool", "Sunny in Oslo")
    # the next question: the first turn's answer came back from its reference
    answer, question = to_model[2]["messages"][3:5]
    assert (answer["role"], answer["content"]) == ("assistant", "Tool results: Sunny in Oslo")
    assert answer["reasoning_content"] == answered.output[0].content[0].text  # type: ignore[union-attr,index]
    assert question == {"role": "user", "content": "and?"}
    listed = client.responses.input_items.list(asked.id, order="asc").data
    assert [item.id for item in listed[4:6]] == [item.id for item in answered.output]


def test_ai_sdk_steps_in_a_conversation_resending_the_question_and_results_complete(
    fleet: Fleet, client: openai.OpenAI, sim_recorder: Recorder, tmp_path: Path
) -> None:
    """In a conversation the SDK sends, at each step, every item of the chat without an id: the
    question again, then each result so far. A result after the question is shown to the model
    in its call's place, and one it was shown before is not shown twice (before: the second
    step failed, a ``tool`` message after a ``user`` one)."""
    marker = uuid.uuid4().hex
    to_model = sim_recorder.watch(marker)

    chat = ai_sdk_chat(fleet, tmp_path, marker, "conversation")

    steps = [client.responses.retrieve(rid) for rid in chat["responses"]]
    assert [step.status for step in steps] == ["completed"] * 3  # the question calls each time
    assert [item.get("type", "message") for item in chat["sent"][2]["input"]] == [
        "message", "function_call_output", "function_call_output"
    ]  # fmt: skip
    calls = [step.output[-1].call_id for step in steps[:2]]  # type: ignore[union-attr]
    roles = [(m["role"], m.get("tool_call_id")) for m in to_model[2]["messages"]]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", calls[0]),
        ("user", None),
        ("assistant", None),
        ("tool", calls[1]),
        ("user", None),
    ]


def test_ai_sdk_is_told_why_a_response_failed(fleet: Fleet, tmp_path: Path) -> None:
    """A failed response's ``error`` carries ``type`` (and ``param``) beside OpenAI's ``code``
    and ``message``, as the SDK's schema wants. Before, the SDK said "Invalid JSON response"."""
    chat = ai_sdk_chat(fleet, tmp_path, uuid.uuid4().hex, "failure")

    assert chat["error"].startswith("Model server answered 500: Simulated error 500")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
def test_ai_sdk_hosted_shell_runs_on_the_fleet_and_its_container_goes_on(
    fleet: Fleet, tmp_path: Path
) -> None:
    """``openai.tools.shell`` in a ``containerAuto`` environment: the fleet runs the commands,
    the SDK takes the call and its result as the provider's. The second turn names the call by
    an ``item_reference``: its container (and the file the first wrote) goes on."""
    chat = ai_sdk_chat(fleet, tmp_path, uuid.uuid4().hex, "shell")

    assert chat["answers"] == ["Tool results: [exit 0]", "Tool results: 42 [exit 0]"]
    assert chat["steps"] == [1, 1]  # nothing left for the SDK to run
    assert chat["first"] == [["tool-call", True], ["tool-result", True], ["text", None]]
    assert chat["second"] == [["tool-call", True], ["tool-result", True]]
    assert chat["sent"][0]["tools"] == [
        {"type": "shell", "environment": {"type": "container_auto"}}
    ]
    assert [item.get("type") for item in chat["sent"][1]["input"][1:3]] == [
        "item_reference",
        "shell_call_output",
    ]


def test_ai_sdk_hosted_tool_search_loads_a_deferred_tool_the_sdk_then_runs(
    fleet: Fleet, tmp_path: Path, sim_recorder: Recorder
) -> None:
    """``openai.tools.toolSearch()`` with a tool of ``deferLoading: true``: the fleet's search
    loads it (the SDK takes the call and its result as the provider's), and the next turn,
    which names both items by ``item_reference``, offers it: the SDK runs its call."""
    marker = uuid.uuid4().hex
    to_model = sim_recorder.watch(marker)

    chat = ai_sdk_chat(fleet, tmp_path, marker, "toolsearch")

    assert chat["answers"] == [
        'Tool results: {"loaded_tools": ["tide"]}',
        "Tool results: high tide in Bergen at six",
    ]
    assert chat["first"] == [["tool-call", True], ["tool-result", True], ["text", None]]
    assert chat["second"] == [["tool-call", "tool-result"], ["text"]]
    named = [item.get("id", "")[:4] for item in chat["sent"][1]["input"]]
    assert {"tsc_", "tso_"} <= set(named)  # the search's items, by reference
    offered = [[tool["function"]["name"] for tool in sent["tools"]] for sent in to_model]
    assert offered[0] == ["tool_search"]
    assert all(sorted(names) == ["tide", "tool_search"] for names in offered[1:])


@pytest.mark.parametrize("store", [True, False], ids=["store", "no-store"])
def test_ai_sdk_local_shell_output_continues_the_response(
    fleet: Fleet, tmp_path: Path, store: bool
) -> None:
    """``openai.tools.localShell``, run by the SDK: its ``local_shell_call_output`` names the
    call by ``call_id`` (not the ``id`` of the SDK's typed param), and with ``store: false`` the
    call goes back without its ``status``. Before, each was a 400 ("Missing required parameter:
    'input.2.id'", "… 'input.1.status'")."""
    mode = "localshell" if store else "localshell-nostore"
    chat = ai_sdk_chat(fleet, tmp_path, uuid.uuid4().hex, mode)

    assert chat["answer"] == "Tool results: hi from the shell"
    assert (chat["steps"], chat["ran"]) == (2, [["echo", "hi"]])
    output = chat["sent"][1]["input"][-1]
    assert output["type"] == "local_shell_call_output" and "id" not in output
    call = chat["sent"][1]["input"][1]
    if store:
        assert call["type"] == "item_reference"
    else:
        assert call["type"] == "local_shell_call" and "status" not in call


def test_ai_sdk_mcp_tool_runs_on_the_fleet_sync_and_streamed(fleet: Fleet, tmp_path: Path) -> None:
    """``openai.tools.mcp``: the fleet lists the server and calls its tool, the SDK takes both as
    the provider's. Before, the listing's ``"error": null`` and its tools' ``"annotations":
    null`` failed the SDK's schema: "Invalid JSON response" (sync) and a type validation error
    (streamed)."""
    with running("streamable-http", name="alpha") as server:
        chat = ai_sdk_chat(fleet, tmp_path, uuid.uuid4().hex, "mcp", server.url)

    assert chat["answers"] == ["Tool results: 5", "Tool results: 2"]
    assert chat["first"] == [["tool-call", True], ["tool-result", True], ["text", None]]
    assert chat["second"] == [["tool-call", True], ["tool-result", True]]
