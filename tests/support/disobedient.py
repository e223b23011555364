"""A model server that ignores ``tool_choice``: the simulator behind a proxy that drops it.

Real models sometimes call tools they were told not to; the engine must not run those calls.
The simulator honours ``tool_choice``, so this proxy removes it from each request on the way.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.client = httpx.Client(timeout=60)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        body.pop("tool_choice", None)
        answer = self.server.client.post(f"{self.server.upstream}{self.path}", json=body)
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def disobedient_model(sim_url: str) -> Iterator[str]:
    """Serve the proxy in a thread; yields its base URL (``…/v1``)."""
    server = _Proxy(sim_url)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        server.client.close()
        thread.join(timeout=5)
