"""The OpenAI Agents SDK, unmodified, against the fleet (``OpenAIResponsesModel``).

The simulator calls the function tools named in the last user message, all in one turn, and
answers ``Tool results: …`` once their outputs come back. The SDK's WebSocket transport
(``OpenAIResponsesWSModel``: ``response.create`` frames with ``"stream": true`` on one socket)
runs the same agent.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import openai
import pytest
from agents import (
    Agent,
    HostedMCPTool,
    LocalShellCommandRequest,
    LocalShellTool,
    MCPToolApprovalFunctionResult,
    MCPToolApprovalRequest,
    ModelSettings,
    OpenAIConversationsSession,
    OpenAIResponsesModel,
    OpenAIResponsesWSModel,
    RawResponsesStreamEvent,
    RunConfig,
    Runner,
    ShellTool,
    ToolSearchTool,
    function_tool,
    set_tracing_disabled,
    tool_namespace,
)
from agents.model_settings import MCPToolChoice
from openai import AsyncOpenAI
from pydantic import BaseModel

from tests.e2e.conftest import Fleet
from tests.support.recording import Recorder

T = TypeVar("T")
CALLS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    CALLS.append(f"weather:{city}")
    return f"rain in {city}"


@function_tool
def get_time(city: str) -> str:
    """The local time of a city."""
    CALLS.append(f"time:{city}")
    return f"noon in {city}"


@pytest.fixture(autouse=True)
def _no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)  # nothing is exported anywhere
    CALLS.clear()
    yield


def run(fleet: Fleet, body: Callable[[AsyncOpenAI], Awaitable[T]]) -> T:
    """``body`` with an async SDK client pointed at the fleet, on an event loop of its own."""

    async def main() -> T:
        async with AsyncOpenAI(
            base_url=f"{fleet.base_url}/v1", api_key="test-key", max_retries=0
        ) as client:
            return await body(client)

    return asyncio.run(main())


def agent(
    client: AsyncOpenAI, *, model: OpenAIResponsesModel | None = None, **settings: Any
) -> Agent[Any]:
    return Agent(
        name="assistant",
        instructions="Answer briefly.",
        model=model or OpenAIResponsesModel(model="antwort-sim", openai_client=client),
        tools=[get_weather, get_time],
        model_settings=ModelSettings(**settings),
    )


TRANSPORTS = pytest.mark.parametrize("transport", ["http", "websocket"])


def model_for(transport: str, client: AsyncOpenAI) -> OpenAIResponsesModel:
    """The SDK's model over ``transport``."""
    if transport == "websocket":
        return OpenAIResponsesWSModel(model="antwort-sim", openai_client=client)
    return OpenAIResponsesModel(model="antwort-sim", openai_client=client)


async def closing(model: OpenAIResponsesModel, work: Awaitable[T]) -> T:
    """``work``, then the model's socket closed (a WebSocket model keeps one open)."""
    try:
        return await work
    finally:
        if isinstance(model, OpenAIResponsesWSModel):
            await model.close()


@TRANSPORTS
def test_agents_run_with_two_function_tools_in_one_turn(fleet: Fleet, transport: str) -> None:
    async def body(client: AsyncOpenAI) -> Any:
        model = model_for(transport, client)
        prompt = "Use get_weather and get_time for city=Oslo"
        return await closing(model, Runner.run(agent(client, model=model), prompt))

    result = run(fleet, body)

    assert sorted(CALLS) == ["time:Oslo", "weather:Oslo"]
    first, final = result.raw_responses
    calls = [item for item in first.output if item.type == "function_call"]
    assert [call.name for call in calls] == ["get_weather", "get_time"]
    assert result.final_output == "Tool results: rain in Oslo; noon in Oslo"


@TRANSPORTS
def test_agents_run_streamed_consumes_the_fleet_s_events(fleet: Fleet, transport: str) -> None:
    async def body(client: AsyncOpenAI) -> tuple[Any, list[str]]:
        model = model_for(transport, client)
        streamed = Runner.run_streamed(
            agent(client, model=model), "Use get_weather for city=Bergen"
        )

        async def consume() -> list[str]:
            return [
                event.data.type
                async for event in streamed.stream_events()
                if isinstance(event, RawResponsesStreamEvent)
            ]

        return streamed, await closing(model, consume())

    streamed, types = run(fleet, body)

    assert CALLS == ["weather:Bergen"]
    assert types.count("response.created") == 2  # the call's turn, then the answer's
    assert types.count("response.completed") == 2
    assert "response.function_call_arguments.done" in types
    assert "response.output_text.delta" in types
    assert streamed.final_output == "Tool results: rain in Bergen"


class Forecast(BaseModel):
    city: str
    summary: str


@TRANSPORTS
def test_agents_output_type_is_parsed_from_the_fleet_s_structured_answer(
    fleet: Fleet, client: openai.OpenAI, transport: str
) -> None:
    """``output_type`` asks for ``text.format`` ``json_schema`` (strict); the answer after the
    tool's result is an instance of it (the simulator's, from ``name=value`` in the prompt)."""

    async def body(sdk: AsyncOpenAI) -> Any:
        model = model_for(transport, sdk)
        typed = agent(sdk, model=model).clone(output_type=Forecast)
        return await closing(model, Runner.run(typed, "Use get_weather for city=Oslo summary=wet"))

    result = run(fleet, body)

    assert CALLS == ["weather:Oslo"]
    assert result.final_output == Forecast(city="Oslo", summary="wet")
    stored = client.responses.retrieve(result.last_response_id)
    assert stored.text is not None and stored.text.format is not None
    assert stored.text.format.type == "json_schema" and stored.text.format.strict is True


def test_agents_output_type_holds_on_the_json_tool_protocol(
    fleet: Fleet, client: openai.OpenAI
) -> None:
    """A model without native tool calling (``antwort_tool_protocol: json``) is told the format
    in its prompt and held to it; only the answer is text, so the SDK parses it."""

    async def body(sdk: AsyncOpenAI) -> Any:
        typed = agent(sdk, metadata={"antwort_tool_protocol": "json"}).clone(output_type=Forecast)
        return await Runner.run(typed, "Use get_weather for city=Oslo summary=wet")

    result = run(fleet, body)

    assert CALLS == ["weather:Oslo"]
    assert result.final_output == Forecast(city="Oslo", summary="wet")
    stored = client.responses.retrieve(result.last_response_id)
    assert stored.metadata == {"antwort_tool_protocol": "json"}


@function_tool(defer_loading=True)
def get_tide(port: str) -> str:
    """The next high tide of a port."""
    CALLS.append(f"tide:{port}")
    return f"high tide in {port} at six"


@function_tool(defer_loading=True)
def list_open_orders(customer_id: str) -> str:
    """List open orders for a customer ID."""
    CALLS.append(f"orders:{customer_id}")
    return f"order 7 for {customer_id}"


CRM = tool_namespace(
    name="crm", description="CRM tools for customer lookup.", tools=[list_open_orders]
)


@TRANSPORTS
def test_agents_deferred_tools_are_loaded_by_the_fleets_tool_search_then_called(
    fleet: Fleet, transport: str, sim_recorder: Recorder
) -> None:
    """``ToolSearchTool()`` (OpenAI's hosted search) with a deferred function and a namespace
    (``tool_namespace``) of deferred functions: the model is offered the search alone; its call
    is answered in the fleet (``tool_search_call`` and ``tool_search_output``, ``execution:
    "server"``), and the SDK keeps both items. Then the whole history again (``store=False``):
    the loaded tools are offered, the SDK runs their calls (found by ``namespace``), and the model
    reads the results."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    load = '[call tool_search {"paths": ["crm", "get_tide"]}]'
    use = '[call crm__list_open_orders {"customer_id": "C-1"}] [call get_tide {"port": "Bergen"}]'

    async def body(client: AsyncOpenAI) -> tuple[Any, Any]:
        model = model_for(transport, client)
        deferred = Agent(
            name="assistant",
            model=model,
            tools=[get_tide, *CRM, ToolSearchTool()],
            model_settings=ModelSettings(store=False),
        )
        first = await closing(model, Runner.run(deferred, f"{marker} {load}"))
        history = [*first.to_input_list(), {"role": "user", "content": f"{marker} {use}"}]
        second = await closing(model, Runner.run(deferred, history))
        return first, second

    first, second = run(fleet, body)

    assert [tool["function"]["name"] for tool in sent[0]["tools"]] == ["tool_search"]
    kinds = [item.type for item in first.new_items]
    assert kinds == ["tool_search_call_item", "tool_search_output_item", "message_output_item"]
    loaded = ["crm__list_open_orders", "get_tide"]
    assert first.final_output == f"Tool results: {json.dumps({'loaded_tools': loaded})}"
    offered = [tool["function"]["name"] for tool in sent[1]["tools"]]
    assert sorted(offered) == sorted([*loaded, "tool_search"])
    assert CALLS == ["orders:C-1", "tide:Bergen"]
    calls = [item for item in second.raw_responses[0].output if item.type == "function_call"]
    assert [(call.name, call.namespace) for call in calls] == [
        ("list_open_orders", "crm"),
        ("get_tide", "get_tide"),
    ]
    assert second.final_output == "Tool results: order 7 for C-1; high tide in Bergen at six"


def test_agents_run_chains_with_previous_response_id(fleet: Fleet, client: openai.OpenAI) -> None:
    async def body(sdk: AsyncOpenAI) -> tuple[Any, Any]:
        first = await Runner.run(agent(sdk), "Remember the word kiwi.")
        second = await Runner.run(
            agent(sdk), "Which word?", previous_response_id=first.last_response_id
        )
        return first, second

    first, second = run(fleet, body)

    stored = client.responses.retrieve(second.last_response_id)
    assert stored.previous_response_id == first.last_response_id
    assert second.final_output.startswith("Simulated answer to: Which word?")
    # the chain reached the model: its prompt holds the first turn too
    assert stored.usage is not None and first.raw_responses[0].usage is not None
    assert stored.usage.input_tokens > first.raw_responses[0].usage.input_tokens


def test_agents_stop_on_first_tool_then_a_chained_run_shows_the_model_a_valid_transcript(
    fleet: Fleet, sim_recorder: Recorder
) -> None:
    """``tool_use_behavior="stop_on_first_tool"``: the SDK runs the tool and stops, and never
    sends its output. A next run chained by ``previous_response_id`` leaves that call
    unanswered; the model server gets a ``tool`` message for it all the same (OpenAI's API and
    servers that hold a chat to its template refuse a call no ``tool`` message follows)."""
    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)

    async def body(sdk: AsyncOpenAI) -> tuple[Any, Any]:
        stopping = agent(sdk).clone(tool_use_behavior="stop_on_first_tool")
        first = await Runner.run(stopping, "Use get_weather for city=Quito")
        second = await Runner.run(
            agent(sdk), f"{marker} and then?", previous_response_id=first.last_response_id
        )
        return first, second

    first, second = run(fleet, body)

    assert (CALLS, first.final_output) == (["weather:Quito"], "rain in Quito")
    assert second.final_output.startswith(f"Simulated answer to: {marker} and then?")
    *_, call, result, question = sent[0]["messages"]
    assert call["tool_calls"][0]["function"]["name"] == "get_weather"
    assert result["role"] == "tool" and result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert question["role"] == "user"


def test_agents_run_with_store_false_sends_the_whole_transcript(
    fleet: Fleet, client: openai.OpenAI
) -> None:
    async def body(sdk: AsyncOpenAI) -> Any:
        return await Runner.run(
            agent(sdk, store=False),
            "Use get_time for city=Lima",
            run_config=RunConfig(tracing_disabled=True),
        )

    result = run(fleet, body)

    assert CALLS == ["time:Lima"]
    assert result.final_output == "Tool results: noon in Lima"
    for response in result.raw_responses:
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response.response_id or "")


def test_agents_conversations_session_carries_two_runs(fleet: Fleet, client: openai.OpenAI) -> None:
    async def body(sdk: AsyncOpenAI) -> tuple[str, Any, list[Any]]:
        session = OpenAIConversationsSession(openai_client=sdk)
        await Runner.run(agent(sdk), "My name is Ada.", session=session)
        second = await Runner.run(agent(sdk), "Use get_weather for city=Paris", session=session)
        return session.session_id, second, await session.get_items()

    conversation_id, second, items = run(fleet, body)

    assert conversation_id.startswith("conv_")
    assert second.final_output == "Tool results: rain in Paris"
    texts = [
        part["text"] for item in items if item.get("type") == "message" for part in item["content"]
    ]
    assert len(texts) == 4
    assert (texts[0], texts[2], texts[3]) == (
        "My name is Ada.",
        "Use get_weather for city=Paris",
        "Tool results: rain in Paris",
    )
    assert texts[1].startswith("Simulated answer to: My name is Ada.")
    assert [item["type"] for item in items if item.get("type") != "message"] == [
        "function_call",
        "function_call_output",
    ]
    # the second run's model read the first run from the session
    [first_response, _] = second.raw_responses
    inputs = client.responses.input_items.list(first_response.response_id, order="asc")
    assert [item.type for item in inputs.data][:2] == ["message", "message"]


def test_agents_conversations_session_pops_and_clears(fleet: Fleet, client: openai.OpenAI) -> None:
    async def body(sdk: AsyncOpenAI) -> tuple[str, Any, list[Any]]:
        session = OpenAIConversationsSession(openai_client=sdk)
        await session.add_items([{"role": "user", "content": f"line {i}"} for i in range(25)])
        popped = await session.pop_item()
        remaining = await session.get_items(limit=3)
        conversation_id = session.session_id
        await session.clear_session()
        return conversation_id, popped, remaining

    conversation_id, popped, remaining = run(fleet, body)

    assert popped is not None and popped["content"][0]["text"] == "line 24"
    assert [item["content"][0]["text"] for item in remaining] == ["line 21", "line 22", "line 23"]
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation_id)


def test_agents_run_in_a_server_side_conversation(fleet: Fleet, client: openai.OpenAI) -> None:
    conversation = client.conversations.create(metadata={"by": "agents"})

    async def body(sdk: AsyncOpenAI) -> tuple[Any, Any]:
        first = await Runner.run(
            agent(sdk), "Use get_weather for city=Rome", conversation_id=conversation.id
        )
        second = await Runner.run(agent(sdk), "Thanks!", conversation_id=conversation.id)
        return first, second

    first, second = run(fleet, body)

    assert first.final_output == "Tool results: rain in Rome"
    assert second.final_output.startswith("Simulated answer to: Thanks!")
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
    ]
    for response in [*first.raw_responses, *second.raw_responses]:
        stored = client.responses.retrieve(response.response_id or "")
        assert stored.conversation is not None and stored.conversation.id == conversation.id


LOCAL_MCP: Any = {"type": "mcp", "server_label": "local"}
"""The fleet's configured stdio MCP server (tests/support/mcp_servers.py's tools)."""


def test_agents_hosted_mcp_across_runs_of_the_whole_history(
    fleet: Fleet, sim_recorder: Recorder
) -> None:
    """The SDK's default: no ``previous_response_id``, the whole history as input each run,
    the fleet's ``mcp_list_tools`` and ``mcp_call`` items in it."""

    async def body(client: AsyncOpenAI) -> Any:
        model = OpenAIResponsesModel(model="antwort-sim", openai_client=client)
        tool = HostedMCPTool(tool_config={**LOCAL_MCP, "require_approval": "never"})
        mcp_agent = Agent(name="assistant", model=model, tools=[tool])
        first = await Runner.run(mcp_agent, "use echo text=papaya")
        history = [*first.to_input_list(), {"role": "user", "content": f"{marker} and then?"}]
        return first, await Runner.run(mcp_agent, history)

    marker = uuid.uuid4().hex
    sent = sim_recorder.watch(marker)
    first, second = run(fleet, body)

    assert first.final_output == "Tool results: local: papaya"
    assert second.final_output.startswith(f"Simulated answer to: {marker} and then?")
    messages = sent[0]["messages"]  # the model sees the earlier MCP call and its result
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[2]["content"] == "local: papaya"


def test_agents_deferred_hosted_mcp_server_is_called(fleet: Fleet, client: openai.OpenAI) -> None:
    """``HostedMCPTool(tool_config={…, "defer_loading": True})`` with ``ToolSearchTool()``: the
    server's tools are offered from the start (the fleet's search loads the request's own
    deferred tools, not a server's), and the option is echoed."""

    async def body(client: AsyncOpenAI) -> Any:
        model = OpenAIResponsesModel(model="antwort-sim", openai_client=client)
        config = {**LOCAL_MCP, "require_approval": "never", "defer_loading": True}
        tools = [HostedMCPTool(tool_config=config), ToolSearchTool()]
        return await Runner.run(
            Agent(name="assistant", model=model, tools=tools), "use echo text=fig"
        )

    result = run(fleet, body)

    assert result.final_output == "Tool results: local: fig"
    stored = client.responses.retrieve(result.raw_responses[0].response_id or "")
    [echoed] = [tool for tool in stored.tools if tool.type == "mcp"]
    assert echoed.defer_loading is True


@pytest.mark.parametrize(
    "choice",
    [MCPToolChoice(server_label="local", name="echo"), "mcp"],  # "mcp": {"type": "mcp"}
    ids=["MCPToolChoice", "mcp"],
)
def test_agents_tool_choice_forces_the_hosted_mcp_tool(
    fleet: Fleet, choice: MCPToolChoice | str
) -> None:
    """Beside a function tool, the server's tool is called. Before: ``MCPToolChoice`` went to
    the model as ``required`` among every tool (the simulator called the function), and
    ``"mcp"`` (no label) was a 400."""

    async def body(client: AsyncOpenAI) -> Any:
        model = OpenAIResponsesModel(model="antwort-sim", openai_client=client)
        config = {**LOCAL_MCP, "require_approval": "never", "allowed_tools": ["echo", "add"]}
        forced = Agent(
            name="assistant",
            model=model,
            tools=[get_weather, HostedMCPTool(tool_config=config)],
            model_settings=ModelSettings(tool_choice=choice),
        )
        return await Runner.run(forced, "Go.")

    result = run(fleet, body)

    assert result.final_output == "Tool results: local: sim"
    assert CALLS == []  # the function was not called


def test_agents_hosted_mcp_approval_in_the_whole_history(fleet: Fleet) -> None:
    """An approval the SDK answers itself (``on_approval_request``), sent with the whole
    history: the request item, then the SDK's answer to it."""
    asked: list[str] = []

    def approve(request: MCPToolApprovalRequest) -> MCPToolApprovalFunctionResult:
        asked.append(request.data.name)
        return {"approve": True}

    async def body(client: AsyncOpenAI) -> Any:
        model = OpenAIResponsesModel(model="antwort-sim", openai_client=client)
        config = {**LOCAL_MCP, "require_approval": "always"}
        tool = HostedMCPTool(tool_config=config, on_approval_request=approve)
        return await Runner.run(
            Agent(name="assistant", model=model, tools=[tool]), "use echo text=kiwi"
        )

    result = run(fleet, body)

    assert asked == ["echo"]
    assert result.final_output == "Tool results: local: kiwi"


@TRANSPORTS
def test_agents_context_management_compacts_and_the_next_run_goes_on_from_the_item(
    fleet: Fleet, transport: str
) -> None:
    """``ModelSettings.context_management``: past the threshold the fleet compacts the context
    before the model's next turn; the SDK keeps the ``compaction`` item and sends it back."""
    settings = {"context_management": [{"type": "compaction", "compact_threshold": 5}]}

    async def body(client: AsyncOpenAI) -> tuple[Any, Any]:
        model = model_for(transport, client)
        assistant = agent(client, model=model, **settings)
        first = await closing(model, Runner.run(assistant, "Use get_weather for city=Oslo"))
        later = [*first.to_input_list(), {"role": "user", "content": "And tomorrow?"}]
        model = model_for(transport, client)
        second = await closing(model, Runner.run(agent(client, model=model, **settings), later))
        return first, second

    first, second = run(fleet, body)

    assert CALLS == ["weather:Oslo"]
    raw = [item.raw_item for item in first.new_items]
    kinds = [item["type"] if isinstance(item, dict) else item.type for item in raw]
    # the compaction came before the turn that read the tool's result
    assert kinds == ["function_call", "function_call_output", "compaction", "message"]
    assert any(item.get("type") == "compaction" for item in first.to_input_list())
    assert second.final_output.startswith("Simulated answer to: And tomorrow?")


@TRANSPORTS
def test_agents_local_shell_tool_s_output_continues_the_run(fleet: Fleet, transport: str) -> None:
    """``LocalShellTool``: the SDK runs the command and answers with a ``local_shell_call_output``
    that names the call by ``call_id``. Before, the fleet took only the ``id`` of the typed param:
    400 "Missing required parameter: 'input.2.id'" on the run's second request."""
    ran: list[list[str]] = []

    def execute(request: LocalShellCommandRequest) -> str:
        ran.append(list(request.data.action.command))
        return "hi from the shell"

    async def body(client: AsyncOpenAI) -> Any:
        model = model_for(transport, client)
        shell = Agent(name="assistant", model=model, tools=[LocalShellTool(executor=execute)])
        prompt = 'Go. [call local_shell {"command": ["echo", "hi"]}]'
        return await closing(model, Runner.run(shell, prompt))

    result = run(fleet, body)

    assert result.final_output == "Tool results: hi from the shell"
    assert ran == [["echo", "hi"]]
    assert [type(item).__name__ for item in result.new_items] == [
        "ToolCallItem",
        "ToolCallOutputItem",
        "MessageOutputItem",
    ]


def test_agents_hosted_shell_tool_runs_in_the_fleets_sandbox(fleet: Fleet) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap missing")

    async def body(client: AsyncOpenAI) -> tuple[Any, Any]:
        shell = Agent(
            name="assistant",
            model=OpenAIResponsesModel(model="antwort-sim", openai_client=client),
            tools=[ShellTool(environment={"type": "container_auto"})],
        )
        prompt = 'Go. [call shell {"commands": ["echo 42 > answer.txt; cat answer.txt"]}]'
        first = await Runner.run(shell, prompt)
        again = 'And? [call shell {"commands": ["cat answer.txt"]}]'
        # the whole history sent again (the SDK's default): the same container
        second = await Runner.run(
            shell, [*first.to_input_list(), {"role": "user", "content": again}]
        )
        return first, second

    first, second = run(fleet, body)

    # before: the fleet paused on the call as the client's, and the SDK, which runs no hosted
    # shell, asked again until its max_turns
    assert [type(item).__name__ for item in first.new_items] == [
        "ToolCallItem",
        "ToolCallOutputItem",
        "MessageOutputItem",
    ]
    assert first.final_output == "Tool results: 42 [exit 0]"
    assert second.final_output == "Tool results: 42 [exit 0]"
    assert len(first.raw_responses) == len(second.raw_responses) == 1
