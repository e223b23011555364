"""MCP end to end: real MCP servers on loopback, the fleet's workers, the official SDK."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
import redis
from openai.types.responses import Response, ResponseStreamEvent

from tests.e2e.conftest import Fleet
from tests.e2e.helpers import check_sequence, raw_events, wait_for_status
from tests.support.mcp_servers import (
    LIST_AND_CALL_EVENTS,
    RunningServer,
    digest,
    free_port,
    start_server,
)

STREAM_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


@pytest.fixture(scope="module")
def alpha() -> Iterator[RunningServer]:
    server = start_server("streamable-http", name="alpha")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def beta() -> Iterator[RunningServer]:
    server = start_server("streamable-http", name="beta")
    yield server
    server.stop()


def mcp(label: str, server: RunningServer | str, **extra: Any) -> dict[str, Any]:
    url = server if isinstance(server, str) else server.url
    return {"type": "mcp", "server_label": label, "server_url": url, **extra}


def never(label: str, server: RunningServer | str, **extra: Any) -> dict[str, Any]:
    return mcp(label, server, require_approval="never", **extra)


def create(client: openai.OpenAI, text: str, tools: list[dict[str, Any]], **kw: Any) -> Response:
    return client.responses.create(model="antwort-sim", input=text, tools=tools, **kw)  # type: ignore[arg-type]


def of_type(response: Response, kind: str) -> list[Any]:
    return [item for item in response.output if item.type == kind]


def test_mcp_lists_calls_and_answers(client: openai.OpenAI, alpha: RunningServer) -> None:
    response = create(client, "please echo text=hello", [never("alpha", alpha)])
    assert response.status == "completed"
    assert [i.type for i in response.output] == ["mcp_list_tools", "mcp_call", "message"]
    listing, call, _ = response.output
    assert listing.server_label == "alpha" and listing.error is None  # type: ignore[union-attr]
    echo = next(t for t in listing.tools if t.name == "echo")  # type: ignore[union-attr]
    assert echo.input_schema["properties"]["text"]["type"] == "string"  # type: ignore[index]
    assert call.name == "echo" and call.server_label == "alpha"  # type: ignore[union-attr]
    assert json.loads(call.arguments) == {"text": "hello"}  # type: ignore[union-attr]
    assert call.status == "completed" and call.output == "alpha: hello"  # type: ignore[union-attr]
    assert response.output_text == "Tool results: alpha: hello"


def test_mcp_streams_its_events(fleet: Fleet, alpha: RunningServer) -> None:
    body = {
        "model": "antwort-sim",
        "input": "echo text=streamed",
        "tools": [never("alpha", alpha)],
        "stream": True,
    }
    with httpx.stream("POST", f"{fleet.base_url}/v1/responses", json=body, timeout=60) as sse:
        sse.read()
        events = raw_events(sse)
    check_sequence(events)
    for event in events:
        STREAM_EVENT.validate_python(event)
    types = [e["type"] for e in events]
    expected = [*LIST_AND_CALL_EVENTS, "response.completed"]
    # The arguments stream as the model writes them: one delta or several, in order.
    seen = [t for t in types if t in expected]
    collapsed = [t for i, t in enumerate(seen) if i == 0 or t != seen[i - 1]]
    assert collapsed == expected
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["mcp_list_tools", "mcp_call", "message"]
    assert done[1]["output"] == "alpha: streamed"
    deltas = [e["delta"] for e in events if e["type"] == "response.mcp_call_arguments.delta"]
    assert "".join(deltas) == done[1]["arguments"]


def test_mcp_continuation_does_not_list_again(client: openai.OpenAI, alpha: RunningServer) -> None:
    tools = [never("alpha", alpha)]
    first = create(client, "echo text=one", tools)
    second = create(client, "echo text=two", tools, previous_response_id=first.id)
    assert [i.type for i in second.output] == ["mcp_call", "message"]
    assert second.output[0].output == "alpha: two"  # type: ignore[union-attr]


def test_mcp_listing_is_cached_per_worker(client: openai.OpenAI, alpha: RunningServer) -> None:
    tools = [never("alpha", alpha)]
    before = create(client, "list_count", tools)
    after = create(client, "list_count", tools)
    # The second response lists the server again (its own item) from the worker's cache.
    assert of_type(after, "mcp_list_tools")
    assert of_type(before, "mcp_call")[0].output == of_type(after, "mcp_call")[0].output


def test_mcp_list_changed_refreshes_the_cache(client: openai.OpenAI) -> None:
    server = start_server("streamable-http", name="grower")
    try:
        tools = [never("grower", server.url)]
        first = create(client, "grow", tools)
        assert "extra" not in [t.name for t in of_type(first, "mcp_list_tools")[0].tools]
        assert of_type(first, "mcp_call")[0].output == "grown"
        second = create(client, "extra", tools)
        assert "extra" in [t.name for t in of_type(second, "mcp_list_tools")[0].tools]
        assert of_type(second, "mcp_call")[0].output == "extra!"
    finally:
        server.stop()


def test_mcp_allowed_tools_limit_what_the_model_sees(
    client: openai.OpenAI, alpha: RunningServer
) -> None:
    tools = [never("alpha", alpha, allowed_tools={"tool_names": ["add"]})]
    response = create(client, "echo text=x and add a=2 b=3", tools)
    assert [t.name for t in of_type(response, "mcp_list_tools")[0].tools] == ["add"]
    (call,) = of_type(response, "mcp_call")
    assert call.name == "add" and call.output == "5"


def test_mcp_same_tool_name_on_two_servers_is_unambiguous(
    client: openai.OpenAI, alpha: RunningServer, beta: RunningServer
) -> None:
    tools = [never("alpha", alpha), never("beta", beta)]
    response = create(client, "alpha__echo then beta__echo text=b", tools)
    listed = [t.name for t in of_type(response, "mcp_list_tools")[0].tools]
    assert "echo" in listed  # the list item keeps the server's own names
    calls = of_type(response, "mcp_call")
    assert [(c.server_label, c.name, c.output) for c in calls] == [
        ("alpha", "echo", "alpha: b"),
        ("beta", "echo", "beta: b"),
    ]


def test_mcp_sse_and_configured_stdio_servers(client: openai.OpenAI) -> None:
    sse = start_server("sse", name="ssesrv")
    try:
        local = {"type": "mcp", "server_label": "local", "require_approval": "never"}
        response = create(
            client, "viasse__echo and local__echo text=z", [never("viasse", sse.url), local]
        )
    finally:
        sse.stop()
    assert [i.error for i in of_type(response, "mcp_list_tools")] == [None, None]
    calls = of_type(response, "mcp_call")
    assert [c.output for c in calls] == ["ssesrv: z", "local: z"]
    assert response.tools[1].server_url is None  # type: ignore[union-attr]


def test_mcp_approval_approved_runs_the_call(client: openai.OpenAI, alpha: RunningServer) -> None:
    tools = [mcp("alpha", alpha)]  # require_approval defaults to "always", as at OpenAI
    asked = create(client, "echo text=gated", tools)
    assert asked.status == "completed"
    (request,) = of_type(asked, "mcp_approval_request")
    assert request.name == "echo" and json.loads(request.arguments) == {"text": "gated"}
    assert not of_type(asked, "mcp_call")
    answer = [{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}]
    approved = client.responses.create(
        model="antwort-sim",
        input=answer,
        tools=tools,
        previous_response_id=asked.id,  # type: ignore[arg-type]
    )
    (call,) = of_type(approved, "mcp_call")
    assert call.approval_request_id == request.id and call.output == "alpha: gated"
    assert approved.output_text == "Tool results: alpha: gated"


def test_mcp_approval_denied_is_told_to_the_model(
    client: openai.OpenAI, alpha: RunningServer
) -> None:
    tools = [mcp("alpha", alpha, require_approval={"always": {"tool_names": ["echo"]}})]
    asked = create(client, "echo text=nope", tools)
    (request,) = of_type(asked, "mcp_approval_request")
    answer = [
        {
            "type": "mcp_approval_response",
            "approval_request_id": request.id,
            "approve": False,
            "reason": "not today",
        }
    ]
    denied = client.responses.create(
        model="antwort-sim",
        input=answer,
        tools=tools,
        previous_response_id=asked.id,  # type: ignore[arg-type]
    )
    assert not of_type(denied, "mcp_call")
    assert "denied" in denied.output_text and "not today" in denied.output_text


def test_mcp_unmatched_approval_is_400(
    fleet: Fleet, client: openai.OpenAI, alpha: RunningServer
) -> None:
    first = create(client, "echo text=x", [never("alpha", alpha)])
    body = {
        "model": "antwort-sim",
        "previous_response_id": first.id,
        "input": [
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_no", "approve": True}
        ],
    }
    answer = httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "input.0.approval_request_id"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fail message=broken", "broken"),
        ("crash", "Error executing tool crash"),
        ("slow seconds=30", "did not answer within 5 s"),
    ],
)
def test_mcp_tool_errors_are_data_and_the_loop_goes_on(
    client: openai.OpenAI, alpha: RunningServer, text: str, expected: str
) -> None:
    response = create(client, text, [never("alpha", alpha)])
    assert response.status == "completed"
    (call,) = of_type(response, "mcp_call")
    assert call.status == "failed" and call.output is None
    assert expected in json.dumps(call.error.to_dict())
    assert expected in response.output_text
    assert "secret internal detail" not in response.output_text


def test_mcp_server_that_vanishes_mid_call(client: openai.OpenAI) -> None:
    server = start_server("streamable-http", name="ghost")
    try:
        response = create(client, "vanish", [never("ghost", server.url)])
    finally:
        server.stop()
    (call,) = of_type(response, "mcp_call")
    assert call.status == "failed"
    assert response.status == "completed" and "Error" in response.output_text


def test_mcp_unreachable_server_carries_the_error_and_goes_on(client: openai.OpenAI) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    response = create(client, "echo text=x", [never("dead", dead)])
    assert response.status == "completed"
    (listing,) = of_type(response, "mcp_list_tools")
    assert listing.error and "unreachable" in listing.error
    assert listing.tools == []
    assert response.output_text.startswith("Simulated answer")


@pytest.mark.parametrize(
    "url",
    ["http://10.1.2.3/mcp", "http://169.254.169.254/latest", "http://[::1]:9/mcp", "file:///etc"],
)
def test_mcp_server_url_off_the_allowlist_is_400(fleet: Fleet, url: str) -> None:
    body = {"model": "antwort-sim", "input": "hi", "tools": [never("x", url)]}
    answer = httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "tools.0.server_url"


def test_mcp_headers_reach_the_server_and_nothing_else(
    fleet: Fleet, client: openai.OpenAI, alpha: RunningServer, redis_url: str
) -> None:
    token, oauth = "tok-e2e-5f1c9a", "oauth-e2e-77d2b0"
    tools = [never("alpha", alpha, headers={"X-Test-Token": token}, authorization=oauth)]
    response = create(client, "whoami", tools)
    (call,) = of_type(response, "mcp_call")
    assert call.output == f"token={digest(token)} authorization={digest('Bearer ' + oauth)}"
    fetched = client.responses.retrieve(response.id)
    for text in (response.to_json(), fetched.to_json()):
        assert token not in text and oauth not in text
    assert fetched.tools[0].headers is None  # type: ignore[union-attr]
    assert token not in fleet.logs() and oauth not in fleet.logs()
    store = redis.Redis.from_url(redis_url)
    try:
        prefix = fleet.env["ANTWORT_KEY_PREFIX"]
        for key in store.scan_iter(match=f"{prefix}*"):
            kind = store.type(key)
            if kind == b"string":
                dumped = store.get(key) or b""
            elif kind == b"hash":
                dumped = json.dumps(
                    {k.decode(): v.decode() for k, v in store.hgetall(key).items()}
                ).encode()
            elif kind == b"list":
                dumped = b"".join(store.lrange(key, 0, -1))
            elif kind == b"stream":
                dumped = repr(store.xrange(key)).encode()
            else:
                continue
            assert token.encode() not in dumped and oauth.encode() not in dumped, key
    finally:
        store.close()


def test_mcp_eight_parallel_calls_to_one_server(
    client: openai.OpenAI, alpha: RunningServer
) -> None:
    names = [f"nap{i}" for i in range(1, 9)]
    response = create(client, " ".join(names), [never("alpha", alpha)])
    calls = of_type(response, "mcp_call")
    assert [c.name for c in calls] == names
    assert [c.output for c in calls] == ["together"] * 8  # all eight were in flight at once


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "mcp", "server_label": "a", "require_approval": "sometimes"},
         "tools.0.require_approval"),
        ({"type": "mcp", "server_url": "https://example.com/mcp"}, "tools.0.server_label"),
        ({"type": "mcp", "server_label": "unknown"}, "tools.0.server_url"),
        ({"type": "mcp", "server_label": "local", "headers": {"X": "y"}}, "tools.0.headers"),
        ({"type": "mcp", "server_label": "a", "server_url": "https://u:p@example.com/"},
         "tools.0.server_url"),
    ],
)  # fmt: skip
def test_mcp_bad_tool_shapes_are_400(fleet: Fleet, tool: dict[str, Any], param: str) -> None:
    body = {"model": "antwort-sim", "input": "hi", "tools": [tool]}
    answer = httpx.post(f"{fleet.base_url}/v1/responses", json=body, timeout=30)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_mcp_cancel_while_a_call_runs(client: openai.OpenAI, alpha: RunningServer) -> None:
    created = create(client, "slow seconds=4", [never("alpha", alpha)], background=True)
    deadline = time.monotonic() + 30
    running = client.responses.retrieve(created.id)
    while not of_type(running, "mcp_call"):  # the call is on the tools.mcp worker
        assert time.monotonic() < deadline, running.status
        time.sleep(0.05)
        running = client.responses.retrieve(created.id)
    assert of_type(running, "mcp_call")[0].status == "in_progress"

    cancelled = client.responses.cancel(created.id)  # was a 500: KeyError 'call_id'

    assert cancelled.status == "cancelled"
    assert wait_for_status(client, created.id, ["cancelled"]).status == "cancelled"
