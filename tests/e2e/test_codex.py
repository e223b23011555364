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

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from app.sealing import SUMMARY_HEADER
from app.summary import SUMMARY_REQUEST
from tests.e2e.conftest import Fleet
from tests.e2e.own_fleet import own_fleet
from tests.e2e.test_metrics import scrape, value
from tests.support.mcp_servers import PIXEL_PNG, stdio_command
from tests.support.recording import Recorder
from tests.support.sentinel import wait_for

ROOT = Path(__file__).resolve().parents[2]
CODEX = ROOT / ".venv" / "node" / "node_modules" / ".bin" / "codex"

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


BUILTIN_CONFIG = """\
model = "antwort-sim"
openai_base_url = "{base_url}/v1"
"""
"""Codex's own OpenAI provider at another address: how many users point Codex at a server. Its
requests differ: every input item carries Codex's labels
(``internal_chat_message_metadata_passthrough``), and it compacts through the server
(``compaction_trigger``)."""


needs_codex = pytest.mark.skipif(not CODEX.exists(), reason="Codex CLI not installed: `make codex`")


@needs_codex
@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_exec_runs_the_command_the_model_asked_for(
    fleet: Fleet, tmp_path: Path, websockets: bool
) -> None:
    sockets_before = handshakes(fleet)
    marker = f"codex-{uuid.uuid4().hex[:8]}"

    work, answer = codex_exec(
        fleet, tmp_path, f"echo {marker} > proof.txt && cat proof.txt", websockets=websockets
    )

    assert (work / "proof.txt").read_text().strip() == marker  # Codex ran it, on this machine
    assert answer.startswith("Tool results: ") and marker in answer  # the fleet saw its output
    # and it spoke the transport asked (the gateway counts a socket once it has closed)
    if websockets:
        wait_for(
            lambda: handshakes(fleet) > sockets_before, timeout=30, what="Codex's WebSocket counted"
        )
    else:
        assert handshakes(fleet) == sockets_before


@needs_codex
def test_codex_with_its_own_openai_provider_pointed_at_the_fleet_runs_a_command(
    fleet: Fleet, tmp_path: Path
) -> None:
    marker = f"codex-{uuid.uuid4().hex[:8]}"
    prompt = f'Do it. [call exec_command {{"cmd": "echo {marker}"}}]'

    done = run_codex(fleet, tmp_path, prompt, websockets=None)

    assert done.returncode == 0, done.stdout + done.stderr
    answer = (tmp_path / "answer.txt").read_text()
    assert answer.startswith("Tool results: ") and marker in answer


def lite_catalog(tmp_path: Path) -> Path:
    """A model catalog (``model_catalog_json``) naming the simulator as Codex's own models are
    named: one of its built-in catalog's "Responses Lite" entries, under the simulator's slug."""
    home = tmp_path / "catalog-home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home)}
    listed = subprocess.run(
        [str(CODEX), "debug", "models"], env=env, capture_output=True, text=True, check=True
    )
    lite = next(m for m in json.loads(listed.stdout)["models"] if m.get("use_responses_lite"))
    catalog = tmp_path / "catalog.json"
    entry = {**lite, "slug": "antwort-sim", "display_name": "antwort-sim"}
    catalog.write_text(json.dumps({"models": [entry]}))
    return catalog


@needs_codex
@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_lite_requests_declare_their_tools_in_an_additional_tools_item(
    fleet: Fleet, tmp_path: Path, websockets: bool
) -> None:
    """A "Responses Lite" model (most of Codex 0.171's catalog): no ``tools``, no
    ``instructions``; the first input item is ``additional_tools`` (namespaces, among them
    ``functions`` with the code-mode ``exec`` tool). The model's ``exec`` call runs in Codex."""
    config = f'model_catalog_json = "{lite_catalog(tmp_path)}"\n'
    prompt = 'Go. [call functions__exec {"input": "text(String(6*7))"}]'

    done = run_codex(fleet, tmp_path, prompt, websockets=websockets, config=config)

    assert done.returncode == 0, done.stdout + done.stderr
    answer = (tmp_path / "answer.txt").read_text()
    assert answer.startswith("Tool results: ") and "Output: 42" in answer


@needs_codex
def test_codex_with_its_own_openai_provider_compacts_through_the_fleet(
    fleet: Fleet, tmp_path: Path, sim_recorder: Recorder
) -> None:
    """Past ``model_auto_compact_token_limit`` Codex compacts: a response whose input ends with
    ``compaction_trigger``, which must answer exactly one ``compaction`` item; Codex then goes on
    from its history of user messages and that item."""
    marker = f"codex-{uuid.uuid4().hex[:8]}"
    sent = sim_recorder.watch(marker)
    prompt = f'{marker} [call exec_command {{"cmd": "echo {marker}"}}]'
    config = "model_auto_compact_token_limit = 2000\n"

    done = run_codex(fleet, tmp_path, prompt, websockets=None, config=config)

    assert done.returncode == 0, done.stdout + done.stderr
    asked = [body["messages"] for body in sent]
    compacted = [
        i for i, messages in enumerate(asked) if messages[-1]["content"] == SUMMARY_REQUEST
    ]
    assert compacted, asked  # Codex compacted through the fleet
    # and went on from the compaction item it got back: the model read the summary
    after = asked[compacted[0] + 1]
    assert any(str(m.get("content")).startswith(SUMMARY_HEADER) for m in after), after
    assert (tmp_path / "answer.txt").read_text().strip()


@needs_codex
def test_codex_opens_a_new_socket_when_the_gateway_closed_its_idle_one(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The gateway closes a socket idle for ``ANTWORT_WEBSOCKET_IDLE_SECONDS``; while Codex runs a
    command longer than that, its socket goes, and Codex carries on over a new one (its source
    resends the whole history there, with no ``previous_response_id``)."""
    with own_fleet(
        fleet.env, tmp_path, queues=("inference",), ANTWORT_WEBSOCKET_IDLE_SECONDS="1"
    ) as own:
        marker = f"codex-{uuid.uuid4().hex[:8]}"

        _, answer = codex_exec(own, tmp_path, f"sleep 3 && echo {marker}", websockets=True)

        assert answer.startswith("Tool results: ") and marker in answer
        # the first socket closed while the command ran, the last once Codex was done (a busy
        # machine may make one more gap between two of Codex's messages outlast the second)
        wait_for(lambda: handshakes(own) >= 2, timeout=30, what="Codex's second WebSocket")
        assert requests(own, "POST") == 0  # no fallback to HTTP


def codex_exec(fleet: Fleet, tmp_path: Path, command: str, *, websockets: bool) -> tuple[Path, str]:
    """``codex exec`` against ``fleet``, scripted to run ``command``: its work dir and answer."""
    prompt = f'Do it. [call exec_command {{"cmd": "{command}"}}]'
    done = run_codex(fleet, tmp_path, prompt, websockets=websockets)

    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path / "work", (tmp_path / "answer.txt").read_text()


def run_codex(
    fleet: Fleet,
    tmp_path: Path,
    prompt: str,
    *,
    websockets: bool | None,
    config: str = "",
    resume: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``codex exec prompt`` against ``fleet``, in ``tmp_path / "work"``, its last message to
    ``tmp_path / "answer.txt"``.

    ``config``: more top-level keys of ``config.toml`` (dotted for tables); ``resume``: go on
    with the last session (``codex exec resume --last``), configured as before; ``websockets``:
    the provider's ``supports_websockets``, or None for Codex's own OpenAI provider pointed at
    the fleet (``openai_base_url``; it speaks WebSocket mode).
    """
    home, work = tmp_path / "codex-home", tmp_path / "work"
    if not resume:
        home.mkdir()
        work.mkdir(exist_ok=True)
        provider = (
            BUILTIN_CONFIG.format(base_url=fleet.base_url)
            if websockets is None
            else CONFIG.format(base_url=fleet.base_url, websockets=str(websockets).lower())
        )
        (home / "config.toml").write_text(config + provider)

    return subprocess.run(
        [
            str(CODEX),
            "exec",
            *(["resume", "--last"] if resume else []),
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",  # the test's tmp dir is the sandbox
            "--output-last-message",
            str(tmp_path / "answer.txt"),
            prompt,
        ],
        cwd=work,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home)}
        | {"ANTWORT_API_KEY": "unused", "CODEX_API_KEY": "unused"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )


def handshakes(fleet: Fleet) -> float:
    """WebSocket connections the gateway served to their end so far (its metrics)."""
    return requests(fleet, "GET")


def requests(fleet: Fleet, method: str) -> float:
    """Requests to ``/v1/responses`` by ``method`` the gateway answered so far (its metrics)."""
    samples = scrape(f"{fleet.base_url}/metrics")
    return value(samples, "antwort_http_request_duration_seconds_count", method=method, route=ROUTE)


@needs_codex
def test_codex_view_image_shows_the_model_the_image(
    fleet: Fleet, tmp_path: Path, sim_recorder: Recorder
) -> None:
    marker = f"codex-{uuid.uuid4().hex[:8]}"
    sent = sim_recorder.watch(marker)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "pixel.png").write_bytes(PIXEL_PNG)

    done = run_codex(
        fleet, tmp_path, f'{marker} [call view_image {{"path": "pixel.png"}}]', websockets=False
    )

    assert done.returncode == 0, done.stdout + done.stderr
    answer = (tmp_path / "answer.txt").read_text()
    assert answer.startswith("Tool results: ") and "[image returned:" in answer
    *_, tool, shown = sent[-1]["messages"]
    assert tool["role"] == "tool" and "[image returned:" in tool["content"]
    label, image = shown["content"]
    assert shown["role"] == "user" and label["text"].startswith("From the result of view_image")
    assert image["image_url"]["url"].startswith("data:image/")
    assert image["image_url"].get("detail", "auto") in ("auto", "low", "high")


CATALOG = Path(__file__).parent / "fixtures" / "codex_model_catalog.json"
"""A model catalog for the simulator: ``gpt-5.5``'s entry of Codex 0.171's own catalog, renamed,
its long prompt cut to a line, and ``supports_search_tool: true`` as every built-in entry has it
(a catalog is how a user gets Codex's freeform ``apply_patch`` from another model)."""

PATCH_CONFIG = 'model_catalog_json = "{catalog}"\n'


@needs_codex
@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_edits_a_file_with_its_freeform_apply_patch(
    fleet: Fleet, tmp_path: Path, sim_recorder: Recorder, websockets: bool
) -> None:
    """Codex's file edits: ``apply_patch`` is a ``custom`` tool with a Lark grammar. The model
    is offered it as a function of one string (``input``, the grammar in its description); its
    call reaches Codex as a ``custom_tool_call`` whose ``input`` is the patch, which Codex
    applies here and answers with a ``custom_tool_call_output``."""
    marker = f"codex-{uuid.uuid4().hex[:8]}"
    sent = sim_recorder.watch(marker)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("first\nold line\nlast\n")
    patch = "\n".join(
        [
            "*** Begin Patch",
            "*** Update File: notes.txt",
            "@@",
            " first",
            "-old line",
            f"+{marker}",
            " last",
            "*** Add File: new.txt",
            f"+{marker} too",
            "*** End Patch",
        ]
    )
    prompt = f"{marker} [call apply_patch {json.dumps({'input': patch})}]"

    done = run_codex(
        fleet, tmp_path, prompt, websockets=websockets, config=PATCH_CONFIG.format(catalog=CATALOG)
    )

    assert done.returncode == 0, done.stdout + done.stderr
    work = tmp_path / "work"
    assert (work / "notes.txt").read_text() == f"first\n{marker}\nlast\n"  # Codex applied it
    assert (work / "new.txt").read_text() == f"{marker} too\n"
    offered = {tool["function"]["name"]: tool["function"] for tool in sent[0]["tools"]}
    grammar = offered["apply_patch"]["parameters"]["properties"]["input"]["description"]
    assert "lark grammar" in grammar and "Begin Patch" in grammar
    *_, call, result = sent[-1]["messages"]
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"input": patch}
    assert result["role"] == "tool" and "Success" in result["content"]
    answer = (tmp_path / "answer.txt").read_text()
    assert answer.startswith("Tool results: ") and "notes.txt" in answer


SEARCH_CONFIG = """\
model_catalog_json = "{catalog}"
mcp_optional_startup_grace_ms = 30000
mcp_servers.crm.command = "{python}"
mcp_servers.crm.args = {args}
mcp_servers.crm.env = {{ PYTHONPATH = "{root}" }}
"""
"""The catalog, and the test MCP server over stdio. Codex starts its MCP servers as its first
turn starts, and searches only the tools of the servers ready by then: the grace lets the
server finish starting first."""


@needs_codex
@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_searches_its_deferred_mcp_tools_then_calls_one(
    fleet: Fleet, tmp_path: Path, sim_recorder: Recorder, websockets: bool
) -> None:
    """Codex defers its MCP tools behind ``tool_search`` (run by Codex: ``execution: "client"``).

    The simulator answers a tool result with text, never with a second call, so the deferred
    tool is called in a second turn (``codex exec resume``), whose history Codex sends again
    with the search's call and output: the fleet offers the tools that output loaded. The same
    over WebSocket, where Codex sends its requests as ``response.create`` messages.
    """
    marker = f"codex-{uuid.uuid4().hex[:8]}"
    sent = sim_recorder.watch(marker)
    python, args = stdio_command("crm")
    config = SEARCH_CONFIG.format(catalog=CATALOG, python=python, args=json.dumps(args), root=ROOT)
    search = f'{marker} [call tool_search {{"query": "echo text", "limit": 5}}]'

    found = run_codex(fleet, tmp_path, search, websockets=websockets, config=config)

    assert found.returncode == 0, found.stdout + found.stderr
    offered = [tool["function"]["name"] for tool in sent[0]["tools"]]
    assert "tool_search" in offered and "mcp__crm__echo" not in offered  # deferred
    *_, call, result = sent[-1]["messages"]
    assert call["tool_calls"][0]["function"]["name"] == "tool_search"
    assert json.loads(result["content"]) == {"loaded_tools": ["mcp__crm__echo"]}
    assert "mcp__crm__echo" in [tool["function"]["name"] for tool in sent[-1]["tools"]]

    echo = f'{marker} again [call mcp__crm__echo {{"text": "{marker}"}}]'
    called = run_codex(fleet, tmp_path, echo, websockets=websockets, resume=True)

    assert called.returncode == 0, called.stdout + called.stderr
    answer = (tmp_path / "answer.txt").read_text()
    assert answer.startswith("Tool results: ")  # Codex ran the deferred tool on its server:
    assert f'"result":"crm: {marker}"' in answer  # its echo, as Codex words an MCP result
    *_, call, result = sent[-1]["messages"]
    assert call["tool_calls"][0]["function"]["name"] == "mcp__crm__echo"
