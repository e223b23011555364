"""OpenAI's hosted shell (``shell`` in a container environment), run by the sandbox kind.

The tool's kind by its environment, its echo and its checks, the call through a real turn (its
items and events in the SDK's types, its call on ``tools.sandbox``), the sandbox executor
running its commands in bubblewrap with the container's files in real Redis, and the result
item.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from openai.types.responses import ResponseInputItemParam, ResponseOutputItem, ResponseStreamEvent

from app.config import Settings
from app.errors import InvalidRequestError, NotFoundError
from app.protocol.request import CreateResponseRequest
from app.responses import create_response
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from app.tools.base import ToolCall, ToolKind, ToolResult
from app.tools.client_calls import ShellCallPresenter
from app.tools.registry import KINDS
from app.tools.sandbox.containers import claim_container, claim_containers
from app.tools.sandbox.executor import ContainerFiles, SandboxExecutor
from app.tools.sandbox.kind import echo_sandbox_tools
from app.tools.sandbox.runner import Sandbox, SandboxLimits
from tests.app.test_client_kinds import call
from tests.support.dispatch import RecordingDispatcher

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")
OUTPUT_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseOutputItem)
STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)
INPUT_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseInputItemParam)


def hosted(container: str = "cntr_sh") -> dict[str, Any]:
    return {
        "type": "shell",
        "environment": {"type": "container_reference", "container_id": container},
    }


def shell_call(*commands: str, call_id: str = "call_1", **options: Any) -> ToolCall:
    return ToolCall(
        id=call_id, name="shell", arguments=json.dumps({"commands": list(commands), **options})
    )


@pytest.fixture
def executor(store: ResponseStore) -> SandboxExecutor:
    sandbox = Sandbox(limits=SandboxLimits(timeout_seconds=5), uid_base=62200, uid_count=4)
    return SandboxExecutor(sandbox, ContainerFiles(store.redis, store.keys, ttl_seconds=60))


def test_a_shell_in_a_container_is_the_sandboxs_and_any_other_the_clients() -> None:
    for tool in (hosted(), {"type": "shell", "environment": {"type": "container_auto"}}):
        assert KINDS.spec_of_tool(tool).name == ToolKind.SANDBOX
    for tool in ({"type": "shell"}, {"type": "shell", "environment": {"type": "local"}}):
        assert KINDS.spec_of_tool(tool).name == ToolKind.SHELL
    definition = KINDS.definitions([hosted("cntr_x")])["shell"]
    assert (definition.kind, definition.options["container_id"]) == (ToolKind.SANDBOX, "cntr_x")
    assert KINDS.queue_of(definition) == "tools.sandbox"
    assert KINDS.is_agentic([hosted()]) and not KINDS.is_agentic([{"type": "shell"}])
    [offered] = KINDS.model_tools([hosted()])
    assert (offered["name"], offered["parameters"]["required"]) == ("shell", ["commands"])
    assert isinstance(KINDS.presenters.for_tool(definition), ShellCallPresenter)
    assert KINDS.model_choice({"type": "shell"}) == {"type": "function", "name": "shell"}


def test_echo_resolves_the_shells_container_as_a_reference() -> None:
    auto = [{"type": "shell", "environment": {"type": "container_auto", "memory_limit": "1g"}}]
    [fresh] = echo_sandbox_tools(auto)
    assert fresh["environment"]["type"] == "container_reference"
    assert fresh["environment"]["container_id"].startswith("cntr_")
    interpreted = [{"type": "code_interpreter_call", "container_id": "cntr_ci"}]
    assert echo_sandbox_tools(auto, history=interpreted)[0]["environment"] == {
        "type": "container_reference",
        "container_id": "cntr_ci",
    }
    shelled = [
        *interpreted,
        {"type": "shell_call", "environment": hosted("cntr_sh")["environment"]},
    ]
    assert echo_sandbox_tools(auto, history=shelled)[0]["environment"]["container_id"] == "cntr_sh"
    [code] = echo_sandbox_tools(
        [{"type": "code_interpreter", "container": {"type": "auto"}}], history=shelled
    )
    assert code["container"] == "cntr_sh"  # the two share the chain's container
    named = {**hosted("cntr_mine"), "allowed_callers": ["direct"]}
    assert echo_sandbox_tools([named], history=shelled) == [named]
    local = {"type": "shell", "environment": {"type": "local"}}
    assert echo_sandbox_tools([local]) == [local]


@pytest.mark.parametrize(
    ("environment", "param"),
    [
        ({"type": "container_auto", "file_ids": ["file_1"]}, "file_ids"),
        ({"type": "container_auto", "network_policy": {"type": "allowlist"}}, "network_policy"),
        ({"type": "container_auto", "skills": [{"type": "skill_reference"}]}, "skills"),
        ({"type": "container_reference"}, "container_id"),
        ({"type": "container_reference", "container_id": "not an id!"}, "container_id"),
    ],
)
def test_echo_refuses_what_the_sandbox_does_not_offer(
    environment: dict[str, Any], param: str
) -> None:
    tools = [{"type": "function", "name": "f"}, {"type": "shell", "environment": environment}]
    with pytest.raises(InvalidRequestError) as caught:
        echo_sandbox_tools(tools)
    assert caught.value.param == f"tools.1.environment.{param}"


def test_an_unknown_environment_is_refused_with_the_request() -> None:
    with pytest.raises(pydantic.ValidationError, match="environment 'type' must be one of"):
        CreateResponseRequest.model_validate(
            {"model": "m", "tools": [{"type": "shell", "environment": {"type": "docker"}}]}
        )


def test_another_tenants_container_is_not_found(store: ResponseStore) -> None:
    claim_container(store.redis, store.keys, "cntr_theirs", "team-a", ttl_seconds=60)
    with pytest.raises(NotFoundError) as caught:
        claim_containers(store.redis, store.keys, [hosted("cntr_theirs")], "team-b", ttl_seconds=60)
    assert caught.value.param == "tools.0.environment.container_id"
    claim_containers(store.redis, store.keys, [hosted("cntr_theirs")], "team-a", ttl_seconds=60)


def test_a_hosted_shell_call_goes_to_the_sandbox_and_is_shown_as_a_shell_call(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    dispatcher = RecordingDispatcher()
    body = {"model": "m", "input": "go", "background": True, "tools": [hosted("cntr_turn")]}
    response, _ = create_response(store, dispatcher, settings, body)
    model = call("shell", {"commands": ["ls"], "timeout_ms": 500})
    deps = RunDeps(store=store, provider=model, settings=settings, dispatcher=dispatcher)

    advance_response(deps, response.id, 0)

    [item] = store.get(response.id).response.output
    assert item["environment"] == {"type": "container_reference", "container_id": "cntr_turn"}
    assert item["action"] == {"commands": ["ls"], "timeout_ms": 500, "max_output_length": None}
    OUTPUT_ITEM.validate_python(item)
    events = [json.loads(raw.data) for raw in store.events_after(response.id, -1)]
    for event in events:
        STREAM_EVENT.validate_python(event)
    shown = [e["type"] for e in events if e.get("output_index") == 0]
    assert shown == [
        "response.output_item.added",
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.output_item.done",
    ]
    commands = [e.get("command") for e in events if e["type"].startswith("response.shell")]
    assert commands == ["", None, "ls"]
    [chord] = dispatcher.chords
    assert chord.calls == [("call_1", "tools.sandbox")]  # the fleet runs it: no pause
    assert store.get(response.id).response.status == "in_progress"


def test_the_result_is_a_shell_call_output_after_the_call() -> None:
    presenter = KINDS.presenters.for_item({"type": "shell_call"})
    definition = KINDS.definitions([hosted()])["shell"]
    item, _ = presenter.finished("sh_1", 0, shell_call("echo hi"), definition)
    entries = [{"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]
    data = {"output": entries, "max_output_length": 100}
    result = ToolResult(call_id="call_1", output="hi\n[exit 0]", data=data)

    output, events = presenter.answered("resp_1", [item], 0, result)

    answer = output[1]
    assert answer["id"].startswith("sho_") and answer["type"] == "shell_call_output"
    assert (answer["output"], answer["max_output_length"]) == (entries, 100)
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
        "response.output_item.done",
    ]
    assert events[0]["item"]["status"] == "in_progress" and events[0]["item"]["output"] == []
    assert events[1]["delta"] == {"stdout": "hi\n", "stderr": ""}
    assert (events[2]["output"], events[2]["command_index"]) == (entries, 0)
    assert events[3]["item"] == answer
    for number, event in enumerate(events):
        STREAM_EVENT.validate_python({**event, "sequence_number": number})
    for shown in output:
        OUTPUT_ITEM.validate_python(shown)
        INPUT_ITEM.validate_python(shown)  # the Agents SDK sends them back as its history
    assert presenter.is_answered(item, frozenset({"call_1"}))
    viewed = KINDS.presenters.model_view(output)
    assert viewed[-1]["output"] == "hi\n[exit 0]"
    failed = ToolResult(call_id="call_1", output="Error: the tool timed out.", is_error=True)
    [_, lost] = presenter.answered("resp_1", [item], 0, failed)[0]
    assert lost["output"] == [
        {
            "stdout": "",
            "stderr": "Error: the tool timed out.",
            "outcome": {"type": "exit", "exit_code": 1},
        }
    ]


@needs_bwrap
def test_commands_run_in_order_in_the_containers_files(
    executor: SandboxExecutor, store: ResponseStore
) -> None:
    tool = KINDS.definitions([hosted("cntr_a")])["shell"]
    assert executor.can_execute(tool)

    result = executor.execute(
        shell_call("echo 41 > n.txt", "cat n.txt; echo oops >&2; exit 3", "kill -9 $$"), tool
    )

    assert [entry["outcome"] for entry in result.data["output"]] == [
        {"type": "exit", "exit_code": 0},
        {"type": "exit", "exit_code": 3},
        {"type": "exit", "exit_code": 137},
    ]
    second = result.data["output"][1]
    assert (second["stdout"], second["stderr"]) == ("41\n", "oops\n")
    assert result.is_error and result.output == "[exit 0]\n41\noops\n[exit 3]\n[exit 137]"
    code = KINDS.definitions([{"type": "code_interpreter", "container": "cntr_a"}])
    read = executor.execute(
        ToolCall(
            id="c", name="code_interpreter", arguments='{"code": "print(open(\'n.txt\').read())"}'
        ),
        code["code_interpreter"],
    )
    assert read.output.strip() == "41"  # the code interpreter sees the shell's files
    assert store.redis.ttl(store.keys.container_files("cntr_a")) > 0


@needs_bwrap
def test_timeout_ms_ends_the_call_and_the_rest_do_not_run(executor: SandboxExecutor) -> None:
    tool = KINDS.definitions([hosted("cntr_t")])["shell"]

    result = executor.execute(shell_call("sleep 30", "echo never", timeout_ms=500), tool)

    assert [entry["outcome"] for entry in result.data["output"]] == [{"type": "timeout"}] * 2
    assert result.is_error and "never" not in result.output
    assert result.data["output"][1]["stderr"] == "Not run: the call's time ran out.\n"


@needs_bwrap
def test_max_output_length_cuts_each_output(executor: SandboxExecutor) -> None:
    tool = KINDS.definitions([hosted("cntr_m")])["shell"]

    result = executor.execute(shell_call("seq 1 1000; seq 1 1000 >&2", max_output_length=6), tool)

    [entry] = result.data["output"]
    assert (entry["stdout"], entry["stderr"]) == ("1\n2\n3\n", "1\n2\n3\n")
    assert result.data["max_output_length"] == 6 and not result.is_error


@needs_bwrap
@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ('{"commands": []}', "no command to run"),
        ('{"commands": ["  "]}', "no command to run"),
        ('{"commands": "ls"}', "must be a list of strings"),
        ('{"commands": [1]}', "must be a list of strings"),
        ("not json", "invalid arguments"),
    ],
)
def test_bad_arguments_are_an_error_the_model_sees(
    executor: SandboxExecutor, arguments: str, said: str
) -> None:
    tool = KINDS.definitions([hosted()])["shell"]

    result = executor.execute(ToolCall(id="call_1", name="shell", arguments=arguments), tool)

    assert result.is_error and said in result.output
    # no entries: the result item says why on stderr
    presenter = KINDS.presenters.for_tool(tool)
    item, _ = presenter.finished(
        "sh_1", 0, ToolCall(id="call_1", name="shell", arguments="{}"), tool
    )
    [_, answer] = presenter.answered("resp_1", [item], 0, result)[0]
    assert said in answer["output"][0]["stderr"]
