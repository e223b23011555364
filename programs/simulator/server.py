"""The model simulator's HTTP server: an OpenAI-compatible Chat Completions endpoint.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions`` (streaming and not) and
``GET /health``. Anything else is a 404 JSON error; a body that is not a JSON object is a 400.
What to answer is decided by :mod:`programs.simulator.behaviour`; this module only puts it on the
wire, streaming chunks laid out the way vLLM sends them. With ``logprobs: true`` every content
token carries its log probability (:data:`SIM_LOGPROB`) and ``top_logprobs`` alternatives: the
token itself first, then ``<token>#1``, ``<token>#2``… at -1, -2….

It runs on the stdlib ``ThreadingHTTPServer`` with HTTP/1.1 keep-alive: JSON answers carry a
``Content-Length``, streams use chunked transfer encoding with one chunk per SSE event (chunks
due at the same moment share a socket write).
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from programs.simulator.behaviour import AnswerPlan, ErrorPlan, SimConfig, plan_answer

logger = logging.getLogger(__name__)

_ARGUMENT_PIECES = 3
_DONE = b"data: [DONE]\n\n"
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


def _add_chunk(pending: bytearray, data: bytes) -> None:
    """Append ``data`` as one HTTP/1.1 chunk."""
    pending += b"%x\r\n%b\r\n" % (len(data), data)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Completion:
    """The fields every chunk of one completion repeats."""

    id: str
    created: int
    model: str


class SimulatorServer(ThreadingHTTPServer):
    """A threading HTTP server that answers as the model simulator."""

    daemon_threads = True
    request_queue_size = 1024  # the stdlib default (5) resets bursts of connections

    def __init__(self, address: tuple[str, int], config: SimConfig) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.config = config
        self.started = int(time.time())
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log a vanished client quietly; report anything else as the stdlib does."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            logger.debug("simulator client %s went away", client_address)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "antwort-simulator"
    disable_nagle_algorithm = True  # small SSE writes must not wait for delayed ACKs
    timeout = 120.0  # an idle keep-alive connection frees its thread after this
    server: SimulatorServer

    def do_GET(self) -> None:
        if self._read_body() is None:
            return
        path = self.path.partition("?")[0].rstrip("/")
        if path == "/v1/models":
            self._send_json(200, _models_body(self.server.config, self.server.started))
        elif path == "/health":
            self._send_json(200, {"status": "ok"})
        else:
            self._send_error(404, f"No route for GET {path}", "not_found_error")

    def do_POST(self) -> None:
        body = self._read_body()
        if body is None:
            return
        path = self.path.partition("?")[0].rstrip("/")
        if path != "/v1/chat/completions":
            self._send_error(404, f"No route for POST {path}", "not_found_error")
            return
        try:
            request = json.loads(body)
        except ValueError as exc:
            self._send_error(400, f"The body is not valid JSON: {exc}", "invalid_request_error")
            return
        if not isinstance(request, dict):
            self._send_error(400, "The body must be a JSON object", "invalid_request_error")
            return
        self._complete(request)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("simulator %s: " + format, self.address_string(), *args)

    def _complete(self, request: Mapping[str, Any]) -> None:
        config = self.server.config
        plan = plan_answer(request, config)
        if isinstance(plan, ErrorPlan):
            self._send_json(plan.status, plan.body(), headers=plan.headers)
            return
        model = request.get("model")
        completion = _Completion(
            id=f"chatcmpl-sim-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=model if isinstance(model, str) and model else config.models[0],
        )
        top = _top_logprobs(request)
        if request.get("stream") is True:
            options = request.get("stream_options")
            include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
            self._stream(
                stream_chunks(plan, completion, include_usage=include_usage, top_logprobs=top)
            )
            return
        token_chunks = len(plan.reasoning) + len(plan.content) + len(plan.tool_calls)
        delay_ms = plan.ttft_ms + plan.token_delay_ms * max(token_chunks - 1, 0)
        if delay_ms > 0:
            time.sleep(delay_ms / 1000)
        self._send_json(200, completion_body(plan, completion, top_logprobs=top))

    def _stream(self, chunks: Iterator[tuple[float, bytes]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        # One HTTP chunk per SSE event, as vLLM sends them; events that are due at once (no delay
        # between them) leave in one socket write rather than one write each.
        pending = bytearray()
        try:
            for delay, chunk in chunks:
                if delay > 0:
                    self._send(pending)
                    time.sleep(delay)
                _add_chunk(pending, b"data: %b\n\n" % chunk)
            _add_chunk(pending, _DONE)
            pending += b"0\r\n\r\n"
            self._send(pending)
        except (BrokenPipeError, ConnectionResetError):
            logger.debug("simulator client %s left mid-stream", self.address_string())
            self.close_connection = True

    def _send(self, pending: bytearray) -> None:
        if pending:
            self.wfile.write(pending)
            self.wfile.flush()
            pending.clear()

    def _read_body(self) -> bytes | None:
        """Read the request body so the connection can be reused; None if it was refused."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._send_error(411, "Send the body with a Content-Length", "invalid_request_error")
            return None
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._send_error(400, "Invalid Content-Length", "invalid_request_error")
            return None
        return self.rfile.read(length) if length else b""

    def _send_error(self, status: int, message: str, error_type: str) -> None:
        body = {"error": {"message": message, "type": error_type, "param": None, "code": None}}
        self._send_json(status, body)

    def _send_json(
        self, status: int, body: Mapping[str, Any], *, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


def stream_chunks(
    plan: AnswerPlan,
    completion: _Completion,
    *,
    include_usage: bool,
    top_logprobs: int | None = None,
) -> Iterator[tuple[float, bytes]]:
    """Lay out a planned answer as vLLM's Chat Completions stream.

    Args:
        plan: The answer.
        completion: The id, creation time and model every chunk repeats.
        include_usage: Whether to end with a usage chunk (``stream_options.include_usage``).
        top_logprobs: None: no log probabilities; else each content token's, with as many
            alternatives.

    Yields:
        ``(seconds to wait before sending, the chunk as JSON)``, without the final ``[DONE]``.
    """

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _envelope(completion, "chat.completion.chunk", choices=[choice])

    tokens = _TokenChunks(chunk)
    yield plan.ttft_ms / 1000, _json(chunk({"role": "assistant", "content": ""}))
    token_delay = plan.token_delay_ms / 1000
    for i, delta in enumerate(_token_deltas(plan)):
        content = delta.get("content")
        if top_logprobs is not None and isinstance(content, str):
            with_logprobs = chunk(delta)
            with_logprobs["choices"][0]["logprobs"] = {
                "content": [token_logprob(content, top_logprobs)]
            }
            yield (token_delay if i else 0.0), _json(with_logprobs)
            continue
        yield (token_delay if i else 0.0), tokens.encode(delta)
    yield 0.0, _json(chunk({}, plan.finish_reason))
    if include_usage:
        usage = _envelope(completion, "chat.completion.chunk", choices=[], usage=_usage(plan))
        yield 0.0, _json(usage)


def _json(value: Any) -> bytes:
    return _ENCODE(value).encode()


class _TokenChunks:
    """Encodes the chunks of one completion, text tokens through a template.

    A token's chunk differs from the next one's only in its text, so the rest is encoded once per
    field (``content``, ``reasoning_content``) and the text is spliced in: the same bytes as
    encoding the whole chunk, for a fraction of the work (the simulator shares the benchmark's
    CPU with the fleet it drives).
    """

    _MARK = "\ufdd0antwort-sim\ufdd0"
    """A noncharacter-fenced placeholder: no id, model or field name of a chunk contains it."""

    def __init__(self, chunk: Callable[[dict[str, Any]], dict[str, Any]]):
        self._chunk = chunk
        self._templates: dict[str, tuple[bytes, bytes] | None] = {}

    def encode(self, delta: dict[str, Any]) -> bytes:
        """The chunk carrying ``delta``, as JSON."""
        if len(delta) == 1:
            ((field, value),) = delta.items()
            if isinstance(value, str):
                template = self._template(field)
                if template is not None:
                    return b"%b%b%b" % (template[0], _json(value), template[1])
        return _json(self._chunk(delta))

    def _template(self, field: str) -> tuple[bytes, bytes] | None:
        if field not in self._templates:
            parts = _json(self._chunk({field: self._MARK})).split(_json(self._MARK))
            self._templates[field] = (parts[0], parts[1]) if len(parts) == 2 else None
        return self._templates[field]


def _token_deltas(plan: AnswerPlan) -> Iterator[dict[str, Any]]:
    for token in plan.reasoning:
        yield {"reasoning_content": token}
    for token in plan.content:
        yield {"content": token}
    for index, call in enumerate(plan.tool_calls):
        function = {"name": call.name, "arguments": ""}
        yield {
            "tool_calls": [
                {"index": index, "id": call.id, "type": "function", "function": function}
            ]
        }
        for piece in _split(call.arguments, _ARGUMENT_PIECES):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def completion_body(
    plan: AnswerPlan, completion: _Completion, *, top_logprobs: int | None = None
) -> dict[str, Any]:
    """Build the non-streaming ``chat.completion`` object of a planned answer.

    Args:
        plan: The answer.
        completion: The completion's id, creation time and model.
        top_logprobs: None: no log probabilities; else each content token's, with as many
            alternatives.

    Returns:
        The JSON-able response body.
    """
    message = {
        "role": "assistant",
        "content": None if plan.tool_calls else "".join(plan.content),
        "reasoning_content": "".join(plan.reasoning) or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in plan.tool_calls
        ],
    }
    logprobs = (
        None
        if top_logprobs is None or plan.tool_calls
        else {"content": [token_logprob(token, top_logprobs) for token in plan.content]}
    )
    choice = {
        "index": 0,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": plan.finish_reason,
    }
    return _envelope(completion, "chat.completion", choices=[choice], usage=_usage(plan))


def _envelope(completion: _Completion, kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": completion.id,
        "object": kind,
        "created": completion.created,
        "model": completion.model,
        **fields,
    }


def _usage(plan: AnswerPlan) -> dict[str, int]:
    return {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
    }


def _models_body(config: SimConfig, created: int) -> dict[str, Any]:
    models = [
        {"id": model, "object": "model", "created": created, "owned_by": "antwort-simulator"}
        for model in config.models
    ]
    return {"object": "list", "data": models}


def make_server(host: str, port: int, config: SimConfig) -> ThreadingHTTPServer:
    """Bind the model simulator without starting it.

    Args:
        host: Address to listen on.
        port: Port to listen on; 0 picks a free one (read it from ``server.server_address``).
        config: The simulator's settings.

    Returns:
        The bound server; the caller runs ``serve_forever()`` and later ``shutdown()`` and
        ``server_close()``.
    """
    return SimulatorServer((host, port), config)


def serve(host: str, port: int, config: SimConfig) -> None:
    """Run the model simulator in the foreground until interrupted.

    Args:
        host: Address to listen on.
        port: Port to listen on; 0 picks a free one.
        config: The simulator's settings.
    """
    server = make_server(host, port, config)
    bound_port = server.server_address[1]
    logger.info("model simulator (not a real model) listening on http://%s:%d/v1", host, bound_port)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        logger.info("model simulator stopped")
    finally:
        server.server_close()


SIM_LOGPROB = -0.25
"""The log probability the simulator gives every token it answers with."""
MAX_TOP_LOGPROBS = 20


def _top_logprobs(request: Mapping[str, Any]) -> int | None:
    """None unless the request asks for ``logprobs``; then how many alternatives (0–20)."""
    if request.get("logprobs") is not True:
        return None
    top = request.get("top_logprobs")
    return min(max(top, 0), MAX_TOP_LOGPROBS) if isinstance(top, int) else 0


def token_logprob(token: str, top: int) -> dict[str, Any]:
    """A content token's ``logprobs.content`` entry, as vLLM sends it."""

    def entry(text: str, logprob: float) -> dict[str, Any]:
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    alternatives = [entry(f"{token}#{k}", -float(k)) for k in range(1, top)]
    return {
        **entry(token, SIM_LOGPROB),
        "top_logprobs": [entry(token, SIM_LOGPROB)][:top] + alternatives,
    }
