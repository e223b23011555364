"""Built-in internal tools that are safe to offer any model."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from app.tools.base import ToolCall, ToolDefinition, ToolKind, ToolResult

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt, "log": math.log, "exp": math.exp, "sin": math.sin, "cos": math.cos,
    "tan": math.tan, "abs": abs, "round": round, "min": min, "max": max,
}  # fmt: skip
_CONSTANTS = {"pi": math.pi, "e": math.e}
_MAX_EXPONENT = 10_000
_MAX_LENGTH = 500


def evaluate(expression: str) -> float | int:
    """Evaluate arithmetic safely: numbers, + - * / // % **, a few math functions."""
    if len(expression) > _MAX_LENGTH:
        raise ValueError(f"expression longer than {_MAX_LENGTH} characters")
    value: float | int = _eval(ast.parse(expression, mode="eval").body)
    return value


def _eval(node: ast.AST) -> Any:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ValueError("exponent too large")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_eval(arg) for arg in node.args))
    raise ValueError(f"unsupported expression element: {ast.dump(node)[:60]}")


class Calculator:
    """``calculator``: exact, safe arithmetic for the model."""

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name="calculator",
            kind=ToolKind.INTERNAL,
            description="Evaluate arithmetic: + - * / // % **, sqrt, log, sin, pi, e …",
            parameters={
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 2*(3+4)**2"}},
                "required": ["expression"],
            },
            timeout_seconds=5.0,
        )

    def initialize(self) -> None:
        """Nothing to set up."""

    def shutdown(self) -> None:
        """Nothing to release."""

    def execute(self, call: ToolCall) -> ToolResult:
        try:
            expression = str(call.parsed_arguments()["expression"])
            return ToolResult(call_id=call.id, output=str(evaluate(expression)))
        except (
            ValueError,
            KeyError,
            TypeError,
            ZeroDivisionError,
            OverflowError,
            SyntaxError,
        ) as exc:
            return ToolResult(call_id=call.id, output=f"Error: {exc}", is_error=True)


def register_builtins(registry: Any) -> None:
    """Add the built-in tools."""
    registry.register(Calculator())
