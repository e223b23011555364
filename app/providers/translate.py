"""Responses → Chat Completions: items to messages, tools and tool_choice to their chat forms."""

from __future__ import annotations

import json
import operator
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.config import REASONING_EFFORTS
from app.protocol.items import is_turn_break
from app.providers.chunks import Chunk

ChatMessage = dict[str, Any]

MEDIA_FOLLOWS = "see the next user message"
"""Where a tool result's image or file is, as its ``tool`` message says."""

UNANSWERED = "No result: the client sent none for this call."
"""The ``tool`` message of a call the history leaves unanswered (:func:`to_chat_messages`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """Everything one model call needs, provider-neutral."""

    model: str
    instructions: str | None
    items: Sequence[dict[str, Any]]
    """The conversation: previous chain, this response's input, output so far."""
    tools: Sequence[dict[str, Any]] = ()
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    params: dict[str, Any] = field(default_factory=dict)
    """Sampling parameters, already in Chat Completions names."""


class ModelProvider(Protocol):
    """Streams a model's answer (``ChatCompletionsProvider`` in production, fakes in tests)."""

    def stream(self, request: ModelRequest) -> Iterator[Chunk]: ...


def build_chat_body(request: ModelRequest) -> dict[str, Any]:
    """The Chat Completions request body for a streamed call."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": to_chat_messages(request.instructions, request.items),
        "stream": True,
        "stream_options": {"include_usage": True},
        **request.params,
    }
    if request.tools:
        body["tools"] = [to_chat_tool(tool) for tool in request.tools]
        body["tool_choice"] = to_chat_tool_choice(request.tool_choice)
        body["parallel_tool_calls"] = request.parallel_tool_calls
    return body


def encode_json(value: Any) -> str:
    """JSON as httpx writes a request body: compact, UTF-8 as is, no NaN."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_chat_body(request: ModelRequest) -> bytes:
    """:func:`build_chat_body` as the JSON request body.

    The messages of a :class:`PreparedItems` prefix go in as encoded before (then
    ``"messages"`` comes first, the other fields after it in their order).
    """
    body = build_chat_body(request)
    items = request.items
    _, translated = items.translated_prefix() if isinstance(items, PreparedItems) else (0, ())
    if not translated or not isinstance(items, PreparedItems) or items.encoded is None:
        return encode_json(body).encode()
    messages = body.pop("messages")
    head = 1 if request.instructions else 0
    parts = [b'{"messages":[']
    for message in messages[:head]:
        parts += [encode_json(message).encode(), b","]
    parts.append(items.encoded)
    for message in messages[head + len(translated) :]:
        parts += [b",", encode_json(message).encode()]
    parts += [b"],", encode_json(body)[1:].encode()]  # the other fields, past their brace
    return b"".join(parts)


def to_chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Responses function tool as a Chat Completions tool."""
    function: dict[str, Any] = {
        "name": tool["name"],
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
    }
    if tool.get("description"):
        function["description"] = tool["description"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def to_chat_tool_choice(choice: Any) -> Any:
    """Chat Completions knows auto/required/none and one named function; the rest maps there."""
    if isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": choice["name"]}}
    if kind == "allowed_tools":
        return choice.get("mode", "auto")
    return "required"


class PreparedItems(list[dict[str, Any]]):
    """Model items whose first ones come with their chat messages, translated once before.

    ``prefix`` holds the very item objects of the list's start and ``messages`` what
    :func:`to_chat_messages` makes of them; the item after them (if any) is a message not the
    assistant's, where translation starts afresh (no message of the prefix changes after it).
    :func:`to_chat_messages` uses them only while the list still starts with those objects.
    """

    def __init__(
        self,
        items: Sequence[dict[str, Any]],
        *,
        prefix: Sequence[dict[str, Any]] = (),
        messages: Sequence[ChatMessage] = (),
        encoded: bytes | None = None,
    ) -> None:
        super().__init__(items)
        self.prefix = prefix
        self.messages = messages
        self.encoded = encoded
        """``messages`` as :func:`encode_json` writes them, UTF-8, comma-separated (None: none)."""

    def translated_prefix(self) -> tuple[int, Sequence[ChatMessage]]:
        """How many items :attr:`messages` stand for: none unless the list starts with them."""
        count = len(self.prefix)
        if count > len(self) or not all(map(operator.is_, self[:count], self.prefix)):
            return 0, ()
        if count < len(self) and not is_turn_break(self[count]):
            return 0, ()
        return count, self.messages


def to_chat_messages(
    instructions: str | None,
    items: Sequence[dict[str, Any]],
    *,
    after: Sequence[ChatMessage] = (),
) -> list[ChatMessage]:
    """Responses items as chat messages; consecutive function calls share one assistant turn.

    A reasoning item's text goes on the assistant message that follows it, as
    ``reasoning_content``. The images and files of tool results follow the turn's last result,
    in one ``user`` message (a chat ``tool`` message holds text only). Of
    :class:`PreparedItems`, the prefix's messages are taken as translated before.

    A call the history leaves unanswered (a client went on without sending its output) gets a
    ``tool`` message saying so (:data:`UNANSWERED`) before the next message: OpenAI's API, and
    servers that hold a chat to its template, refuse calls that no ``tool`` message follows.
    Its result sent later, after other items, takes that message's place.
    ``after``: the messages ``items`` come after, translated apart (a prepared prefix's, which
    ends before a turn break; ``instructions`` are then its, not these items'): the calls they
    leave unanswered are answered here.
    """
    # only read: ``items`` start with a message of their own, which no call joins
    start, unanswered = _unanswered_calls(after)
    borrowed = after[start:] if unanswered else ()
    messages: list[ChatMessage] = list(borrowed)
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, PreparedItems):
        count, translated = items.translated_prefix()
        messages += translated
        items = items[count:]
    reasoning: list[str] = []
    media: list[dict[str, Any]] = []  # images and files of the results just translated
    unanswered_at: dict[str, int] = {}  # where a call left unanswered here got its placeholder
    for item in items:
        if item.get("type") == "reasoning":
            reasoning += [part.get("text", "") for part in item.get("content") or []]
            continue
        if _ends_the_calls(messages, item):
            unanswered_at |= _answer_unanswered(messages)
        if media and item.get("type") != "function_call_output":
            messages.append({"role": "user", "content": media})
            media = []
        if item.get("type") == "function_call_output" and item["call_id"] in unanswered_at:
            # a result sent after other items (the AI SDK resends the question before it in a
            # conversation): in its call's place, as a chat wants it
            messages[unanswered_at.pop(item["call_id"])] = _tool_message(messages, item, media)
            continue
        if _is_repeated_result(item, messages, after):
            continue  # the AI SDK in a conversation sends each result again at every step
        count = len(messages)
        _append_item(messages, item, media)
        if len(messages) > count and reasoning and messages[-1]["role"] == "assistant":
            # vLLM's slot for it; the caller sends reasoning only to servers that take it
            messages[-1]["reasoning_content"] = "".join(reasoning)
        if len(messages) > count:
            reasoning = []  # reasoning that no assistant message of its turn follows is left out
    if media:
        messages.append({"role": "user", "content": media})
    return messages[len(borrowed) :]


def _is_repeated_result(
    item: dict[str, Any], messages: Sequence[ChatMessage], after: Sequence[ChatMessage]
) -> bool:
    """Whether ``item`` is a result given before, the same, after a message not a result.

    Such a result (its call answered, other messages since) could only come after them,
    which a chat refuses; the model has it already. Read only then: a result normally follows
    its call's message or another result.
    """
    if item.get("type") != "function_call_output" or not messages:
        return False
    if messages[-1]["role"] == "tool" or messages[-1].get("tool_calls"):
        return False
    given = _tool_message(messages, item, [])
    return any(
        message["role"] == "tool"
        and message["tool_call_id"] == given["tool_call_id"]
        and message["content"] == given["content"]
        for message in (*after, *messages)
    )


def _ends_the_calls(messages: Sequence[ChatMessage], item: dict[str, Any]) -> bool:
    """Whether ``item`` comes after the calls of the last assistant message, not among them."""
    kind = item.get("type", "message")
    if kind == "message":
        return True
    # a call joins the assistant message of the calls before it, unless results came between
    return kind == "function_call" and bool(messages) and messages[-1]["role"] == "tool"


def _answer_unanswered(messages: list[ChatMessage]) -> dict[str, int]:
    """A ``tool`` message for each call of the last calling assistant message that has none.

    Returns where each went, by call id: a result that comes later takes its place.
    """
    _, unanswered = _unanswered_calls(messages)
    placed = {}
    for call_id in unanswered:
        placed[call_id] = len(messages)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": UNANSWERED})
    return placed


def _unanswered_calls(messages: Sequence[ChatMessage]) -> tuple[int, list[str]]:
    """The calls of the assistant message the messages end with (then only its results).

    Returns the index of that message and the ids of its calls without a result; no ids when
    every call has one or the messages do not end so.
    """
    at = len(messages)
    while at and messages[at - 1]["role"] == "tool":
        at -= 1
    if not at:
        return 0, []
    answered = {message["tool_call_id"] for message in messages[at:]}
    calls = messages[at - 1].get("tool_calls") or ()
    return at - 1, [call["id"] for call in calls if call["id"] not in answered]


def _append_item(
    messages: list[ChatMessage], item: dict[str, Any], media: list[dict[str, Any]]
) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        messages.append(_message(item))
    elif kind == "function_call":
        _append_tool_call(messages, item)
    elif kind == "function_call_output":
        messages.append(_tool_message(messages, item, media))
    # other items are context the chat API has no slot for.


def _message(item: dict[str, Any]) -> ChatMessage:
    role = "system" if item["role"] == "developer" else item["role"]
    content = item["content"]
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = [_part(part) for part in content]
    if role == "assistant" or all(part["type"] == "text" for part in parts):
        return {"role": role, "content": "".join(part.get("text", "") for part in parts)}
    return {"role": role, "content": parts}


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part["type"]
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal":
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image":
        url = part.get("image_url") or part.get("file_id") or ""
        return {"type": "image_url", "image_url": {"url": url, "detail": _detail(part)}}
    file: dict[str, Any] = {
        key: part[key] for key in ("file_data", "file_id", "filename") if part.get(key)
    }
    if part.get("file_url"):
        file["file_data"] = part["file_url"]
    return {"type": "file", "file": file}


def _detail(part: dict[str, Any]) -> str:
    """An image's ``detail`` in Chat Completions' terms (``auto``, ``low``, ``high``).

    The Responses API adds ``original`` (full resolution; Codex's ``view_image`` sends it),
    which strict servers refuse: ``high`` is the nearest.
    """
    detail = part.get("detail")
    if detail == "original":
        return "high"
    return detail if detail in ("auto", "low", "high") else "auto"


def _tool_message(
    messages: Sequence[ChatMessage], item: dict[str, Any], media: list[dict[str, Any]]
) -> ChatMessage:
    """A result as a ``tool`` message; its images and files go on ``media``.

    A chat ``tool`` message holds text only (OpenAI's API, vLLM and Ollama take no other part
    there), so the result says what it returned, and the parts follow in a ``user`` message
    after the turn's last result (:func:`to_chat_messages`): the model still sees them, and no
    message comes between an assistant's calls and their results.
    """
    call_id = item["call_id"]
    output = item["output"]
    if isinstance(output, str):
        return {"role": "tool", "tool_call_id": call_id, "content": output}
    parts = [part for part in output if isinstance(part, dict)]
    text = "".join(part.get("text", "") for part in parts)
    notes = []
    shown: list[dict[str, Any]] = []
    for part in parts:
        if part.get("type") == "input_image":
            notes.append(f"[image returned: {MEDIA_FOLLOWS}]")
        elif part.get("type") == "input_file":
            name = f"file {part['filename']}" if part.get("filename") else "file"
            notes.append(f"[{name} returned: {MEDIA_FOLLOWS}]")
        else:
            continue
        shown.append(_part(part))
    if shown:
        label = f"From the result of {_call_name(messages, call_id)} ({call_id}):"
        media += [{"type": "text", "text": label}, *shown]
    content = "\n".join([text, *notes] if text else notes)
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _call_name(messages: Sequence[ChatMessage], call_id: str) -> str:
    """The function a call of the assistant's latest tool calls named (else ``a tool``)."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or ():
            if call["id"] == call_id:
                return str(call["function"]["name"])
        if message["role"] == "assistant":
            break
    return "a tool"


def _append_tool_call(messages: list[ChatMessage], item: dict[str, Any]) -> None:
    call = {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": item["arguments"]},
    }
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    elif last is not None and last["role"] == "assistant" and isinstance(last["content"], str):
        last["tool_calls"] = [call]
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def reasoning_effort_param(effort: str | None, accepted: Sequence[str]) -> dict[str, str]:
    """``reasoning_effort`` for a request's ``reasoning.effort``, in the model server's terms.

    ``accepted`` is what the server takes, least effort first (``Settings.reasoning_effort_list``);
    an effort it lacks goes as the nearest it has, the lower of two as near. Nothing without an
    effort or with nothing accepted.
    """
    if effort not in REASONING_EFFORTS or not accepted:
        return {}
    rank = REASONING_EFFORTS.index
    nearest = min(accepted, key=lambda other: (abs(rank(other) - rank(effort)), rank(other)))
    return {"reasoning_effort": nearest}


def chat_params(
    *,
    temperature: float | None,
    top_p: float | None,
    presence_penalty: float | None,
    frequency_penalty: float | None,
    max_output_tokens: int | None,
    top_logprobs: int | None = None,
) -> dict[str, Any]:
    """Sampling parameters in Chat Completions names; unset ones are left to the model server.

    ``top_logprobs``: None, no log probabilities; else the tokens' own and as many alternatives.
    The answer's format is :func:`response_format_param`'s.
    """
    params: dict[str, Any] = {}
    if top_logprobs is not None:
        params["logprobs"] = True
        params["top_logprobs"] = top_logprobs
    for name, value in (
        ("temperature", temperature),
        ("top_p", top_p),
        ("presence_penalty", presence_penalty),
        ("frequency_penalty", frequency_penalty),
        ("max_tokens", max_output_tokens),
    ):
        if value is not None:
            params[name] = value
    return params


def response_format_param(text_format: Mapping[str, Any] | None) -> dict[str, Any]:
    """Chat Completions' ``response_format`` for a ``text.format`` (nothing for plain text)."""
    if text_format and text_format.get("type") == "json_object":
        return {"response_format": {"type": "json_object"}}
    if text_format and text_format.get("type") == "json_schema":
        schema = {"name": text_format.get("name") or "output", "schema": text_format.get("schema")}
        if text_format.get("strict") is not None:
            schema["strict"] = text_format["strict"]
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    return {}
