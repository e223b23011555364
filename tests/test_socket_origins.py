"""The guard's blind spot: a socket whose connection is shut down but that is not closed."""

from __future__ import annotations

import socket
import time

from tests.support.sockets import ConnectOrigins, connections_to, redis_port


def _connected(origins: ConnectOrigins, port: int) -> socket.socket:
    sock = socket.socket()
    origins.audit("socket.connect", (sock, ("127.0.0.1", port)))  # as sys.audit calls it
    sock.connect(("127.0.0.1", port))
    return sock


def test_a_shut_down_socket_the_kernel_forgets_is_unclosed_and_explained(redis_url: str) -> None:
    port = redis_port(redis_url)
    origins = ConnectOrigins({port})
    origins.begin("tests/x.py::test_leaky")
    sock = _connected(origins, port)
    local = sock.getsockname()[1]
    try:
        sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 5
        while local in connections_to({port}) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert local not in connections_to({port})  # Redis closed its end: the kernel forgot it
        assert origins.unclosed() == {local}
        origins.end()
        warning = (
            "ResourceWarning: unclosed <socket.socket fd=23, family=2, type=1, proto=6, "
            f"laddr=('127.0.0.1', {local}), raddr=('127.0.0.1', {port})>"
        )
        where = origins.explain(warning)
        assert where is not None
        assert where.startswith(f"local port {local} was connected during tests/x.py::test_leaky")
        assert "in _connected" in where and "in test_a_shut_down_socket" in where
        origins.begin("tests/x.py::test_next")
        assert origins.unclosed() == set()  # another test's
    finally:
        sock.close()


def test_a_closed_socket_is_not_unclosed_and_others_ports_are_not_noted(redis_url: str) -> None:
    port = redis_port(redis_url)
    origins = ConnectOrigins({port})
    origins.begin("tests/x.py::test_tidy")
    sock = _connected(origins, port)
    sock.close()
    assert origins.unclosed() == set()

    other = ConnectOrigins({port + 1})
    other.begin("tests/x.py::test_tidy")
    sock = _connected(other, port)
    try:
        assert other.unclosed() == set()
    finally:
        sock.close()


def test_a_socket_the_failing_test_connected_and_lost_is_explained_by_its_fd(
    redis_url: str,
) -> None:
    port = redis_port(redis_url)
    origins = ConnectOrigins({port})
    origins.begin("tests/x.py::test_collects_its_own")
    sock = _connected(origins, port)
    fd, local = sock.fileno(), sock.getsockname()[1]
    sock.close()  # as the collector would, with the ResourceWarning in the test's report
    del sock
    warning = (
        f"ResourceWarning: unclosed <socket.socket fd={fd}, family=2, type=1, proto=6, "
        f"laddr=('127.0.0.1', {local}), raddr=('127.0.0.1', {port})>"
    )

    where = origins.explain(warning)

    assert where is not None
    assert where.startswith(f"fd {fd} was connected during tests/x.py::test_collects_its_own ")
    assert "in _connected" in where
