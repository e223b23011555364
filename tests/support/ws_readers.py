"""A gevent process whose WebSocket readers all wake at once, and one kept-alive connection.

``python -m tests.support.ws_readers READERS WORK_US`` monkey-patches as the gateway does,
listens, and prints ``ready <port>``. It accepts ``READERS`` connections, each served by a reader
that waits in :class:`gateway.ws.ReadableOrTimeout` (as simple-websocket's reader does) and
spends ``WORK_US`` µs of CPU once its socket is readable. The next connection it accepts is the
probe: each byte read on it is answered with how many readers were through by then, except
``h``, which holds the process for ``HOLD_SECONDS`` without yielding.

A test holds the process, makes every reader's socket readable meanwhile, and then asks the
probe again and again: readers woken straight from their watchers would run in passes of
hundreds, the probe's answers waiting each out.
"""

from gevent import monkey

monkey.patch_all()

import selectors  # noqa: E402 - after the patch
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402

from gateway.ws import ReadableOrTimeout  # noqa: E402

HOLD_SECONDS = 1.0


def busy(seconds: float) -> None:
    """CPU work that does not yield, as a reader's framing and a session's wake-up."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    readers, work_us = int(sys.argv[1]), int(sys.argv[2])
    handled = 0

    def read(connection: socket.socket) -> None:
        nonlocal handled
        selector = ReadableOrTimeout()
        selector.register(connection, selectors.EVENT_READ, True)
        if selector.select(60):
            busy(work_us / 1e6)
            handled += 1
        selector.close()

    listener = socket.create_server(("127.0.0.1", 0), backlog=readers + 8)
    print("ready", listener.getsockname()[1], flush=True)
    for _ in range(readers):
        connection, _ = listener.accept()
        gevent.spawn(read, connection)
    probe, _ = listener.accept()
    while asked := probe.recv(1):
        if asked == b"h":  # hold the process (no answer): what arrives meanwhile waits together
            busy(HOLD_SECONDS)
        else:
            probe.sendall(b"%d\n" % handled)


if __name__ == "__main__":
    main()
