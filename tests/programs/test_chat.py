"""``antwort chat``'s view and client tools, rendered into rich's recording console."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
from rich.console import Console

from programs.chat import ChatOptions, ChatSession, Gateway
from programs.chat.tools import client_tool
from programs.chat.view import ChatView


def screen(view: ChatView, width: int = 60) -> list[str]:
    console = Console(record=True, width=width, force_terminal=False)
    console.print(view)
    return [line.rstrip() for line in console.export_text().splitlines()]


def call_done(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    item = {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}
    return {"type": "response.output_item.done", "item": item}


def result_done(call_id: str, output: str) -> dict[str, Any]:
    item = {"type": "function_call_output", "call_id": call_id, "output": output}
    return {"type": "response.output_item.done", "item": item}


def response(status: str, **fields: Any) -> dict[str, Any]:
    return {"id": "resp_1", "status": status, "error": None, **fields}


def test_view_ticks_the_plan_as_steps_finish() -> None:
    view = ChatView()
    view.feed({"type": "response.created", "response": response("queued")})
    view.feed({"type": "antwort:plan", "steps": ["Look it up", "Compute", "Answer"]})
    assert screen(view)[:4] == ["Plan", "○ Look it up", "○ Compute", "○ Answer"]

    view.feed(call_done("c1", "search", '{"q": "x"}'))
    view.feed({"type": "antwort:step.started", "call_id": "c1", "title": "Look it up"})
    running = screen(view)
    assert running[1].endswith(" Look it up") and not running[1].startswith("✔")
    assert running[4].endswith(" Look it up")  # the step, with a spinner

    view.feed(result_done("c1", "found it"))
    view.feed({"type": "antwort:step.completed", "call_id": "c1", "status": "completed"})
    view.feed(call_done("c2", "calculator", '{"expression": "1+1"}'))
    view.feed({"type": "antwort:step.started", "call_id": "c2", "title": "Add the numbers"})
    view.feed(result_done("c2", "boom"))
    view.feed({"type": "antwort:step.completed", "call_id": "c2", "status": "failed"})
    lines = screen(view)
    assert lines[:4] == ["Plan", "✔ Look it up", "✖ Compute", "○ Answer"]
    assert lines[4:8] == ["✔ Look it up", "  │ found it", "✖ Add the numbers", "  │ boom"]

    view.feed({"type": "response.output_text.delta", "item_id": "m1", "delta": "**Two**"})
    view.feed({"type": "response.completed", "response": response("completed")})
    lines = screen(view)
    assert lines[3] == "✔ Answer"
    assert lines[-2:] == ["Two", "✔ completed  resp_1"]  # Markdown: bold without asterisks


def test_view_without_progress_events_derives_titles_and_shortens_results() -> None:
    view = ChatView()
    view.feed(call_done("c1", "calculator", '{"expression": "6*7"}'))
    view.feed(result_done("c1", "line\n" * 10))
    lines = screen(view)
    assert lines[:5] == [
        "✔ calculator: expression=6*7",
        "  │ line",
        "    line",
        "    line…",
        "    (+36 characters: --full-results)",
    ]
    view.full_results = True
    assert len([line for line in screen(view) if line.endswith("line")]) == 10


def test_view_shows_failure_with_the_servers_message() -> None:
    view = ChatView()
    view.feed({"type": "error", "message": "The model did not follow the JSON tool protocol."})
    failed = response("failed", error={"code": "server_error", "message": "it broke"})
    view.feed({"type": "response.failed", "response": failed})
    assert screen(view, width=100)[-1] == "✖ failed: it broke  resp_1"


def test_client_tool_describes_a_function_and_calls_it() -> None:
    def get_time(zone: str, hour24: bool = True) -> dict[str, Any]:
        """The time in a zone.

        More words nobody needs to see.
        """
        if zone == "Mars":
            raise ValueError("no clocks on Mars")
        return {"zone": zone, "hour24": hour24}

    tool = client_tool(get_time)
    definition = tool.definition()
    assert definition["name"] == "get_time"
    assert definition["description"] == "The time in a zone."
    assert definition["parameters"]["required"] == ["zone"]
    assert definition["parameters"]["properties"]["zone"]["type"] == "string"
    assert json.loads(tool.call('{"zone": "UTC"}')) == {"zone": "UTC", "hour24": True}
    assert tool.call("{}").startswith("Error: invalid arguments for get_time:")
    assert tool.call('{"zone": "Mars"}') == "Error: get_time failed: no clocks on Mars"


def test_session_body_chains_prompts_and_continues_with_tool_outputs() -> None:
    session = ChatSession(
        Gateway(client=None),  # type: ignore[arg-type]  # no call is made
        ChatOptions(model="m", protocol="json", internal_tools=("calculator",)),
        Console(),
    )
    first = session._body("hi")
    assert first == {
        "input": "hi",
        "stream": True,
        "background": True,
        "include": ["antwort:progress"],
        "model": "m",
        "tools": [{"type": "internal", "name": "calculator"}],
        "metadata": {"antwort_tool_protocol": "json"},
    }
    session.previous_response_id, session.current_id = "resp_a", "resp_b"
    assert session._body("again")["previous_response_id"] == "resp_a"
    assert session._body([{"type": "function_call_output"}])["previous_response_id"] == "resp_b"


def test_view_takes_results_carried_by_the_call_item_itself() -> None:
    view = ChatView()
    view.feed({"type": "antwort:step.started", "item_id": "mcp_1", "call_id": "c9", "title": "Ask"})
    item = {"type": "mcp_call", "id": "mcp_1", "output": "the answer", "error": None}
    view.feed({"type": "response.output_item.done", "item": item})
    assert screen(view)[:2] == ["✔ Ask", "  │ the answer"]


def test_ctrl_c_between_answers_cancels_nothing() -> None:
    console = Console(record=True, width=80)
    session = ChatSession(Gateway(client=None), ChatOptions(), console)  # type: ignore[arg-type]
    session.current_id = "resp_done"  # the last answer, finished
    session.cancel()  # would fail on the None client if it called the gateway
    assert console.export_text() == ""


class _BrokenStream(httpx.SyncByteStream):
    """An SSE body that breaks off after its events."""

    def __init__(self, events: list[dict[str, Any]]):
        self.events = events

    def __iter__(self) -> Iterator[bytes]:
        for event in self.events:
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
        raise httpx.ReadError("connection reset")


def sse(events: list[dict[str, Any]]) -> bytes:
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return (body + "data: [DONE]\n\n").encode()


def test_session_reattaches_where_a_broken_stream_stopped() -> None:
    first = [
        {"type": "response.created", "sequence_number": 0, "response": response("queued")},
        {"type": "response.in_progress", "sequence_number": 1, "response": response("in_progress")},
    ]
    rest = [
        {"type": "response.output_text.delta", "sequence_number": 2, "item_id": "m", "delta": "Hi"},
        {"type": "response.completed", "sequence_number": 3, "response": response("completed")},
    ]
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url.path}?{request.url.query.decode()}")
        if request.method == "POST":
            return httpx.Response(200, stream=_BrokenStream(first))
        if request.url.params.get("stream") == "true":
            return httpx.Response(200, content=sse(rest))
        return httpx.Response(200, json=response("completed", output=[]))

    client = httpx.Client(transport=httpx.MockTransport(handle), base_url="http://gw/v1")
    console = Console(record=True, width=60)
    session = ChatSession(Gateway(client), ChatOptions(model="m"), console)

    assert session.ask("hello") == "completed"
    assert asked[:2] == [
        "POST /v1/responses?",
        "GET /v1/responses/resp_1?stream=true&starting_after=1",
    ]
    assert "Hi" in console.export_text()
    assert session.previous_response_id == "resp_1"
