"""A client's JSON schema held against a model's value, its patterns on a linear-time engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.providers.chunks import Finish, TextDelta, ToolCallDelta
from app.providers.json_protocol import JsonToolProtocol
from app.providers.json_schema import schema_mismatch, search
from tests.app.test_json_protocol import ScriptedModel, model_request, run

CATASTROPHIC = r"^(a+)+$"
"""Python's ``re`` backtracks over this for 2**n steps on ``"a" * n + "!"``."""
ATTACK = "a" * 64 + "!"


def _tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "name": "lookup",
        "description": "Look up.",
        "parameters": parameters,
    }


def test_a_backtracking_pattern_is_checked_at_once_and_still_holds() -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": CATASTROPHIC}}}

    assert schema_mismatch(schema, {"code": ATTACK}) == (
        "code",
        f"{ATTACK!r} does not match {CATASTROPHIC!r}",
    )
    assert schema_mismatch(schema, {"code": "aaaa"}) is None


def test_pattern_properties_and_additional_properties_match_keys_on_the_linear_engine() -> None:
    schema = {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "additionalProperties": False,
    }

    assert schema_mismatch(schema, {"aaa": 1}) is None
    assert schema_mismatch(schema, {"aaa": "one"}) == ("aaa", "'one' is not of type 'integer'")
    assert schema_mismatch(schema, {ATTACK: 1}) == (
        "",
        f"Additional properties are not allowed ({ATTACK!r} unexpected)",
    )


def test_unevaluated_properties_beside_pattern_properties_do_not_reach_python_s_re() -> None:
    schema = {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "unevaluatedProperties": False,
    }

    assert schema_mismatch(schema, {ATTACK: 1}) is None  # not held, rather than hung
    assert schema_mismatch(schema, {"aaa": "one"}) == ("aaa", "'one' is not of type 'integer'")


def test_patterns_match_anywhere_as_json_schema_says() -> None:
    assert search("b", "abc") is True
    assert search("^b", "abc") is False
    assert search(r"^\d{3}-\d{4}$", "555-0100") is True


def test_a_pattern_the_linear_engine_does_not_take_holds_nothing() -> None:
    schema = {"type": "string", "pattern": r"^(?!admin).*$"}  # look-ahead

    assert search(r"^(?!admin).*$", "admin") is None
    assert schema_mismatch(schema, "admin") is None
    assert schema_mismatch({"type": "string", "pattern": "(a"}, "a") is None  # broken schema


def test_a_model_s_call_against_a_backtracking_pattern_is_repaired_not_hung() -> None:
    tool = _tool(
        {"type": "object", "properties": {"code": {"type": "string", "pattern": CATASTROPHIC}}}
    )
    call = {"type": "tool_request", "tool": {"name": "lookup", "args": {"code": ATTACK}}}
    fixed = {"type": "tool_request", "tool": {"name": "lookup", "args": {"code": "aaa"}}}
    model = ScriptedModel(json.dumps(call), json.dumps(fixed))

    chunks = run(JsonToolProtocol(model, needs_plan=False), model_request(tool))

    assert len(model.requests) == 2
    assert "does not match" in model.requests[1].items[-1]["content"]
    [delta] = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert json.loads(delta.arguments) == {"code": "aaa"}
    assert not [c for c in chunks if isinstance(c, TextDelta)]
    assert chunks[-1] == Finish(reason="tool_calls")


@pytest.mark.parametrize(
    "draft",
    ["http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2020-12/schema"],
)
def test_each_draft_s_pattern_keywords_run_on_the_linear_engine(draft: str) -> None:
    schema = {"$schema": draft, "type": "string", "pattern": CATASTROPHIC}

    assert schema_mismatch(schema, ATTACK) == ("", f"{ATTACK!r} does not match {CATASTROPHIC!r}")
