"""``ANTWORT_HIREDIS``: every process of the fleet parses Redis replies as the switch says.

redis-py takes hiredis whenever it can import it, once, when ``redis`` is first imported; the
switch works only if each process's entry imports ``app`` before anything imports ``redis``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

import pytest

ENTRIES = [
    "gateway.gunicorn_conf",  # gunicorn loads it (and so gateway/__init__) before the app
    "gateway.wsgi",
    "workers.main",  # `antwort worker` and `celery -A workers.main`
    "programs.cli",
]

PROBE = (
    "import importlib, sys; importlib.import_module(sys.argv[1]); "
    "import redis.connection, redis.utils; "
    "print(redis.utils.HIREDIS_AVAILABLE, redis.connection.DefaultParser.__name__)"
)


def _parser_of(entry: str, redis_url: str, **environ: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTWORT_")}
    env |= {"ANTWORT_REDIS_URL": redis_url, **environ}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, entry],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split("\n")[-2]


@pytest.mark.parametrize("entry", ENTRIES)
def test_each_entry_takes_hiredis_by_default_and_not_when_switched_off(
    entry: str, redis_url: str
) -> None:
    assert _parser_of(entry, redis_url) == "True _HiredisParser"
    for off in ("0", "false", "off"):
        assert _parser_of(entry, redis_url, ANTWORT_HIREDIS=off) == "False _RESP2Parser"


HIREDIS_PINS = {"hiredis": "3.4.2", "redis": "8.1.0"}
"""The versions the hiredis parser was measured and tested under."""


def test_hiredis_runs_on_the_versions_it_was_measured_with() -> None:
    # redis-py's own, public choice (it takes hiredis when it can import it), but the gain and
    # the whole suite were measured on these versions: when they move, run the e2e suite both
    # ways (--speedups=off), measure again (bench.ratio --set ANTWORT_HIREDIS=0), then move them.
    installed = {name: version(name) for name in HIREDIS_PINS}
    assert installed == HIREDIS_PINS, (
        "hiredis/redis changed: re-test and re-measure before moving HIREDIS_PINS "
        "(or set ANTWORT_HIREDIS=0)"
    )
