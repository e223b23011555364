"""The lean plain-HTTP transport under httpx, against a real HTTP/1.1 server on loopback."""

from __future__ import annotations

import gzip
import http.client
import http.server
import json
import os
import resource
import socket
import threading
import time
from collections.abc import Iterator
from importlib.metadata import version

import httpx
import pytest

from app.errors import UpstreamError
from app.keepalive import KEEPALIVE_EXPIRY_SECONDS
from app.providers.chunks import TextDelta
from app.providers.http11 import Http11Transport, _Frames, lean_mounts
from app.providers.openai_chat import ChatCompletionsProvider, model_http_client
from app.providers.translate import ModelRequest
from tests.support.idle_close import closing_idle_connections
from tests.support.serving import serving


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.requests.append((self.client_address[1], self.path, body))
        if self.path == "/stream":
            self._chunked([f"data: {i}\n\n".encode() for i in range(5)])
        elif self.path in ("/paced", "/together"):
            self._framed()
        elif self.path == "/drop":  # half a body, then the connection is gone
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5\r\nhello\r\n")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif self.path == "/short":  # five bytes of the ten announced
            self.send_response(200)
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.write(b"hello")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif self.path == "/broken/chat/completions":  # a model that dies mid-answer
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for text in ("Hel", "lo"):
                event = b"data: %s\n\n" % json.dumps(_chat_chunk(text)).encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif self.path == "/slow":
            time.sleep(1.0)
            self._whole(b"late")
        elif self.path == "/gzip":
            self._whole(gzip.compress(b"unpacked"), encoding="gzip")
        elif self.path == "/close":
            self._whole(b"bye", close=True)
        else:
            self._whole(b"echo:" + body)

    def _framed(self) -> None:
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if self.path == "/paced":  # a frame, then wait until the client has read it
            for i in range(3):
                self.wfile.write(b"%x;ext=%d\r\ndata: %d\n\n\r\n" % (9, i, i))
                self.wfile.flush()
                self.server.read_one.acquire(timeout=5)
            self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")
        else:  # every frame in one write, as a fast model sends them
            events = [b"data: %d\n\n" % i for i in range(50)]
            frames = b"".join(b"%x\r\n%b\r\n" % (len(event), event) for event in events)
            self.wfile.write(frames + b"0\r\n\r\n")

    def _chunked(self, parts: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in parts:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def _whole(self, body: bytes, *, encoding: str | None = None, close: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if encoding:
            self.send_header("Content-Encoding", encoding)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)


def _chat_chunk(text: str) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[int, str, bytes]] = []
        self.read_one = threading.Semaphore(0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    with serving(srv):
        yield srv


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(transport=Http11Transport(), timeout=httpx.Timeout(10.0)) as c:
        yield c


def test_http11_streams_a_chunked_body_as_it_arrives(server: _Server, client: httpx.Client) -> None:
    with client.stream("POST", f"{server.url}/paced", json={"a": 1}) as response:
        assert response.status_code == 200
        assert response.http_version == "HTTP/1.1"
        chunks = []
        for chunk in response.iter_raw():  # the server sends the next frame once this is read
            chunks.append(chunk)
            server.read_one.release()

    assert chunks == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"]  # each as it came
    [(_, path, body)] = server.requests
    assert (path, body) == ("/paced", b'{"a":1}')
    assert client.post(f"{server.url}/echo").content == b"echo:"  # the connection is reusable
    assert len({port for port, _, _ in server.requests}) == 1


def test_http11_hands_frames_that_arrived_together_over_in_one_piece(
    server: _Server, client: httpx.Client
) -> None:
    """A fast model's frames, read in one go, are one piece: the reader makes one pass, not 50."""
    with client.stream("POST", f"{server.url}/together") as response:
        chunks = list(response.iter_raw())

    assert b"".join(chunks) == b"".join(b"data: %d\n\n" % i for i in range(50))
    assert len(chunks) < 5  # one read, or a few where the kernel split the write
    assert client.post(f"{server.url}/echo").content == b"echo:"
    assert len({port for port, _, _ in server.requests}) == 1


def test_http11_chunked_framing_split_anywhere_decodes_the_same() -> None:
    """The decoder against every split of a body into three reads, and against bad framing."""
    parts = [b"data: a\n\n", b"x" * 300, b"data: bb\n\n"]
    body = b"".join(b"%x;n=1\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\nT: 1\r\n\r\n"
    for i in range(1, len(body)):
        for j in range(i, len(body), 7):
            frames = _Frames()
            out = b"".join(frames.feed(piece) for piece in (body[:i], body[i:j], body[j:]))
            assert (out, frames.done, frames.rest) == (b"".join(parts), True, b"")
    for bad in (b"zz\r\n", b"0x5\r\nhello\r\n", b"3\r\nhello\r\n", b"-3\r\n", b"1_0\r\n"):
        with pytest.raises(http.client.HTTPException):
            _Frames().feed(bad)
    with pytest.raises(http.client.LineTooLong):
        _Frames().feed(b"1" * 5000)


def test_http11_reuses_a_connection_once_its_body_was_read(
    server: _Server, client: httpx.Client
) -> None:
    for text in ("one", "two", "three"):
        assert client.post(f"{server.url}/echo", content=text).text == f"echo:{text}"

    ports = {port for port, _, _ in server.requests}
    assert len(ports) == 1


def test_http11_does_not_reuse_a_connection_whose_body_was_left_unread(
    server: _Server, client: httpx.Client
) -> None:
    with client.stream("POST", f"{server.url}/stream") as response:
        next(response.iter_raw())
    assert client.post(f"{server.url}/echo", content="x").text == "echo:x"

    ports = [port for port, _, _ in server.requests]
    assert ports[0] != ports[1]


def test_http11_opens_a_new_connection_after_the_server_closed_one(
    server: _Server, client: httpx.Client
) -> None:
    assert client.post(f"{server.url}/close").text == "bye"
    assert client.post(f"{server.url}/echo", content="x").text == "echo:x"

    ports = [port for port, _, _ in server.requests]
    assert ports[0] != ports[1]


def test_http11_drops_an_idle_connection_the_server_closed_meanwhile(server: _Server) -> None:
    transport = Http11Transport()
    with httpx.Client(transport=transport) as client:
        assert client.post(f"{server.url}/echo", content="a").text == "echo:a"
        [[(idle, _)]] = transport._idle.values()
        assert idle.sock is not None
        idle.sock.shutdown(socket.SHUT_RD)  # reads as EOF, as a server's close would
        assert client.post(f"{server.url}/echo", content="b").text == "echo:b"

    assert len({port for port, _, _ in server.requests}) == 2


@pytest.mark.parametrize("lean_http", [True, False], ids=["lean", "httpx"])
def test_a_connection_idle_for_the_keepalive_expiry_is_not_reused(
    server: _Server, lean_http: bool
) -> None:
    """A server closing idle connections soon after 4 s never sees a model call on one.

    uvicorn (vLLM's server), Node and Hypercorn close a connection idle for 5 s; a call sent on
    it as they do is reset unread. Before, the lean transport reused a connection however long
    it idled, and httpx's own up to 5 s: the call failed and the provider retried it after
    half a second.
    """
    idle_seconds = KEEPALIVE_EXPIRY_SECONDS + 0.5
    with (
        closing_idle_connections(server.server_address[1], idle_seconds=idle_seconds) as proxy,
        model_http_client(lean_http=lean_http) as client,
    ):
        url = f"http://127.0.0.1:{proxy.port}/echo"
        assert client.post(url, content="a").text == "echo:a"
        assert client.post(url, content="b").text == "echo:b"
        assert proxy.connections == 1  # kept alive while in use
        time.sleep(idle_seconds + 0.2)
        assert client.post(url, content="c").text == "echo:c"

    assert proxy.resets == 0
    assert proxy.connections == 2


def test_http11_reuses_a_connection_whose_descriptor_is_past_1024(
    server: _Server, client: httpx.Client
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2048)), hard))
    fillers = [os.dup(0) for _ in range(1100)]  # a busy process: the next socket's fd is high
    try:
        for text in ("one", "two"):
            assert client.post(f"{server.url}/echo", content=text).text == f"echo:{text}"
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    assert len({port for port, _, _ in server.requests}) == 1


def test_http11_maps_failures_to_httpx_exceptions(server: _Server, client: httpx.Client) -> None:
    with pytest.raises(httpx.ReadTimeout):  # the server answers after a second
        client.post(f"{server.url}/slow", timeout=httpx.Timeout(10.0, read=0.3))
    with pytest.raises(httpx.RemoteProtocolError):  # the body broke off mid-frame
        client.post(f"{server.url}/drop")
    with pytest.raises(httpx.RemoteProtocolError):  # ... or short of its Content-Length
        client.post(f"{server.url}/short")

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        client.post(f"http://127.0.0.1:{port}/")
    with pytest.raises(httpx.UnsupportedProtocol):
        client.post("https://127.0.0.1/")


def test_http11_leaves_content_decoding_to_httpx(server: _Server, client: httpx.Client) -> None:
    response = client.post(f"{server.url}/gzip")

    assert response.headers["content-encoding"] == "gzip"
    assert response.content == b"unpacked"


def test_provider_over_http11_reports_a_model_that_broke_off(server: _Server) -> None:
    provider = ChatCompletionsProvider(base_url=f"{server.url}/broken", max_retries=0)
    request = ModelRequest(model="m", instructions=None, items=[{"role": "user", "content": "hi"}])
    received = []

    with pytest.raises(UpstreamError, match="broke off"):
        for chunk in provider.stream(request):
            received.append(chunk)

    assert "".join(delta.text for delta in received) == "Hello"  # in one piece or two
    assert all(isinstance(delta, TextDelta) for delta in received)
    provider.close()


def test_lean_mounts_step_aside_for_a_configured_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(lean_mounts()["http://"], Http11Transport)

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert lean_mounts() == {}


LEAN_TRANSPORT_PINS = {"httpx": "0.28.1", "httpcore": "1.0.9"}
"""The versions the lean transport was measured and tested under."""


def test_the_lean_transport_runs_on_the_httpx_it_was_measured_with() -> None:
    # Http11Transport plugs into httpx's public transport seam, but its gain was measured
    # against httpcore's transport of these versions. When they move, run this file and the
    # e2e suite both ways (--speedups=off), measure again, then move the pins.
    installed = {name: version(name) for name in LEAN_TRANSPORT_PINS}
    assert installed == LEAN_TRANSPORT_PINS, (
        "httpx/httpcore changed: re-test and re-measure app/providers/http11.py before moving "
        "LEAN_TRANSPORT_PINS (or set ANTWORT_LEAN_HTTP=0)"
    )


def _is_httpcore_wire(client: httpx.Client, url: str) -> bool:
    """httpcore answered: its responses carry the documented ``network_stream`` extension."""
    response = client.post(url, json={})
    return "network_stream" in response.extensions


def test_lean_http_off_leaves_every_model_server_to_httpx(server: _Server) -> None:
    with model_http_client() as lean, model_http_client(lean_http=False) as plain:
        assert not _is_httpcore_wire(lean, f"{server.url}/echo")
        assert _is_httpcore_wire(plain, f"{server.url}/echo")
