"""Model servers that differ from the simulator as real ones do: the simulator behind a proxy.

The proxy edits each request on its way to the simulator and the events of each streamed
answer on their way back, as :meth:`ModelProxy.behave` last said, and keeps each exchange as it
passed (:attr:`ModelProxy.exchanges`). The edits here:
:func:`without_tool_choice` (real models sometimes call tools they were told not to),
:func:`every_call_numbered_0` (as Ollama numbers a turn's tool calls),
:func:`openings_numbered_apart` (as SGLang numbers a call's first fragment), :func:`not_streamed`
(a server that answers a request to stream with a whole completion) and
:func:`before_the_finish` (a stream that ends, cleanly, before the model finished) and
:func:`aborted` (vLLM's finish reason for an answer it gave up on). A :class:`Refusal` is
answered instead of the simulator's answer, as a real server refuses a request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from tests.support.serving import serving

Edit = Callable[[dict[str, Any]], dict[str, Any]]
"""A request's JSON body, edited."""
EditEvents = Callable[[list[Any]], list[Any]]
"""An answer's ``data:`` fields in order, edited: chunks as dicts, the last the text ``[DONE]``."""


def unchanged(document: Any) -> Any:
    return document


@dataclass(frozen=True)
class Refusal:
    """An error answer: its HTTP status and JSON body."""

    status: int
    body: dict[str, Any]


class ModelProxy(ThreadingHTTPServer):
    """The simulator behind edits; :attr:`url` is its base URL (``…/v1``)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        self.client = httpx.Client(timeout=60)
        self.edit_request: Edit = unchanged
        self.edit_events: EditEvents = unchanged
        self.refusal: Refusal | None = None
        self.refuses: Callable[[dict[str, Any]], bool] = lambda body: True
        self.exchanges: list[tuple[dict[str, Any], str]] = []
        """Each request the simulator got, with the answer the caller got (its body's text)."""

    def behave(
        self,
        *,
        request: Edit = unchanged,
        events: EditEvents = unchanged,
        refusal: Refusal | None = None,
        refuses: Callable[[dict[str, Any]], bool] = lambda body: True,
    ) -> None:
        """Edit the requests and answers from now on as given (unchanged by default), or answer
        with ``refusal`` every request (or those ``refuses`` picks, by their body)."""
        self.edit_request = request
        self.edit_events = events
        self.refusal = refusal
        self.refuses = refuses


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ModelProxy

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        request = self.server.edit_request(body)
        refusal = self.server.refusal
        if refusal is not None and self.server.refuses(request):
            self._reply(request, refusal.status, "application/json", json.dumps(refusal.body))
            return
        answer = self.server.client.post(f"{self.server.upstream}{self.path}", json=request)
        content = answer.content
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            fields = [line[6:] for line in content.split(b"\n") if line.startswith(b"data: ")]
            events = [
                field.decode() if field == b"[DONE]" else json.loads(field) for field in fields
            ]
            content = b"".join(
                b"data: %s\n\n" % (event if isinstance(event, str) else json.dumps(event)).encode()
                for event in self.server.edit_events(events)
            )
        content_type = answer.headers.get("content-type", "application/json")
        self._reply(request, answer.status_code, content_type, content.decode())

    def _reply(self, request: dict[str, Any], status: int, content_type: str, text: str) -> None:
        self.server.exchanges.append((request, text))  # before the caller has it
        content = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def model_proxy(sim_url: str) -> Iterator[ModelProxy]:
    """Serve a proxy to the simulator in a thread, passing everything unchanged until told."""
    server = ModelProxy(sim_url)
    try:
        with serving(server):
            yield server
    finally:
        server.client.close()


def _without(body: dict[str, Any], name: str) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key != name}


def without_tool_choice(body: dict[str, Any]) -> dict[str, Any]:
    """The request without ``tool_choice``: a model that ignores it."""
    return _without(body, "tool_choice")


def not_streamed(body: dict[str, Any]) -> dict[str, Any]:
    """The request asked not to stream: a server that answers with a whole completion."""
    return {**_without(body, "stream_options"), "stream": False}


def _choices(events: list[Any]) -> Iterator[dict[str, Any]]:
    for event in events:
        yield from event.get("choices") or () if isinstance(event, dict) else ()


def _tool_calls(events: list[Any]) -> Iterator[dict[str, Any]]:
    for choice in _choices(events):
        yield from (choice.get("delta") or {}).get("tool_calls") or ()


def every_call_numbered_0(events: list[Any]) -> list[Any]:
    """Every tool call numbered 0, as Ollama does (ollama/ollama#15457)."""
    for call in _tool_calls(events):
        call["index"] = 0
    return events


def openings_numbered_apart(events: list[Any]) -> list[Any]:
    """Each call's first fragment numbered apart from the rest, as SGLang numbers it by the
    tool's place in the request's ``tools`` (sgl-project/sglang#6310); here, 5 higher."""
    for call in _tool_calls(events):
        if call.get("id"):
            call["index"] += 5
    return events


def before_the_finish(events: list[Any]) -> list[Any]:
    """The answer's events before its finish reason: no finish, no usage, no ``[DONE]``."""
    cut = []
    for event in events:
        if not isinstance(event, dict) or any(
            choice.get("finish_reason") for choice in event.get("choices") or ()
        ):
            break
        cut.append(event)
    return cut


def aborted(events: list[Any]) -> list[Any]:
    """The answer ended with vLLM's finish reason ``abort`` (the request was aborted)."""
    for choice in _choices(events):
        if choice.get("finish_reason"):
            choice["finish_reason"] = "abort"
    return events
