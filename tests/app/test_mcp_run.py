"""MCP through the loop in one process: create → turn (list) → tool task → turn, and approvals."""

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from app.aead import MissingSecretError
from app.config import Settings
from app.errors import InvalidRequestError, ServerError
from app.providers.chunks import Chunk, Finish, TextDelta, ToolCallDelta
from app.providers.translate import ModelRequest
from app.responses import create_response
from app.run import RunDeps, advance_response
from app.store import ResponseStore
from app.tool_calls import ToolDeps, run_tool_call
from app.tools.base import ExecutorRegistry
from app.tools.kinds import KindContext
from app.tools.mcp.executor import McpExecutor
from app.tools.mcp.kind import make_mcp_executor
from app.tools.mcp.requests import prepare_mcp_tools
from app.tools.mcp.security import Sealer
from app.tools.mcp.servers import McpServers, load_configured, seal_key
from tests.support.mcp_servers import (
    LIST_AND_CALL_EVENTS,
    RunningServer,
    digest,
    free_port,
    running,
)


class Dispatcher:
    def __init__(self) -> None:
        self.turns: list[tuple[str, int]] = []
        self.tools: list[tuple[str, list[tuple[str, str]], int]] = []

    def enqueue_turn(self, response_id: str, turn: int, *, retry: bool = False) -> None:
        self.turns.append((response_id, turn))

    def enqueue_tools(
        self, response_id: str, calls: Sequence[tuple[str, str]], *, then_turn: int
    ) -> None:
        self.tools.append((response_id, list(calls), then_turn))

    def revoke_response(self, response_id: str, turn: int, call_ids: Sequence[str] = ()) -> None:
        pass


class Model:
    """One scripted answer per model call; records the requests."""

    def __init__(self, *answers: list[Chunk]):
        self.answers = list(answers)
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> Iterator[Chunk]:
        self.requests.append(request)
        yield from self.answers.pop(0)


def calls(name: str, arguments: dict[str, Any]) -> list[Chunk]:
    return [
        ToolCallDelta(index=0, call_id="call_1", name=name, arguments=json.dumps(arguments)),
        Finish(reason="tool_calls"),
    ]


def says(text: str) -> list[Chunk]:
    return [TextDelta(text=text), Finish(reason="stop")]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running("streamable-http", name="unit") as started:
        yield started


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(mcp_allowed_hosts="127.0.0.1", mcp_secret_key="unit-key")


@pytest.fixture
def executor(settings: Settings, store: ResponseStore) -> Iterator[McpExecutor]:
    mcp = make_mcp_executor(KindContext(settings=settings, redis=store.redis, keys=store.keys))
    yield mcp
    mcp.client.close()


class Fleet:
    """The loop's pieces wired in one process."""

    def __init__(self, store: ResponseStore, settings: Settings, executor: McpExecutor):
        self.store, self.settings, self.executor = store, settings, executor
        self.dispatcher = Dispatcher()

    def create(self, **body: Any) -> str:
        body.setdefault("model", "m")
        response, _ = create_response(self.store, self.dispatcher, self.settings, body)
        return response.id

    def run(self, model: Model, rid: str) -> str:
        """Turns and tool tasks until the response stops."""
        deps = RunDeps(
            store=self.store, provider=model, settings=self.settings,
            dispatcher=self.dispatcher, kind_deps={"mcp": self.executor},
        )  # fmt: skip
        tools = ToolDeps(
            store=self.store, executors=ExecutorRegistry([self.executor]), settings=self.settings
        )
        status = advance_response(deps, rid, 0)
        while status == "waiting":
            _, batch, then = self.dispatcher.tools.pop()
            for call_id, queue in batch:
                assert queue == "tools.mcp"
                run_tool_call(tools, rid, call_id)
            status = advance_response(deps, rid, then)
        return status

    def events(self, rid: str) -> list[dict[str, Any]]:
        return [json.loads(e.data) for e in self.store.events_after(rid, -1)]


@pytest.fixture
def fleet(store: ResponseStore, settings: Settings, executor: McpExecutor) -> Fleet:
    return Fleet(store, settings, executor)


def mcp_tool(server: RunningServer | str, **extra: Any) -> dict[str, Any]:
    url = server if isinstance(server, str) else server.url
    return {"type": "mcp", "server_label": "unit", "server_url": url, **extra}


def test_list_call_and_answer(fleet: Fleet, server: RunningServer) -> None:
    rid = fleet.create(input="hi", tools=[mcp_tool(server, require_approval="never")])
    model = Model(calls("echo", {"text": "x"}), says("done"))

    assert fleet.run(model, rid) == "completed"

    output = fleet.store.get(rid).response.output
    assert [i["type"] for i in output] == ["mcp_list_tools", "mcp_call", "message"]
    call = output[1]
    assert (call["status"], call["output"], call["error"]) == ("completed", "unit: x", None)
    offered = {tool["name"] for tool in model.requests[0].tools}
    assert {"echo", "add", "whoami"} <= offered
    seen = [(i["type"], i.get("output")) for i in model.requests[1].items]
    assert seen[-2:] == [("function_call", None), ("function_call_output", "unit: x")]
    types = [e["type"] for e in fleet.events(rid) if "mcp" in e["type"]]
    collapsed = [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]]  # 1+ deltas
    assert collapsed == list(LIST_AND_CALL_EVENTS)


def test_a_listing_leaves_out_what_it_has_not_rather_than_null(
    fleet: Fleet, server: RunningServer
) -> None:
    # As OpenAI's listing: no ``error`` key when the listing worked, no null ``annotations``
    # or ``description`` for a tool the server gave none. The AI SDK's schema refuses a null
    # one ("Invalid JSON response"); the test server's tools have no annotations.
    rid = fleet.create(input="hi", tools=[mcp_tool(server, require_approval="never")])
    assert fleet.run(Model(says("done")), rid) == "completed"

    [listing, _] = fleet.store.get(rid).response.output
    done = [e["item"] for e in fleet.events(rid) if e["type"] == "response.output_item.done"]
    for item in (listing, done[0]):
        assert set(item) == {"id", "type", "server_label", "tools"}
        echo = next(tool for tool in item["tools"] if tool["name"] == "echo")
        assert set(echo) == {"name", "description", "input_schema"}
        assert not [tool for tool in item["tools"] if None in tool.values()]


def test_approval_then_approved_call_in_the_continuation(
    fleet: Fleet, server: RunningServer
) -> None:
    tools = [mcp_tool(server)]  # approval "always" by default
    rid = fleet.create(input="hi", tools=tools)
    assert fleet.run(Model(calls("echo", {"text": "ok"})), rid) == "completed"
    request = fleet.store.get(rid).response.output[-1]
    assert request["type"] == "mcp_approval_request" and request["id"].startswith("mcpr_")
    assert json.loads(request["arguments"]) == {"text": "ok"}
    assert fleet.dispatcher.tools == []

    answer = {"type": "mcp_approval_response", "approval_request_id": request["id"],
              "approve": True}  # fmt: skip
    follow = fleet.create(input=[answer], tools=tools, previous_response_id=rid)
    model = Model(says("fine"))
    assert fleet.run(model, follow) == "completed"
    output = fleet.store.get(follow).response.output
    assert [i["type"] for i in output] == ["mcp_call", "message"]  # not listed again
    assert output[0]["approval_request_id"] == request["id"]
    assert output[0]["output"] == "unit: ok"
    seen = [(i["type"], i.get("call_id")) for i in model.requests[0].items]
    assert seen[-2:] == [("function_call", request["id"]), ("function_call_output", request["id"])]


def test_denied_approval_is_told_to_the_model(fleet: Fleet, server: RunningServer) -> None:
    tools = [mcp_tool(server, require_approval={"always": {"tool_names": ["echo"]}})]
    rid = fleet.create(input="hi", tools=tools)
    fleet.run(Model(calls("echo", {"text": "no"})), rid)
    request = fleet.store.get(rid).response.output[-1]
    answer = {"type": "mcp_approval_response", "approval_request_id": request["id"],
              "approve": False, "reason": "too risky"}  # fmt: skip
    follow = fleet.create(input=[answer], tools=tools, previous_response_id=rid)
    model = Model(says("ok"))
    assert fleet.run(model, follow) == "completed"
    assert [i["type"] for i in fleet.store.get(follow).response.output] == ["message"]
    last = model.requests[0].items[-1]
    assert last["type"] == "function_call_output" and "too risky" in last["output"]
    with pytest.raises(InvalidRequestError, match="answered already"):
        fleet.create(input=[answer], tools=tools, previous_response_id=follow)


def test_approval_response_that_matches_nothing_is_refused(fleet: Fleet) -> None:
    rid = fleet.create(input="hi")
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}
    with pytest.raises(InvalidRequestError, match="does not exist") as caught:
        fleet.create(input=[answer], previous_response_id=rid)
    assert caught.value.param == "input.0.approval_request_id"


def test_headers_are_sealed_not_echoed_and_reach_the_server(
    fleet: Fleet, server: RunningServer
) -> None:
    secret = "tok-unit-93a1"
    tools = [mcp_tool(server, require_approval="never", headers={"X-Test-Token": secret})]
    rid = fleet.create(input="hi", tools=tools)
    stored = fleet.store.get(rid)
    assert stored.response.tools[0]["headers"] is None
    assert stored.extra["mcp_sealed"]["unit"].startswith("v1.")
    fleet.run(Model(calls("whoami", {}), says("k")), rid)
    output = fleet.store.get(rid).response.output
    assert output[1]["output"].startswith(f"token={digest(secret)} ")
    raw = fleet.store.redis.hgetall(fleet.store.keys.record(rid))
    assert all(secret.encode() not in value for value in raw.values())


def test_unreachable_server_is_listed_with_its_error(fleet: Fleet) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    rid = fleet.create(input="hi", tools=[mcp_tool(dead, require_approval="never")])
    model = Model(says("no tools"))
    assert fleet.run(model, rid) == "completed"
    listing = fleet.store.get(rid).response.output[0]
    assert listing["type"] == "mcp_list_tools" and "unreachable" in listing["error"]
    assert "mcp_list_tools.failed" in str([e["type"] for e in fleet.events(rid)])
    assert model.requests[0].tools == []
    note = model.requests[0].items[-1]
    assert note["role"] == "developer" and "unavailable" in note["content"]


def test_requests_are_checked_at_the_gateway(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(mcp_secret_key="k", mcp_allowed_hosts="*.example,10.0.0.0/8")
    fleet = Fleet(store, settings, executor=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="not in the MCP allowlist") as refused:
        fleet.create(input="hi", tools=[mcp_tool("http://127.0.0.1:9/mcp")])
    assert refused.value.param == "tools.0.server_url"
    with pytest.raises(InvalidRequestError, match="needs a server_url"):
        fleet.create(input="hi", tools=[{"type": "mcp", "server_label": "nowhere"}])
    twice = [mcp_tool("https://a.example"), mcp_tool("https://b.example")]
    with pytest.raises(InvalidRequestError, match="Duplicate") as duplicate:
        fleet.create(input="hi", tools=twice)
    assert duplicate.value.param == "tools.1.server_label"


def test_seal_key_falls_back_to_the_secrets_file_never_to_redis(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    keys_before = set(store.redis.keys(f"{store.keys.prefix}*"))

    first = seal_key(settings)

    assert len(first) == 32 and seal_key(settings) == first  # every process: the same
    assert set(store.redis.keys(f"{store.keys.prefix}*")) == keys_before  # nothing in Redis
    assert seal_key(make_settings(mcp_secret_key="set")) == b"set"
    with pytest.raises(MissingSecretError, match="ANTWORT_MCP_SECRET_KEY"):
        seal_key(make_settings(secrets_file=None))


def test_image_results_stay_in_the_item_and_errors_reach_the_model(
    fleet: Fleet, server: RunningServer
) -> None:
    tools = [mcp_tool(server, require_approval="never")]
    rid = fleet.create(input="hi", tools=tools)
    fleet.run(Model(calls("picture", {}), says("seen")), rid)
    call = fleet.store.get(rid).response.output[1]
    assert call["output"].startswith("[image: image/png, ")
    assert call["content"][0]["type"] == "image" and call["content"][0]["data"]

    rid = fleet.create(input="hi", tools=tools)
    model = Model(calls("fail", {"message": "broken"}), says("sorry"))
    assert fleet.run(model, rid) == "completed"
    call = fleet.store.get(rid).response.output[1]
    assert call["status"] == "failed" and call["output"] is None
    assert call["error"]["type"] == "mcp_tool_execution_error"
    seen = model.requests[1].items[-1]
    assert seen["type"] == "function_call_output" and "broken" in seen["output"]
    assert seen["output"].startswith("Error: ")


def test_configured_servers_file(tmp_path: Any, make_settings: Callable[..., Settings]) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "servers": {
                    "docs": {"url": "http://10.0.0.5:9000/sse", "headers": {"K": "v"},
                             "timeout_seconds": 7, "require_approval": "never"},
                    "local": {"command": "python", "args": ["-m", "x"], "env": {"T": "1"}},
                }
            }
        )
    )  # fmt: skip
    settings = make_settings(mcp_servers_file=str(path))
    servers = McpServers(settings, sealer=Sealer(b"k"))
    docs = servers.target_of("docs", None, None)
    assert (docs.transport, docs.headers, docs.timeout_seconds) == ("sse", (("K", "v"),), 7)
    assert docs.is_configured
    local = servers.target_of("local", None, None)
    assert (local.transport, local.command, local.env) == ("stdio", "python", (("T", "1"),))
    declared, sealed = prepare_mcp_tools(
        settings, [{"type": "mcp", "server_label": "docs"}], sealer=lambda: Sealer(b"k")
    )
    assert declared[0]["require_approval"] == "never" and sealed == {}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"servers": {"bad": {}}}))
    with pytest.raises(ServerError, match="exactly one of"):
        load_configured(str(bad))
    with pytest.raises(ServerError, match="is invalid"):
        load_configured(str(tmp_path / "missing.json"))


def test_mcp_executor_starts_without_a_key_and_refuses_only_when_opening(
    store: ResponseStore, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(secrets_file=None)

    executor = make_mcp_executor(KindContext(settings=settings, redis=store.redis, keys=store.keys))

    with pytest.raises(MissingSecretError):
        executor.servers.target_of("s", "https://example.com/mcp", "v1.sealed")


WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}


@pytest.mark.parametrize(
    ("allowed", "choice", "forced"),
    [
        (["echo"], {"type": "mcp", "server_label": "unit"}, "echo"),  # the server's one tool
        (None, {"type": "mcp", "server_label": "unit", "name": "add"}, "add"),
        (["add"], {"type": "mcp"}, "add"),  # the AI SDK's toolName "mcp", the Agents SDK's "mcp"
    ],
)
def test_an_mcp_tool_choice_forces_the_one_tool_it_picks(
    fleet: Fleet,
    server: RunningServer,
    allowed: list[str] | None,
    choice: dict[str, Any],
    forced: str,
) -> None:
    """Before, a forced MCP tool went to the model as ``required`` among every tool: the model
    could call a function instead (``{"type": "mcp"}`` without a label was a 400)."""
    server_tool = mcp_tool(server, require_approval="never", allowed_tools=allowed)
    rid = fleet.create(input="hi", tools=[WEATHER, server_tool], tool_choice=choice)
    arguments = {"text": "x"} if forced == "echo" else {"a": 1, "b": 2}
    model = Model(calls(forced, arguments), says("ok"))

    assert fleet.run(model, rid) == "completed"

    first, second = model.requests
    assert first.tool_choice == {"type": "function", "name": forced}
    assert {tool["name"] for tool in first.tools} >= {"get_weather", forced}
    assert second.tool_choice == "auto"  # forced on the first turn only
    response = fleet.store.get(rid).response
    assert response.tool_choice == choice  # echoed as sent
    assert [item["type"] for item in response.output] == ["mcp_list_tools", "mcp_call", "message"]


def test_an_mcp_tool_choice_picking_several_tools_offers_only_them_that_turn(
    fleet: Fleet, server: RunningServer
) -> None:
    server_tool = mcp_tool(server, require_approval="never", allowed_tools=["echo", "add"])
    choice = {"type": "mcp", "server_label": "unit"}
    rid = fleet.create(input="hi", tools=[WEATHER, server_tool], tool_choice=choice)
    model = Model(calls("add", {"a": 1, "b": 2}), says("ok"))

    assert fleet.run(model, rid) == "completed"

    first, second = model.requests
    assert (sorted(tool["name"] for tool in first.tools), first.tool_choice) == (
        ["add", "echo"],
        "required",
    )
    assert sorted(tool["name"] for tool in second.tools) == ["add", "echo", "get_weather"]
    assert second.tool_choice == "auto"


def test_an_mcp_tool_choice_naming_a_tool_the_server_lacks_forces_nothing(
    fleet: Fleet, server: RunningServer
) -> None:
    choice = {"type": "mcp", "server_label": "unit", "name": "nowhere"}
    rid = fleet.create(input="hi", tools=[WEATHER, mcp_tool(server)], tool_choice=choice)
    model = Model(says("ok"))

    assert fleet.run(model, rid) == "completed"

    assert model.requests[0].tool_choice == "auto"


@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        ([WEATHER], {"type": "mcp"}, "tool_choice"),
        ([WEATHER], {"type": "mcp", "server_label": "unit"}, "tool_choice.server_label"),
        ([WEATHER, "server"], {"type": "mcp", "server_label": "other"}, "tool_choice.server_label"),
    ],
)
def test_an_mcp_tool_choice_without_its_server_is_400(
    fleet: Fleet, server: RunningServer, tools: list[Any], choice: dict[str, Any], param: str
) -> None:
    """Before, a choice naming no declared server forced any tool (a function, here)."""
    declared = [mcp_tool(server) if tool == "server" else tool for tool in tools]

    with pytest.raises(InvalidRequestError) as caught:
        fleet.create(input="hi", tools=declared, tool_choice=choice)

    assert (caught.value.param, caught.value.code) == (param, "invalid_value")
