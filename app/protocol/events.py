"""Builders of the streaming events, as dicts without ``sequence_number``.

``sequence_number`` is assigned in exactly one place, the emit script of ``app.events``. Each
builder puts ``type`` first so the serialised event reads naturally.
"""

from __future__ import annotations

from typing import Any

from app.protocol.response import ResponseObject

TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})
RESPONSE_EVENT_BY_STATUS = {
    "completed": "response.completed",
    "requires_action": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}

Event = dict[str, Any]


def response_event(event_type: str, response: ResponseObject) -> Event:
    """``response.created|queued|in_progress|completed|failed|incomplete``.

    The event holds the response object itself: the store encodes it to JSON at once (as
    :meth:`~app.protocol.response.ResponseObject.wire` shows it), never as a dict first; a
    response echoes what its create held (a schema, tools, instructions), megabytes maybe.
    """
    return {"type": event_type, "response": response}


def output_item_added(output_index: int, item: dict[str, Any]) -> Event:
    """``response.output_item.added``."""
    return {"type": "response.output_item.added", "output_index": output_index, "item": item}


def output_item_done(output_index: int, item: dict[str, Any]) -> Event:
    """``response.output_item.done``."""
    return {"type": "response.output_item.done", "output_index": output_index, "item": item}


def content_part_added(
    item_id: str, output_index: int, content_index: int, part: dict[str, Any]
) -> Event:
    """``response.content_part.added``."""
    return {
        "type": "response.content_part.added",
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "part": part,
    }


def content_part_done(
    item_id: str, output_index: int, content_index: int, part: dict[str, Any]
) -> Event:
    """``response.content_part.done``."""
    return {
        "type": "response.content_part.done",
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "part": part,
    }


def output_text_delta(
    item_id: str,
    output_index: int,
    content_index: int,
    delta: str,
    logprobs: list[dict[str, Any]] | None = None,
) -> Event:
    """``response.output_text.delta`` (with the ``logprobs: []`` OpenAI's SDK requires)."""
    return {
        "type": "response.output_text.delta",
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "delta": delta,
        "logprobs": logprobs or [],
    }


def output_text_done(
    item_id: str,
    output_index: int,
    content_index: int,
    text: str,
    logprobs: list[dict[str, Any]] | None = None,
) -> Event:
    """``response.output_text.done``."""
    return {
        "type": "response.output_text.done",
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "text": text,
        "logprobs": logprobs or [],
    }


def reasoning_delta(item_id: str, output_index: int, content_index: int, delta: str) -> Event:
    """``response.reasoning.delta``: raw reasoning text from the provider."""
    return {
        "type": "response.reasoning.delta",
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "delta": delta,
    }


def reasoning_done(item_id: str, output_index: int, content_index: int, text: str) -> Event:
    """``response.reasoning.done``."""
    return {
        "type": "response.reasoning.done",
        "item_id": item_id,
        "output_index": output_index,
        "content_index": content_index,
        "text": text,
    }


def reasoning_summary_part(
    done: bool, item_id: str, output_index: int, summary_index: int, text: str
) -> Event:
    """``response.reasoning_summary_part.added`` (``done`` False, empty text) or ``.done``."""
    return {
        "type": f"response.reasoning_summary_part.{'done' if done else 'added'}",
        "item_id": item_id,
        "output_index": output_index,
        "summary_index": summary_index,
        "part": {"type": "summary_text", "text": text},
    }


def reasoning_summary_text_delta(
    item_id: str, output_index: int, summary_index: int, delta: str
) -> Event:
    """``response.reasoning_summary_text.delta``."""
    return {
        "type": "response.reasoning_summary_text.delta",
        "item_id": item_id,
        "output_index": output_index,
        "summary_index": summary_index,
        "delta": delta,
    }


def reasoning_summary_text_done(
    item_id: str, output_index: int, summary_index: int, text: str
) -> Event:
    """``response.reasoning_summary_text.done``."""
    return {
        "type": "response.reasoning_summary_text.done",
        "item_id": item_id,
        "output_index": output_index,
        "summary_index": summary_index,
        "text": text,
    }


def function_call_arguments_delta(item_id: str, output_index: int, delta: str) -> Event:
    """``response.function_call_arguments.delta``."""
    return {
        "type": "response.function_call_arguments.delta",
        "item_id": item_id,
        "output_index": output_index,
        "delta": delta,
    }


def function_call_arguments_done(
    item_id: str, output_index: int, arguments: str, name: str
) -> Event:
    """``response.function_call_arguments.done``."""
    return {
        "type": "response.function_call_arguments.done",
        "item_id": item_id,
        "output_index": output_index,
        "arguments": arguments,
        "name": name,
    }


def error_event(*, code: str, message: str, error_type: str = "server_error") -> Event:
    """``error``: nested (Open Responses) and flat (OpenAI) at once."""
    return {
        "type": "error",
        "code": code,
        "message": message,
        "param": None,
        "error": {"type": error_type, "code": code, "message": message, "param": None},
    }


MERGEABLE_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.reasoning.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.code_interpreter_call_code.delta",
        "response.mcp_call_arguments.delta",
    }
)


def try_merge(previous: Event, event: Event) -> bool:
    """Fold ``event``'s delta into ``previous`` when both are deltas of the same part.

    A text delta's ``logprobs`` (its tokens') are folded in with its text.
    """
    if event["type"] not in MERGEABLE_DELTAS or previous["type"] != event["type"]:
        return False
    if previous["item_id"] != event["item_id"]:
        return False
    if previous.get("content_index") != event.get("content_index"):
        return False
    previous["delta"] += event["delta"]
    if event.get("logprobs"):  # a new list: ``previous``'s may be shared with its emitter
        previous["logprobs"] = [*previous.get("logprobs", []), *event["logprobs"]]
    return True


# -- vendor extension ``antwort:progress`` (only for requests that ``include`` it) --------------


def plan_event(steps: list[str]) -> Event:
    """``antwort:plan``: the steps the model means to take, in order."""
    return {"type": "antwort:plan", "steps": steps}


def step_started(*, item_id: str, output_index: int, call_id: str, name: str, title: str) -> Event:
    """``antwort:step.started``: a tool call was made; ``title`` says what it does."""
    return {
        "type": "antwort:step.started",
        "item_id": item_id,
        "output_index": output_index,
        "call_id": call_id,
        "name": name,
        "title": title,
    }


def step_completed(*, item_id: str, output_index: int, call_id: str, is_error: bool) -> Event:
    """``antwort:step.completed``: the call's result (``item_id``) is in the output."""
    return {
        "type": "antwort:step.completed",
        "item_id": item_id,
        "output_index": output_index,
        "call_id": call_id,
        "status": "failed" if is_error else "completed",
    }


def code_interpreter_call_event(phase: str, item_id: str, output_index: int) -> Event:
    """``response.code_interpreter_call.in_progress|interpreting|completed``."""
    return {
        "type": f"response.code_interpreter_call.{phase}",
        "item_id": item_id,
        "output_index": output_index,
    }


def code_interpreter_code_delta(item_id: str, output_index: int, delta: str) -> Event:
    """``response.code_interpreter_call_code.delta``: a piece of the code as the model writes it."""
    return {
        "type": "response.code_interpreter_call_code.delta",
        "item_id": item_id,
        "output_index": output_index,
        "delta": delta,
    }


def code_interpreter_code_done(item_id: str, output_index: int, code: str) -> Event:
    """``response.code_interpreter_call_code.done``."""
    return {
        "type": "response.code_interpreter_call_code.done",
        "item_id": item_id,
        "output_index": output_index,
        "code": code,
    }


# -- the hosted shell (OpenAI-only events; emitted only when the sandbox runs a shell call) -----


def shell_call_command_event(
    phase: str, output_index: int, command_index: int, command: str
) -> Event:
    """``response.shell_call_command.added|done``: one command of a shell call."""
    return {
        "type": f"response.shell_call_command.{phase}",
        "output_index": output_index,
        "command_index": command_index,
        "command": command,
    }


def shell_call_command_delta(output_index: int, command_index: int, delta: str) -> Event:
    """``response.shell_call_command.delta``: a piece of one command of a shell call."""
    return {
        "type": "response.shell_call_command.delta",
        "output_index": output_index,
        "command_index": command_index,
        "delta": delta,
    }


def shell_call_output_delta(
    item_id: str, output_index: int, command_index: int, entry: dict[str, Any]
) -> Event:
    """``response.shell_call_output_content.delta``: what one command printed."""
    return {
        "type": "response.shell_call_output_content.delta",
        "item_id": item_id,
        "output_index": output_index,
        "command_index": command_index,
        "delta": {"stdout": entry["stdout"], "stderr": entry["stderr"]},
    }


def shell_call_output_done(
    item_id: str, output_index: int, command_index: int, entry: dict[str, Any]
) -> Event:
    """``response.shell_call_output_content.done``: one command's output and how it ended."""
    return {
        "type": "response.shell_call_output_content.done",
        "item_id": item_id,
        "output_index": output_index,
        "command_index": command_index,
        "output": [entry],
    }


# -- MCP (OpenAI-only events; emitted only when MCP tools run) -------------------------------


def mcp_event(event_type: str, item_id: str, output_index: int) -> Event:
    """``response.mcp_call.in_progress|completed|failed``, ``response.mcp_list_tools.*``."""
    return {"type": event_type, "item_id": item_id, "output_index": output_index}


def mcp_call_arguments_delta(item_id: str, output_index: int, delta: str) -> Event:
    """``response.mcp_call_arguments.delta`` (shaped as the function-call one)."""
    event = function_call_arguments_delta(item_id, output_index, delta)
    return {**event, "type": "response.mcp_call_arguments.delta"}


def mcp_call_arguments_done(item_id: str, output_index: int, arguments: str) -> Event:
    """``response.mcp_call_arguments.done`` (no ``name``: the item has it)."""
    event = function_call_arguments_done(item_id, output_index, arguments, "")
    del event["name"]
    return {**event, "type": "response.mcp_call_arguments.done"}
