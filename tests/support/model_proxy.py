"""Model servers that differ from the simulator as real ones do: the simulator behind a proxy.

The proxy edits each request on its way to the simulator and each streamed chunk on its way
back. :func:`disobedient_model` drops ``tool_choice`` (real models sometimes call tools they
were told not to); :func:`ollama_numbered_model` numbers every tool call 0, as Ollama does.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

Edit = Callable[[dict[str, Any]], dict[str, Any]]


def _unchanged(document: dict[str, Any]) -> dict[str, Any]:
    return document


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, request: Edit, chunk: Edit) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.client = httpx.Client(timeout=60)
        self.edit_request = request
        self.edit_chunk = chunk


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        answer = self.server.client.post(
            f"{self.server.upstream}{self.path}", json=self.server.edit_request(body)
        )
        content = answer.content
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            content = b"\n".join(self._edited(line) for line in content.split(b"\n"))
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def _edited(self, line: bytes) -> bytes:
        if not line.startswith(b"data: {"):
            return line
        return b"data: " + json.dumps(self.server.edit_chunk(json.loads(line[6:]))).encode()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def proxied_model(
    sim_url: str, *, request: Edit = _unchanged, chunk: Edit = _unchanged
) -> Iterator[str]:
    """Serve the proxy in a thread; yields its base URL (``…/v1``)."""
    server = _Proxy(sim_url, request, chunk)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        server.client.close()
        thread.join(timeout=5)


def _without_tool_choice(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key != "tool_choice"}


def disobedient_model(sim_url: str) -> contextlib.AbstractContextManager[str]:
    """A model that ignores ``tool_choice``: the simulator, asked without it."""
    return proxied_model(sim_url, request=_without_tool_choice)


def _every_call_numbered_0(chunk: dict[str, Any]) -> dict[str, Any]:
    for choice in chunk.get("choices") or ():
        for call in (choice.get("delta") or {}).get("tool_calls") or ():
            call["index"] = 0
    return chunk


def ollama_numbered_model(sim_url: str) -> contextlib.AbstractContextManager[str]:
    """A model that numbers every tool call of a turn 0, as Ollama does (ollama/ollama#15457)."""
    return proxied_model(sim_url, chunk=_every_call_numbered_0)
