"""Helpers of the end-to-end tests: spec schemas, bounded polling, raw SSE parsing, tools."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

import httpx
import openai
import openresponses_types
import psutil
import pydantic
import redis
from openai.types.responses import Response

from app.keys import Keys

TERMINAL = frozenset({"completed", "failed", "incomplete", "cancelled", "requires_action"})

CLIENT_FN = {
    "type": "function",
    "name": "get_weather",
    "description": "weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
"""A function tool the client executes (the response pauses for it)."""


def internal(*names: str) -> list[dict[str, Any]]:
    """``internal`` tools by name, as a request declares them."""
    return [{"type": "internal", "name": name} for name in names]


@cache
def event_models() -> dict[str, type[pydantic.BaseModel]]:
    """Event ``type`` → its Open Responses model (every ``*StreamingEvent`` class)."""
    models: dict[str, type[pydantic.BaseModel]] = {}
    for name in dir(openresponses_types):
        if not name.endswith("StreamingEvent"):
            continue
        model = getattr(openresponses_types, name)
        (member,) = list(model.model_fields["type"].annotation)
        models[member.value] = model
    return models


def validate_event(event: dict[str, Any], *, sdk_error_code: bool = True) -> None:
    """The event is one of the spec's and matches its schema."""
    models = event_models()
    assert event["type"] in models, f"not an Open Responses event type: {event['type']}"
    models[event["type"]].model_validate(event)
    if "response" in event:
        validate_response(event["response"], sdk_error_code=sdk_error_code)


def validate_response(response: dict[str, Any], *, sdk_error_code: bool = True) -> None:
    """The response object matches the spec's and the SDK's models.

    ``sdk_error_code=False`` leaves ``error.code`` out of the SDK check only (the SDK types it
    as a closed enum; see ``test_errors_failed_response_error_code_is_known_to_openai_sdk``).
    """
    openresponses_types.ResponseResource.model_validate(response)
    if not sdk_error_code and response.get("error") is not None:
        response = {**response, "error": {**response["error"], "code": "server_error"}}
    Response.model_validate(response)


def plain(model: openai.BaseModel) -> dict[str, Any]:
    """An SDK object as the JSON dict it was built from."""
    return dict(model.to_dict())


def check_sequence(events: list[dict[str, Any]], *, start: int = 0) -> None:
    """Sequence numbers are consecutive from ``start``: each exactly once, in order."""
    numbers = [event["sequence_number"] for event in events]
    assert numbers == list(range(start, start + len(numbers))), numbers


def wait_for_status(
    client: openai.OpenAI, response_id: str, statuses: Iterable[str], timeout: float = 30.0
) -> Response:
    """Poll ``retrieve`` until the response reaches one of ``statuses`` (bounded)."""
    wanted = frozenset(statuses)
    deadline = time.monotonic() + timeout
    response = client.responses.retrieve(response_id)
    while response.status not in wanted:
        assert time.monotonic() < deadline, f"{response_id} stuck in {response.status}"
        time.sleep(0.05)
        response = client.responses.retrieve(response_id)
    return response


def sse_frames(body: str) -> list[tuple[str | None, str]]:
    """``(event, data)`` of each SSE block, comments left out."""
    frames: list[tuple[str | None, str]] = []
    for block in body.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        event = None
        data = []
        for line in lines:
            field, _, value = line.partition(": ")
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        frames.append((event, "\n".join(data)))
    return frames


def raw_events(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON events of a complete SSE body (``[DONE]`` left out).

    A body is complete when ``data: [DONE]`` ends it: a stream cut short is not taken for a
    whole one.
    """
    frames = sse_frames(response.text)
    assert frames and frames[-1] == (None, "[DONE]"), (
        f"the stream did not end with [DONE]: {frames[-1:]}"
    )
    return [json.loads(data) for _, data in frames[:-1]]


def assert_error_body(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is ``status`` with an OpenAI error object; returns the inner error."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    return dict(error)


def tool_runs(counters: redis.Redis, key_prefix: str, call_id: str) -> tuple[int, int]:
    """(started, finished) executions of a ``Counted`` tool's call."""
    started, finished = counters.mget(
        f"{key_prefix}test:runs:{call_id}:started", f"{key_prefix}test:runs:{call_id}:finished"
    )
    return int(started or 0), int(finished or 0)


def wait_until_tool_runs(
    client: openai.OpenAI, counters: redis.Redis, key_prefix: str, response_id: str
) -> str:
    """The call id of the response's first tool call, once it has started on a worker."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        response = client.responses.retrieve(response_id)
        assert response.status not in TERMINAL, response.output
        calls = [item for item in response.output if item.type == "function_call"]
        if calls and tool_runs(counters, key_prefix, calls[0].call_id)[0] == 1:
            return calls[0].call_id
        time.sleep(0.05)
    raise AssertionError("the tool call never started")


def wait_until_turn_stopped(counters: redis.Redis, key_prefix: str, response_id: str) -> None:
    """Until no worker runs a turn of the response (its lease is given back), bounded."""
    lease = Keys(key_prefix).lease(response_id)
    deadline = time.monotonic() + 30
    while counters.exists(lease):
        assert time.monotonic() < deadline, f"a turn of {response_id} is still running"
        time.sleep(0.05)


def wait_for_heartbeat(env: Mapping[str, str], queue: str, pid: int) -> None:
    """Until the worker of process ``pid`` on ``queue`` (``env``: its fleet's) sent a heartbeat.

    A worker a test starts as the rescue is up before the test times a recovery: its start
    (seconds of imports on a loaded machine) is no part of what is timed.
    """
    member = f"{queue}@{socket.gethostname()}.{pid}"
    client = redis.Redis.from_url(env["ANTWORT_REDIS_URL"])
    try:
        deadline = time.monotonic() + 60
        while client.zscore(Keys(env["ANTWORT_KEY_PREFIX"]).workers(queue), member) is None:
            assert time.monotonic() < deadline, f"{member} never sent a heartbeat"
            time.sleep(0.1)
    finally:
        client.close()


def freeze(pid: int) -> list[psutil.Process]:
    """SIGSTOP a process and its children (a worker's tool hosts): from now on it does nothing.

    A death test freezes its victim mid-work, then starts the rescue and waits for its
    heartbeat, then kills the frozen processes (:func:`kill_frozen`). Killed only after the
    rescue's start, a running victim could end its work meanwhile on a busy machine (a rescue
    takes seconds to start there), and the test would find nothing left to rescue.
    """
    victim = psutil.Process(pid)
    frozen = [victim, *victim.children(recursive=True)]
    for proc in frozen:
        proc.send_signal(signal.SIGSTOP)
    return frozen


def kill_frozen(frozen: list[psutil.Process]) -> None:
    """SIGKILL what :func:`freeze` stopped, as a machine that lost power would end them."""
    for proc in frozen:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(frozen, timeout=15)
