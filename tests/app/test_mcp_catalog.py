"""Which MCP tools the model sees, under which names, with which approval policy."""

from typing import Any

import pytest

from app.tools.base import ToolKind
from app.tools.mcp.catalog import (
    alias,
    allowed_tool_names,
    mcp_definitions,
    model_names,
    needs_approval,
    unlisted_servers,
)
from app.tools.registry import KINDS


def listing(label: str, *names: str, error: str | None = None) -> dict[str, Any]:
    tools = [
        {"name": n, "description": f"{n} tool", "input_schema": {"type": "object"}} for n in names
    ]
    return {"id": f"mcpl_{label}", "type": "mcp_list_tools", "server_label": label,
            "tools": tools, "error": error}  # fmt: skip


def server(label: str, **extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, "server_url": f"https://{label}.example/mcp",
            **extra}  # fmt: skip


def test_names_shared_by_two_servers_get_their_label() -> None:
    names = model_names({"a": listing("a", "echo", "add"), "b": listing("b", "echo", "x.y")})
    assert names == {
        ("a", "echo"): "a__echo",
        ("a", "add"): "add",
        ("b", "echo"): "b__echo",
        ("b", "x.y"): "x_y",
    }


def test_definitions_offer_listed_allowed_tools_by_name_and_alias() -> None:
    tools = [server("a", allowed_tools=["add"], require_approval="never"), server("b")]
    items = [listing("a", "echo", "add"), listing("b", "echo")]
    found = mcp_definitions(tools, items, {"a": "sealed-a"})
    # b's echo keeps its label: a also lists an echo (even though a's is not allowed here)
    assert set(found) == {"add", alias("a", "add"), "b__echo", alias("b", "echo")}
    add = found["add"]
    assert add.kind == ToolKind.MCP and add.mcp is not None
    assert add.mcp.server_label == "a" and add.mcp.sealed_headers == "sealed-a"
    assert add.mcp.needs_approval is False
    echo = found["b__echo"].mcp
    assert echo is not None and echo.needs_approval is True and echo.sealed_headers is None


def test_failed_listing_offers_nothing_and_later_success_wins() -> None:
    tools = [server("a", require_approval="never")]
    assert mcp_definitions(tools, [listing("a", error="down")]) == {}
    later = mcp_definitions(tools, [listing("a", "old"), listing("a", "new")])
    assert set(later) == {"new", alias("a", "new")}


@pytest.mark.parametrize(
    ("allowed", "expected"),
    [(None, None), (["a"], {"a"}), ({"tool_names": ["b"]}, {"b"}), ({"read_only": True}, None)],
)
def test_allowed_tool_names(allowed: Any, expected: set[str] | None) -> None:
    found = allowed_tool_names(allowed)
    assert (None if found is None else set(found)) == expected


def test_read_only_allowed_tools_filter_by_annotation() -> None:
    tools = [server("a", allowed_tools={"read_only": True}, require_approval="never")]
    item = listing("a", "look", "write")
    item["tools"][0]["annotations"] = {"readOnlyHint": True}
    assert set(mcp_definitions(tools, [item])) == {"look", alias("a", "look")}


@pytest.mark.parametrize(
    ("policy", "name", "gated"),
    [
        (None, "x", True),
        ("always", "x", True),
        ("never", "x", False),
        ({"never": {"tool_names": ["x"]}}, "x", False),
        ({"never": {"tool_names": ["x"]}}, "y", True),
        ({"always": {"tool_names": ["x"]}, "never": {"tool_names": ["y"]}}, "y", False),
        ({"never": {"read_only": True}}, "ro", False),
    ],
)
def test_require_approval_policies(policy: Any, name: str, gated: bool) -> None:
    tool = {"name": name, "annotations": {"readOnlyHint": name == "ro"}}
    assert needs_approval(policy, tool) is gated


def test_servers_are_listed_once_per_chain() -> None:
    tools = [server("a"), server("b"), server("c")]
    history = [listing("a", "x"), listing("c", error="down")]
    output = [listing("b", error="down")]
    # a: listed in the chain; b: this response tried already; c: failed before, so try again
    assert [s["server_label"] for s in unlisted_servers(tools, history, output)] == ["c"]


def test_catalog_merges_mcp_tools_with_declared_ones() -> None:
    tools = [
        {"type": "function", "name": "echo", "parameters": None},
        server("a", require_approval="never"),
    ]
    items = [listing("a", "echo", "add")]
    found = KINDS.definitions(tools, items)
    assert found["echo"].kind == ToolKind.FUNCTION  # a declared function keeps its name
    assert found[alias("a", "echo")].kind == ToolKind.MCP
    offered = KINDS.model_tools(tools, items)
    assert [t["name"] for t in offered] == ["echo", "add"]
    assert all(t["type"] == "function" for t in offered)
    assert KINDS.is_agentic([server("a")]) and not KINDS.is_agentic([tools[0]])


def test_allowed_tools_choice_may_name_an_mcp_server() -> None:
    tools = [server("a", require_approval="never")]
    add = KINDS.definitions(tools, [listing("a", "add")])["add"]
    by_server = {"type": "allowed_tools", "tools": [{"type": "mcp", "server_label": "a"}]}
    other = {"type": "allowed_tools", "tools": [{"type": "mcp", "server_label": "b"}]}
    assert KINDS.is_allowed(add, frozenset(), by_server)
    assert not KINDS.is_allowed(add, frozenset(), other)
    assert KINDS.is_allowed(add, frozenset({"add"}), "auto")
