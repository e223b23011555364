"""The gateway's edge under gunicorn (issue 18 §3): slow clients, one address's share, JSON errors.

A gateway of its own with a small pool, so an attack that would fill it is a few dozen sockets.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from openai.types import ErrorObject

from programs.supervisor import free_port
from tests.e2e.conftest import Fleet, fleet_env

POOL = 30
"""The gateway's gevent pool (``ANTWORT_GATEWAY_CONNECTIONS``)."""
PER_CLIENT = 20
"""Its cap per client address (``ANTWORT_MAX_CONNECTIONS_PER_CLIENT``): below the pool."""
HEADER_SECONDS = 5.0
"""The header deadline: longer than the gateway takes to accept the slowloris test's 40
connections on a loaded machine (at 2 s, a first connection cut at its deadline freed a place
before the last ones were accepted, and one fewer was refused)."""
BODY_SECONDS = 2.0
OTHER_ADDRESS = "127.0.0.2"
"""A second loopback address: another client, as far as the gateway can tell."""


@pytest.fixture(scope="module")
def edge(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory, process_environ: dict[str, str]
) -> Iterator[str]:
    port = free_port()
    env = fleet_env(
        process_environ,
        redis_url=redis_url,
        prefix="antwort-edge-test:",
        llm_base_url="http://127.0.0.1:9/v1",
        model="m",
        port=port,
        ANTWORT_GATEWAY_CONNECTIONS=str(POOL),
        ANTWORT_MAX_CONNECTIONS_PER_CLIENT=str(PER_CLIENT),
        ANTWORT_HEADER_TIMEOUT_SECONDS=str(HEADER_SECONDS),
        ANTWORT_BODY_TIMEOUT_SECONDS=str(BODY_SECONDS),
    )
    fleet = Fleet(
        base_url=f"http://127.0.0.1:{port}", env=env, log_dir=tmp_path_factory.mktemp("edge")
    )
    fleet.spawn("gateway", [sys.executable, "-m", "programs.cli", "gateway"])
    try:
        _wait_for_health(fleet.base_url)
        yield fleet.base_url
    finally:
        fleet.stop_all()


def _wait_for_health(base_url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the gateway did not start")


def _port(base_url: str) -> int:
    return int(base_url.rsplit(":", 1)[1])


def _connect(base_url: str, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(
        ("127.0.0.1", _port(base_url)), timeout=10, source_address=(source, 0)
    )
    return sock


def _read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """The head and body of the HTTP/1.1 answer on ``sock``, as a client reads them.

    The body is read to its ``Content-Length`` (else to the close), not further: a refused
    connection that went on sending after the gateway closed it is reset once its answer is in,
    and a read past the answer would fail though the answer arrived whole. gunicorn writes an
    answer's head and body apart: the body may come in a later segment.
    """
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while (length is None or len(body) < int(length[1])) and (chunk := sock.recv(65536)):
        body += chunk
    return head, body


def _answer(sock: socket.socket) -> tuple[int, dict[str, object]]:
    """The status and JSON body of the HTTP/1.1 answer on ``sock``."""
    head, body = _read_answer(sock)
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower(), head
    return status, json.loads(body)


def _body_of_answer(sock: socket.socket, status: int) -> bytes:
    """The body of the answer on ``sock``, which has ``status`` and a Content-Length."""
    head, body = _read_answer(sock)
    assert head.startswith(b"HTTP/1.1 %d " % status), head
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    assert length and len(body) == int(length[1]), (head, body)
    return body


def _openai_error(body: dict[str, object]) -> ErrorObject:
    assert set(body) == {"error"}
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}
    return ErrorObject.model_validate(error)


def test_edge_slowloris_is_bounded_in_count_and_time_while_healthz_answers(edge: str) -> None:
    with ExitStack() as stack:
        attack = time.monotonic()  # no attacker's connection is cut before attack + deadline
        attackers = [stack.enter_context(_connect(edge)) for _ in range(POOL + 10)]
        for sock in attackers:
            sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()

        # Another client is served while the attack holds its connections (before the header
        # deadline frees any of them), though the attack asked for more than the pool.
        other = httpx.Client(transport=httpx.HTTPTransport(local_address=OTHER_ADDRESS))
        stack.enter_context(other)
        for _ in range(5):
            answer = other.get(f"{edge}/healthz", timeout=5, headers={"Connection": "close"})
            assert answer.status_code == 200
            assert time.monotonic() - attack < HEADER_SECONDS

        # The address's share was served; the rest were refused at once, in OpenAI's shape.
        refused = 0
        for sock in attackers:
            sock.settimeout(HEADER_SECONDS + 10)
            try:
                status, body = _answer(sock)
            except (ConnectionResetError, IndexError):
                continue  # dropped at the header deadline without a word
            if status == 429:
                refused += 1
                assert _openai_error(body).code == "too_many_connections"
        assert refused == POOL + 10 - PER_CLIENT
        # Every connection ended by the header deadline (one line every second would not help);
        # without it, the reads above would wait out their socket timeout instead.
        assert time.monotonic() - started < 3 * HEADER_SECONDS


def test_edge_headers_sent_line_by_line_are_cut_at_the_header_deadline(edge: str) -> None:
    with _connect(edge) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 3 * HEADER_SECONDS:
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                sock.settimeout(0.5)
                if sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed
        # cut at the deadline, not before; how late a loaded machine lets it be seen is its own
        assert HEADER_SECONDS - 0.5 < time.monotonic() - started < 3 * HEADER_SECONDS


def test_edge_body_sent_byte_by_byte_is_408_at_the_body_deadline(edge: str) -> None:
    with _connect(edge) as sock:
        sock.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        started = time.monotonic()
        # A byte every 0.2 s keeps the connection busy, so only the deadline can end it. The drip
        # stops before the deadline: a byte the gateway has not read when it closes would make
        # its kernel reset the connection, and a reset can discard the answer before it is read.
        while time.monotonic() - started < BODY_SECONDS - 0.6:
            sock.sendall(b" ")
            time.sleep(0.2)
        sock.settimeout(30)
        body = json.loads(_body_of_answer(sock, status=408))
        assert _openai_error(body).type == "invalid_request_error"
        # at the deadline, not before (a loaded machine may show it late: the bound is generous)
        assert BODY_SECONDS - 0.5 < time.monotonic() - started < BODY_SECONDS + 15


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /v1/responses/" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", 431),
        (b"\x16\x03\x01 not http\r\n\r\n", 400),
    ],
)
def test_edge_gunicorn_refusals_are_openai_json(
    edge: str, request_bytes: bytes, status: int
) -> None:
    with _connect(edge) as sock:
        sock.sendall(request_bytes)
        got, body = _answer(sock)

    assert got == status
    error = _openai_error(body)
    assert error.type == "invalid_request_error"
    assert len(error.message) <= 200


BODY_ROUTES = ["/v1/responses", "/v1/conversations", "/v1/responses/compact"]
"""The routes that read a JSON body."""


def _chunked(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode() + body


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"zz\r\n{}\r\n0\r\n\r\n", id="size-not-hex"),
        pytest.param(b"-5\r\n{}\r\n0\r\n\r\n", id="size-negative"),
        pytest.param(b"z" * 5000 + b"\r\n{}\r\n0\r\n\r\n", id="size-long-not-hex"),
        pytest.param(b"1\r\n{}\r\n0\r\n\r\n", id="size-smaller-than-data"),
        pytest.param(b"2\r\n{}0\r\n\r\n", id="no-crlf-after-data"),
        pytest.param(b"2;=x\r\n{}\r\n0\r\n\r\n", id="bad-extension"),
        pytest.param(b"2\r\n{}\r\n0\r\nBad Trailer\r\n\r\n", id="bad-trailer"),
        pytest.param(b"2\r\n{}\r\n0\r\nContent-Length: 2\r\n\r\n", id="forbidden-trailer"),
    ],
)
def test_edge_a_malformed_chunked_body_is_400(edge: str, path: str, body: bytes) -> None:
    """gunicorn's chunked reader raises inside the app's read of the body: a 400, not a 500."""
    with _connect(edge) as sock:
        sock.sendall(_chunked(path, body))
        status, answer = _answer(sock)

    assert status == 400
    error = _openai_error(answer)
    assert (error.type, error.code, error.param) == (
        "invalid_request_error",
        "invalid_request",
        None,
    )
    assert "chunked" in error.message
    assert len(error.message) <= 200  # the client's bytes are not echoed whole


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_edge_a_chunked_trailer_field_over_the_header_limit_is_431(edge: str, path: str) -> None:
    with _connect(edge) as sock:
        sock.sendall(_chunked(path, b"2\r\n{}\r\n0\r\nX-Long: " + b"y" * 9000 + b"\r\n\r\n"))
        status, answer = _answer(sock)

    assert status == 431
    error = _openai_error(answer)
    assert (error.type, error.code) == ("invalid_request_error", "request_header_fields_too_large")


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_edge_a_chunked_body_cut_short_by_a_half_close_is_400(edge: str, path: str) -> None:
    with _connect(edge) as sock:
        sock.sendall(_chunked(path, b"2\r\n{}\r\n"))
        sock.shutdown(socket.SHUT_WR)
        status, answer = _answer(sock)

    assert status == 400
    error = _openai_error(answer)
    assert (error.type, error.code) == ("invalid_request_error", "invalid_request")
    assert "ended" in error.message


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_edge_a_body_shorter_than_its_content_length_is_400(edge: str, path: str) -> None:
    """A client that half-closes after fewer bytes than it declared sent no whole body: it is
    refused, not acted on (gunicorn hands the app the short body, then the end)."""
    body = b'{"items": []}'
    with _connect(edge) as sock:
        sock.sendall(
            (
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body) + 20}\r\n\r\n"
            ).encode()
            + body
        )
        sock.shutdown(socket.SHUT_WR)
        status, answer = _answer(sock)

    assert status == 400
    error = _openai_error(answer)
    assert (error.type, error.code) == ("invalid_request_error", "invalid_request")
    assert "ended before" in error.message


def test_edge_a_create_of_many_items_stores_them_all_in_order(edge: str) -> None:
    """Its per-item work pauses between batches and its items reach Redis a batch a call
    (``app.cooperation``, ``append_batch.lua``); what the client reads back is what it sent."""
    items = [{"role": "user", "content": f"item {n}"} for n in range(20_000)]

    created = httpx.post(
        f"{edge}/v1/responses", json={"model": "m", "input": items, "background": True}, timeout=120
    )

    assert created.status_code == 200, created.text
    listed = f"{edge}/v1/responses/{created.json()['id']}/input_items"
    first = httpx.get(listed, params={"order": "asc", "limit": 100}, timeout=30).json()
    last = httpx.get(listed, params={"order": "desc", "limit": 100}, timeout=30).json()
    assert [item["content"][0]["text"] for item in first["data"]] == [
        f"item {n}" for n in range(100)
    ]
    assert [item["content"][0]["text"] for item in last["data"]] == [
        f"item {n}" for n in range(19_999, 19_899, -1)
    ]
    assert first["has_more"] and last["has_more"]


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_edge_the_listen_queue_is_as_long_as_the_pool(fleet: Fleet) -> None:
    """The gateway listens with a queue as long as its pool (4,000 by default), kernel permitting.

    At gunicorn's 2,048, 10,000 WebSockets opened at once overflowed it ~3,000 times
    (``TcpExtListenOverflows``): each a dropped connect, retried by its client 1 s or 3 s later.
    """
    port = urlsplit(fleet.base_url).port
    listening = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())

    assert int(listening[2]) == min(4000, somaxconn)  # a listener's Send-Q is its backlog
