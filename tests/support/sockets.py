"""What this process holds open, as the kernel sees it (closed means closed, not collectable)."""

from __future__ import annotations

import re
import socket
import traceback
import weakref
from collections.abc import Collection
from urllib.parse import urlsplit

import psutil


def connections_to(ports: Collection[int]) -> set[int]:
    """This process's open TCP connections to any of ``ports``, by their local port."""
    return {
        held.laddr.port
        for held in psutil.Process().net_connections("tcp")
        if held.raddr and held.raddr.port in ports
    }


def redis_port(redis_url: str) -> int:
    """The port a ``redis://`` URL names (Redis's own by default)."""
    return urlsplit(redis_url).port or 6379


class ConnectOrigins:
    """The TCP connections to some ports that a test opened: which it left unclosed, and where.

    The kernel's view (:func:`connections_to`) misses a socket whose connection both ends shut
    down: it is still open in this process (``fileno()`` is not -1) but no longer listed. Left
    in a reference cycle, the garbage collector closes it at some later point, and its
    ``ResourceWarning`` fails whichever test runs then, naming only its local port. So the
    connects are audited (``socket.connect``, before the connect: the local port is read later),
    each with the test it happened in and its stack.
    """

    def __init__(self, ports: Collection[int]):
        self._ports = frozenset(ports)
        self._pending: list[tuple[weakref.ref[socket.socket], str | None, str, int]] = []
        self._by_port: dict[int, tuple[str, str]] = {}
        self._test: str | None = None

    def audit(self, event: str, args: tuple[object, ...]) -> None:
        """``sys.addaudithook``'s hook: note a connect to a watched port."""
        if event != "socket.connect":
            return
        sock, address = args
        if isinstance(address, tuple) and len(address) >= 2 and address[1] in self._ports:
            frames = traceback.extract_stack(limit=_STACK_DEPTH)[:-1]
            ours = [f for f in frames if not any(skip in f.filename for skip in _PYTEST_PARTS)]
            stack = "".join(traceback.format_list(ours))
            fd = sock.fileno()  # type: ignore[attr-defined]
            self._pending.append((weakref.ref(sock), self._test, stack, fd))  # type: ignore[arg-type]

    def begin(self, test: str) -> None:
        """Connects from now on are ``test``'s."""
        self._test = test

    def connects(self) -> int:
        """How many connects the current test has made so far (closed ones too)."""
        return sum(test == self._test for _, test, _, _ in self._pending)

    def unclosed(self) -> set[int]:
        """The local ports of the sockets the current test connected that are open still."""
        return {
            port
            for ref, test, _, _ in self._pending
            if test == self._test and (port := _local_port(ref())) is not None
        }

    def end(self) -> None:
        """The test is over: note the local port of every noted socket still open."""
        pending, self._pending = self._pending, []
        for ref, test, stack, _ in pending:
            if (port := _local_port(ref())) is not None:
                self._by_port[port] = (test or "(between tests)", stack)
        self._test = None

    def explain(self, report_text: str) -> str | None:
        """Where the unclosed socket a failure names was connected, if it was noted.

        One an earlier test left is known by its local port; one the failing test connected
        and the collector has taken since, by its fd, among the test's collected sockets.
        """
        found = _UNCLOSED.search(report_text)
        if found is None:
            return None
        fd, port = int(found.group(1)), int(found.group(2))
        if (origin := self._by_port.get(port)) is not None:
            test, stack = origin
            return f"local port {port} was connected during {test}, at:\n{stack}"
        for ref, test, stack, connected_fd in reversed(self._pending):
            if connected_fd == fd and ref() is None:
                return f"fd {fd} was connected during {test} (collected since), at:\n{stack}"
        return None


def _local_port(sock: socket.socket | None) -> int | None:
    if sock is None or sock.fileno() == -1:
        return None
    try:
        port: int = sock.getsockname()[1]
    except OSError:
        return None
    return port


_STACK_DEPTH = 40
_PYTEST_PARTS = ("/_pytest/", "/pluggy/")
_UNCLOSED = re.compile(r"unclosed <socket\.socket fd=(\d+)[^>]*laddr=\('[^']*', (\d+)\)")
