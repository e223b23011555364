"""Shared fixtures: real Redis (the machine's, else embedded), the simulator, settings."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from app.config import Settings
from app.fleet import make_redis
from app.keys import CLUSTER_SHARDS, Keys
from app.store import ResponseStore
from programs.supervisor import embedded_redis_argv, free_port
from tests.support.cluster import ClusterUnavailableError, LocalCluster, cluster_binaries
from tests.support.private_redis import PrivateRedis
from tests.support.recording import Recorder, RecordingSimulator, recording_simulator
from tests.support.recording import base_url as sim_base_url
from tests.support.sockets import ConnectOrigins, connections_to, redis_port

TEST_DB = 13


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--speedups",
        choices=("on", "off"),
        default="on",
        help="off: the processes the e2e tests start run without the speed-ups "
        "(ANTWORT_FAST_PUBLISH=0, ANTWORT_LEAN_HTTP=0, ANTWORT_HIREDIS=0); "
        "`make test` runs tests/e2e both ways",
    )


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ANTWORT_* setting of the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("ANTWORT_"):
            monkeypatch.delenv(name)


def _local_redis_answers() -> bool:
    client = redis.Redis(host="127.0.0.1", port=6379, db=TEST_DB, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


LEFT_OPEN_GRACE_SECONDS = 2.0
"""How long a connection may take to close after the test (a thread of the test closing it)."""


_connect_origins: list[ConnectOrigins] = []
"""Where connections to the test Redis were opened (one, from the first test on)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failure over an unclosed socket says which test connected it, and from where."""
    report = yield
    if report.failed and _connect_origins:
        where = _connect_origins[0].explain(str(report.longrepr))
        if where is not None:
            report.sections.append(("where the unclosed socket was connected", where))
    return report


@pytest.fixture(autouse=True)
def _closes_its_redis_connections(redis_url: str, request: pytest.FixtureRequest) -> Iterator[None]:
    """A test closes every connection to the test Redis that it opens, its fixtures' included.

    One left open is closed, if ever, by the garbage collector at some later point. redis-py
    closes a collected connection's socket, but the objects of a reference cycle are finalized
    in no set order: a socket finalized first fails whichever test runs then, far from its
    cause, with its ``ResourceWarning``.
    """
    port = redis_port(redis_url)
    if not _connect_origins:
        _connect_origins.append(ConnectOrigins({port}))
        sys.addaudithook(_connect_origins[0].audit)  # for the life of the process
    origins = _connect_origins[0]
    origins.begin(request.node.nodeid)
    before = connections_to({port})
    yield
    deadline = time.monotonic() + LEFT_OPEN_GRACE_SECONDS
    while True:
        left, unclosed = connections_to({port}) - before, origins.unclosed()
        if not (left or unclosed) or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    origins.end()
    assert not left, f"the test left {len(left)} connection(s) to Redis open (local ports {left})"
    assert not unclosed, (
        f"the test left {len(unclosed)} socket(s) to Redis unclosed, their connections shut "
        f"down (local ports {unclosed})"
    )


@pytest.fixture
def redis_connects(_closes_its_redis_connections: None) -> Callable[[], int]:
    """How many connections to the test Redis the test has opened so far (closed ones too)."""
    return _connect_origins[0].connects


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The machine's Redis (database 13) when it answers, else an embedded server."""
    if os.environ.get("ANTWORT_TEST_EMBEDDED_REDIS") != "1" and _local_redis_answers():
        yield f"redis://127.0.0.1:6379/{TEST_DB}"
        return
    port = free_port()
    directory = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        embedded_redis_argv(port, str(directory)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    client.close()
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def delete_prefix(client: redis.Redis, prefix: str) -> None:
    """Remove every key under ``prefix`` (our per-test flush)."""
    batch = list(client.scan_iter(match=f"{prefix}*", count=1000))
    while batch:
        client.delete(*batch[:500])
        batch = batch[500:]


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A Redis Cluster of three local masters (started when a test first asks for it)."""
    try:
        cluster_binaries()
    except ClusterUnavailableError as exc:
        pytest.skip(f"no Redis Cluster on this machine: {exc}")
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def key_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own, flushed afterwards."""
    prefix = f"antwort-test-{uuid.uuid4().hex[:10]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    delete_prefix(client, prefix)
    client.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A ``redis-server`` of this test's own, to stop, fill or break (the shared one never)."""
    directory = tmp_path / "private-redis"
    directory.mkdir()
    server = PrivateRedis(directory)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def simulator() -> Iterator[RecordingSimulator]:
    """The model simulator, in a thread, on a free port; its recorder sees what it was sent."""
    with recording_simulator() as server:
        yield server


@pytest.fixture(scope="session")
def sim_url(simulator: RecordingSimulator) -> str:
    """The simulator's base URL."""
    return sim_base_url(simulator)


@pytest.fixture
def sim_recorder(simulator: RecordingSimulator) -> Recorder:
    """What the simulator was sent: ``watch(marker)`` lists the requests that mention it."""
    return simulator.recorder


@pytest.fixture
def make_settings(
    redis_url: str, key_prefix: str, sim_url: str, tmp_path: Path
) -> Callable[..., Settings]:
    """Settings for this test: its Redis prefix, the simulator, overrides as keywords."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "key_prefix": key_prefix,
            "llm_base_url": sim_url,
            "default_model": "antwort-sim",
            "llm_max_retries": 0,
            "secrets_file": str(tmp_path / "secrets.key"),
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def store(redis_client: redis.Redis, key_prefix: str) -> ResponseStore:
    return ResponseStore(redis_client, keys=Keys(key_prefix), ttl_seconds=3600, stream_maxlen=1000)


@pytest.fixture(params=["redis", "cluster"])
def store_on_both(request: pytest.FixtureRequest) -> Iterator[ResponseStore]:
    """A store on one Redis (the test's prefix), then on a cluster of three masters.

    On the cluster the keys carry hash tags (``Keys(prefix, CLUSTER_SHARDS)``), so a script or
    transaction whose keys are not in one slot fails there with ``CROSSSLOT``.
    """
    prefix = request.getfixturevalue("key_prefix")
    if request.param == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        keys = Keys(prefix)
    else:
        cluster_url = request.getfixturevalue("redis_cluster").url
        broker_url = request.getfixturevalue("redis_url")
        # the fleet's own client: outages waited out, pipelines replayed (app.fleet)
        client = make_redis(Settings(redis_url=cluster_url, broker_url=broker_url))
        keys = Keys(prefix, CLUSTER_SHARDS)
    yield ResponseStore(client, keys=keys, ttl_seconds=3600, stream_maxlen=1000)
    if request.param == "cluster":
        delete_prefix(client, prefix)
    client.close()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
