"""The sandbox kind: the executor with containers in real Redis, the presenter, the catalog."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.config import Settings
from app.errors import InvalidRequestError
from app.protocol import events as ev
from app.store import ResponseStore
from app.tools.base import ToolCall, ToolKind, ToolResult
from app.tools.registry import KINDS
from app.tools.sandbox.executor import ContainerFiles, SandboxExecutor, check_sandbox
from app.tools.sandbox.kind import echo_sandbox_tools
from app.tools.sandbox.presenter import CodeStream, SandboxPresenter
from app.tools.sandbox.runner import Sandbox, SandboxLimits
from app.tools.sandbox.tools import SandboxToolSpec, declared_sandbox_tools, load_sandbox_tools
from programs.simulator.behaviour import AnswerPlan, SimConfig, plan_answer

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")


def code_call(code: str, call_id: str = "ci_1") -> ToolCall:
    return ToolCall(id=call_id, name="code_interpreter", arguments=json.dumps({"code": code}))


@pytest.fixture
def executor(store: ResponseStore) -> SandboxExecutor:
    sandbox = Sandbox(limits=SandboxLimits(timeout_seconds=5), uid_base=62100, uid_count=4)
    files = ContainerFiles(store.redis, store.keys, ttl_seconds=60)
    word_count = SandboxToolSpec(
        name="word_count",
        script="import json, sys\nprint(len(json.load(sys.stdin)['text'].split()))",
    )
    shout = SandboxToolSpec(name="shout", language="bash", script='echo "$TOOL_ARGUMENTS"')
    return SandboxExecutor(sandbox, files, tools={"word_count": word_count, "shout": shout})


def interpreter(container: str = "cntr_test") -> dict[str, object]:
    return {"type": "code_interpreter", "container": container}


@needs_bwrap
def test_executor_keeps_a_containers_files_across_calls(
    executor: SandboxExecutor, store: ResponseStore
) -> None:
    tool = KINDS.definitions([interpreter("cntr_a")])["code_interpreter"]
    first = executor.execute(code_call("open('n.txt', 'w').write('41')"), tool)
    assert not first.is_error and first.output == "(no output)"
    second = executor.execute(code_call("print(int(open('n.txt').read()) + 1)"), tool)
    assert (second.output, second.is_error) == ("42", False)
    other = KINDS.definitions([interpreter("cntr_b")])["code_interpreter"]
    third = executor.execute(code_call("open('n.txt')"), other)
    assert third.is_error and "FileNotFoundError" in third.output
    assert store.redis.ttl(store.keys.container_files("cntr_a")) > 0  # goes with the chain


@needs_bwrap
def test_executor_reports_failures_as_errors(executor: SandboxExecutor) -> None:
    tool = KINDS.definitions([interpreter()])["code_interpreter"]
    result = executor.execute(code_call("import sys; sys.exit(3)"), tool)
    assert result.is_error and result.output.endswith("Error: exit status 3.")
    empty = executor.execute(code_call("   "), tool)
    assert empty.is_error and "no code" in empty.output


@needs_bwrap
def test_executor_runs_operator_tools_with_their_arguments(executor: SandboxExecutor) -> None:
    spec = executor.tools["word_count"]
    call = ToolCall(id="call_1", name="word_count", arguments='{"text": "a b c"}')
    assert executor.execute(call, spec.definition()).output == "3"
    shout = executor.tools["shout"]
    call = ToolCall(id="call_2", name="shout", arguments='{"x": 1}')
    assert executor.execute(call, shout.definition()).output == '{"x": 1}'
    assert executor.can_execute(spec.definition())


def test_code_stream_decodes_code_as_it_arrives() -> None:
    stream = CodeStream()
    pieces = ['{"co', 'de": "print(\\', '"hi\\")\\n', "x = 1\\u00e9", '"}']
    assert "".join(stream.feed(piece) for piece in pieces) == 'print("hi")\nx = 1é'


def test_presenter_shows_code_interpreter_calls_in_place() -> None:
    presenter = SandboxPresenter()
    tool = KINDS.definitions([interpreter("cntr_x")])["code_interpreter"]
    item, events = presenter.started("ci_1", 0, ToolCall(id="c", name="x", arguments=""), tool)
    assert item["type"] == "code_interpreter_call" and item["container_id"] == "cntr_x"
    assert events == [ev.code_interpreter_call_event("in_progress", "ci_1", 0)]
    deltas = presenter.arguments_delta("ci_1", 0, '{"code": "print(1)"}')
    assert deltas == [ev.code_interpreter_code_delta("ci_1", 0, "print(1)")]
    item, events = presenter.finished("ci_1", 0, code_call("print(1)"), tool)
    assert item["status"] == "interpreting" and item["code"] == "print(1)"
    assert [e["type"] for e in events] == [
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
    ]
    assert not presenter.is_answered(item, frozenset())
    output, events = presenter.answered("resp", [item], 0, ToolResult(call_id="ci_1", output="1"))
    assert output[0]["status"] == "completed"
    assert output[0]["outputs"] == [{"type": "logs", "logs": "1"}]
    assert [e["type"] for e in events] == [
        "response.code_interpreter_call.completed",
        "response.output_item.done",
    ]
    viewed = presenter.model_view(output[0], output)
    assert [v["type"] for v in viewed] == ["function_call", "function_call_output"]
    assert viewed[1]["output"] == "1"


def test_presenter_is_registered_for_the_sandbox_kind() -> None:
    tool = KINDS.definitions([interpreter()])["code_interpreter"]
    assert tool.kind == ToolKind.SANDBOX
    assert isinstance(KINDS.presenters.for_tool(tool), SandboxPresenter)
    assert isinstance(
        KINDS.presenters.for_item({"type": "code_interpreter_call"}), SandboxPresenter
    )


def test_echo_resolves_the_chains_container() -> None:
    declared = [{"type": "code_interpreter", "container": {"type": "auto"}}]
    fresh = echo_sandbox_tools(declared)[0]
    assert fresh["container"].startswith("cntr_")
    history = [{"type": "code_interpreter_call", "container_id": "cntr_old"}]
    assert echo_sandbox_tools(declared, history=history)[0]["container"] == "cntr_old"
    named = echo_sandbox_tools([interpreter("cntr_mine")], history=history)
    assert named[0]["container"] == "cntr_mine"
    assert KINDS.model_tools([fresh])[0]["name"] == "code_interpreter"


def test_echo_refuses_what_the_sandbox_does_not_offer() -> None:
    bad = [
        {"type": "code_interpreter", "container": {"type": "auto", "file_ids": ["file_1"]}},
        {
            "type": "code_interpreter",
            "container": {"type": "auto", "network_policy": {"type": "x"}},
        },
        {"type": "code_interpreter", "container": "not an id!"},
        {"type": "sandbox", "name": "nope"},
    ]
    for tool in bad:
        with pytest.raises(InvalidRequestError):
            echo_sandbox_tools([tool])
    spec = SandboxToolSpec(name="word_count", script="print(1)", description="count")
    echoed = echo_sandbox_tools(
        [{"type": "sandbox", "name": "word_count"}], operator_tools={"word_count": spec}
    )
    assert echoed[0]["description"] == "count"
    assert KINDS.definitions(echoed)["word_count"].kind == ToolKind.SANDBOX


def test_allowed_tools_can_name_the_code_interpreter_by_type() -> None:
    choice = {"type": "allowed_tools", "tools": [{"type": "code_interpreter"}]}
    assert KINDS.allowed_names(choice) == frozenset({"code_interpreter"})


def test_simulator_takes_fenced_values_verbatim() -> None:
    code = 'import os\nprint("a  b")\nx=1'
    request = {
        "messages": [{"role": "user", "content": f"use code_interpreter code=```{code}``` now"}],
        "tools": [{"type": "function", "function": KINDS.model_tools([interpreter()])[0]}],
    }
    answer = plan_answer(request, SimConfig())
    assert isinstance(answer, AnswerPlan)
    (call,) = answer.tool_calls
    assert call.name == "code_interpreter" and json.loads(call.arguments) == {"code": code}


@needs_bwrap
def test_operator_tool_files_are_read_and_checked(tmp_path: Path) -> None:
    good = tmp_path / "tools.json"
    good.write_text(json.dumps([{"name": "hi", "script": "print('hi')", "language": "bash"}]))
    assert load_sandbox_tools(str(good))["hi"].language == "bash"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "x", "script": "", "language": "cobol"}]))
    with pytest.raises(ValueError):
        load_sandbox_tools(str(bad))
    assert declared_sandbox_tools(str(bad)) == {}  # the gateway logs it and offers none
    with pytest.raises(SystemExit, match="ANTWORT_SANDBOX_TOOLS_FILE"):
        check_sandbox(Settings(redis_url="redis://x", sandbox_tools_file=str(bad)))
