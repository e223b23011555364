"""Web search as each client asks for it, on a fleet whose operator backs it with a plugin.

``tests/support/search_tools.py`` declares the ``web_search`` tool type and finds one made-up
page per query. The simulator, told to call a tool without a ``[call …]`` directive, calls it
with ``sim`` for each string argument, so a forced search looks for ``sim``. The clients force
the search by ``tool_choice`` beside a function tool: the ``openai`` SDK and the Agents SDK
(``tool_choice="web_search"``) send ``{"type": "web_search"}``, the AI SDK (``toolChoice``
naming its ``webSearch`` tool) too. Before, that choice was a 400 ("Input should be 'auto',
'required' or 'none'").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import Agent, ModelSettings, Runner, WebSearchTool
from openai import AsyncOpenAI

from tests.e2e.conftest import Fleet
from tests.e2e.own_fleet import own_fleet
from tests.e2e.test_agents_sdk import CALLS, TRANSPORTS, closing, get_weather, model_for, run
from tests.e2e.test_ai_sdk import MODULES, ai_sdk_chat

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
FOUND = "1 page for sim: https://example.com/sim"
"""What the plugin finds for the simulator's query."""


@pytest.fixture(scope="module")
def searching(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A fleet of its own with the web search plugin loaded (the session's has none)."""
    with own_fleet(
        fleet.env,
        tmp_path_factory.mktemp("web-search"),
        ANTWORT_INTERNAL_TOOL_MODULES="tests.support.search_tools",
    ) as own:
        yield own


@pytest.fixture
def client(searching: Fleet) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{searching.base_url}/v1", api_key="test-key", max_retries=0
    ) as sdk:
        yield sdk


@pytest.mark.parametrize("forced", ["web_search", "web_search_preview"])
# The SDK's types lack the choice ``web_search`` its API takes: its stream helper warns, reading
# the echo. Echoed as sent still (the Agents SDK sends it; other clients read it as sent).
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_openai_sdk_tool_choice_forces_the_search(client: openai.OpenAI, forced: str) -> None:
    tools: Any = [WEATHER, {"type": "web_search"}]
    choice: Any = {"type": forced}

    response = client.responses.create(
        model="antwort-sim", input="Go.", tools=tools, tool_choice=choice
    )
    with client.responses.stream(
        model="antwort-sim", input="Go.", tools=tools, tool_choice=choice
    ) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_response()

    for made in (response, streamed):
        search, message = made.output
        assert search.type == "web_search_call" and search.status == "completed"
        assert search.action.type == "search" and search.action.query == "sim"
        assert message.type == "message" and made.output_text == f"Tool results: {FOUND}"
        echoed: Any = made.tool_choice  # a dict where the SDK's types lack it
        assert (echoed["type"] if isinstance(echoed, dict) else echoed.type) == forced
    assert [kind for kind in kinds if kind.startswith("response.web_search_call.")] == [
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
    ]


@TRANSPORTS
def test_agents_sdk_tool_choice_web_search_forces_the_search(
    searching: Fleet, transport: str
) -> None:
    async def body(sdk: AsyncOpenAI) -> Any:
        model = model_for(transport, sdk)
        searcher = Agent(
            name="assistant",
            model=model,
            tools=[get_weather, WebSearchTool()],
            model_settings=ModelSettings(tool_choice="web_search"),
        )
        return await closing(model, Runner.run(searcher, "Go."))

    result = run(searching, body)

    assert result.final_output == f"Tool results: {FOUND}"
    assert CALLS == []  # the function was not called
    [call] = [item for item in result.new_items if type(item).__name__ == "ToolCallItem"]
    assert call.raw_item.type == "web_search_call"


@pytest.mark.skipif(not (MODULES / "@ai-sdk" / "openai").exists(), reason="`make ai-sdk`")
def test_ai_sdk_tool_choice_forces_its_web_search(searching: Fleet, tmp_path: Path) -> None:
    chat = ai_sdk_chat(searching, tmp_path, uuid.uuid4().hex, "websearch-forced")

    assert chat["sent"][0]["tool_choice"] == {"type": "web_search"}
    assert chat["content"] == [
        ["tool-call", "web_search", True],
        ["tool-result", "web_search", True],
        ["text", None, None],
    ]
    assert chat["answer"] == f"Tool results: {FOUND}"
