"""A gevent process holding many live followers of an ``EventHub``, and one more connection.

``python -m tests.support.burst REDIS_URL PREFIX RESPONSES PER_RESPONSE WORK_US KEEPALIVE``
monkey-patches as the gateway does, starts a hub on ``PREFIX``, and ``RESPONSES × PER_RESPONSE``
followers (keepalive: ``KEEPALIVE`` s) that each spend ``WORK_US`` µs of CPU once woken, by a
message or a quiet spell (a relay's framing and write). It prints
``ready <port>``: a TCP server on that port reads the time a connection was made
(``time.monotonic()``, one clock for every process here, sent by the client) and answers with
how many followers had handled their message by then and how many when it got to the
connection. The first follower to handle a message prints
``started``; when all have handled one, the process prints ``done`` and the fewest messages a
follower got at its wake-up, and exits.

A test publishes one message to every response at once (the burst), connects on ``started``,
or lets them go quiet together, and reads how many followers ran between its connection's
arrival and its answer (counted from its arrival, not from the test's wake-up on ``started``,
which a busy machine delays).
"""

from gevent import monkey

monkey.patch_all()

import bisect  # noqa: E402 - after the patch
import contextlib  # noqa: E402
import queue  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import redis  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.server import StreamServer  # noqa: E402
from gevent.socket import socket  # noqa: E402

from app.keys import Keys  # noqa: E402
from app.relay import EventHub  # noqa: E402


def main() -> None:
    url, prefix, responses, per_response, work_us, keepalive = sys.argv[1:7]
    hub = EventHub(redis.Redis.from_url(url), Keys(prefix))
    hub.start()
    followers = int(responses) * int(per_response)
    handled = 0
    handled_at: list[float] = []  # when each follower was through, in order
    batch_sizes: list[int] = []
    all_handled = Event()

    def follow(response_id: str) -> None:
        nonlocal handled
        inbox = hub.listen(response_id, keepalive_seconds=float(keepalive))
        batch = []
        with contextlib.suppress(queue.Empty):  # quiet: a keepalive's wake-up
            batch = inbox.take()
        batch_sizes.append(len(batch))
        end = time.perf_counter() + int(work_us) / 1e6
        while time.perf_counter() < end:
            pass
        handled += 1
        handled_at.append(time.monotonic())
        if handled == 1:
            print("started", flush=True)
        if handled == followers:
            all_handled.set()

    def answer(client: socket, _address: object) -> None:
        served = handled
        arrived = float(client.makefile("rb").readline())
        before = bisect.bisect_right(handled_at, arrived)
        client.sendall(b"%d %d\n" % (before, served))

    for response in range(int(responses)):
        for _ in range(int(per_response)):
            gevent.spawn(follow, f"resp_{response}")
    gevent.sleep(0.2)  # every follower listens
    server = StreamServer(("127.0.0.1", 0), answer)
    server.start()
    print("ready", server.address[1], flush=True)
    all_handled.wait(timeout=60)
    print("done", min(batch_sizes), flush=True)
    server.stop()
    hub.stop()


if __name__ == "__main__":
    main()
