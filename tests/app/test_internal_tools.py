"""The internal tool registry: initialize on worker start, shut down on worker stop."""

import time
from pathlib import Path

import pytest

from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult
from app.tools.internal import Registry, load_registry
from app.tools.internal.builtins import evaluate


def test_registry_leaves_out_a_tool_whose_initialize_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("LIFECYCLE_MARKER_DIR", str(tmp_path))
    registry = load_registry(["tests.support.lifecycle_tools"])

    assert registry.initialize_all() == ["lifecycle_broken"]

    assert registry.get("lifecycle_ok") is not None
    assert registry.get("lifecycle_broken") is None
    assert registry.get("calculator") is not None  # the built-ins are untouched
    assert "lifecycle_broken failed to initialize" in caplog.text
    registry.shutdown_all()
    marks = sorted(p.name.rsplit(".", 1)[0] for p in tmp_path.iterdir())
    assert marks == [
        "lifecycle_broken.init",
        "lifecycle_ok.init",
        "lifecycle_ok.shutdown",  # the left-out tool is not shut down
    ]


def test_registry_shutdown_goes_on_after_a_failing_tool() -> None:
    calls: list[str] = []

    class Tool:
        def __init__(self, name: str, fails: bool) -> None:
            self.name, self.fails = name, fails

        def definition(self) -> ToolDefinition:
            return ToolDefinition(name=self.name, kind=ToolKind.INTERNAL)

        def initialize(self) -> None:
            pass

        def shutdown(self) -> None:
            calls.append(self.name)
            if self.fails:
                raise RuntimeError("boom")

        def execute(self, call: ToolCall) -> ToolResult:
            raise AssertionError

    registry = Registry()
    registry.register(Tool("a", fails=True))
    registry.register(Tool("b", fails=False))

    registry.shutdown_all()

    assert calls == ["a", "b"]


@pytest.mark.parametrize(
    "expression", ["(9**9999)**2999", "9**9999*9**9999*9**9999*9**9999*9**9999", "(2**10000)**100"]
)
def test_calculator_refuses_a_huge_integer_result_before_computing_it(expression: str) -> None:
    started = time.monotonic()

    with pytest.raises(ValueError, match="too large"):
        evaluate(expression)

    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize(
    ("expression", "value"), [("2**100", 2**100), ("9**9999 % 7", 9**9999 % 7), ("-3**3", -27)]
)
def test_calculator_still_computes_big_integers_in_bounds(expression: str, value: int) -> None:
    assert evaluate(expression) == value
