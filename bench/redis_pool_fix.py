"""Run a fleet entry point under the suggested Redis pool fix (``--redis-pool-fix``).

redis-py 8 caps a ``ConnectionPool`` at 100 connections and *raises* ``MaxConnectionsError``
past that; one gevent gateway process serving 1,000 streams has more than 100 Redis calls in
flight during a burst. This shim (used only by ``python -m bench.run --redis-pool-fix``) swaps
``app.fleet.make_redis`` for a ``BlockingConnectionPool`` (callers wait for a connection instead
of failing) before running module MOD as ``__main__`` — a preview of the fix for app/fleet.py.
"""

from __future__ import annotations

import runpy
import sys

import redis

import app.fleet
from app.config import Settings

MAX_CONNECTIONS = 1000


def make_redis(settings: Settings) -> redis.Redis:
    pool = redis.BlockingConnectionPool.from_url(
        app.fleet.require_redis_url(settings),
        max_connections=MAX_CONNECTIONS,
        timeout=30,
        health_check_interval=30,
        socket_keepalive=True,
    )
    return redis.Redis(connection_pool=pool)


app.fleet.make_redis = make_redis  # type: ignore[assignment]

if __name__ == "__main__":
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
