"""A fleet on a Redis that speaks TLS only: ``rediss://`` with the CA of its certificate.

Store, events, pub/sub, Celery's queues and its result backend (a turn that calls two tools at
once is a chord) all go through one ``redis-server`` listening with ``--tls-port`` alone. And a
store on a Redis Cluster whose nodes speak TLS only (``rediss+cluster://``), to clients and on
the cluster bus; and the whole fleet on a Sentinel set whose every process speaks TLS only
(``rediss+sentinel://``).
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from programs.supervisor import free_port
from tests.conftest import delete_prefix
from tests.e2e.own_fleet import assert_a_chord_and_a_stream_complete, small_fleet
from tests.support.cluster import ClusterUnavailableError, LocalCluster, cluster_binaries
from tests.support.private_redis import running_redis
from tests.support.sentinel import SentinelSet
from tests.support.tls import make_certificates


@contextlib.contextmanager
def _tls_redis(directory: Path) -> Iterator[str]:
    """A ``redis-server`` on a TLS port only; its ``rediss://`` URL (the CA named, no cert
    check setting: the fleet's default is to check)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs redis-server (the embedded Redis has no TLS)")
    certificates = make_certificates(directory)
    port = free_port()
    argv = [binary, *certificates.listen_args(port), "--bind", "127.0.0.1", "--save", ""]
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certificates.ca}"
    with running_redis(argv, url, directory / "redis.log") as started:
        if not started:
            pytest.skip("this redis-server was built without TLS")
        yield url


@pytest.mark.e2e
def test_the_fleet_runs_on_a_redis_that_speaks_only_tls(
    sim_url: str, tmp_path: Path, process_environ: dict[str, str]
) -> None:
    with (
        _tls_redis(tmp_path) as url,
        small_fleet(process_environ, tmp_path, sim_url, ANTWORT_REDIS_URL=url) as fleet,
    ):
        assert_a_chord_and_a_stream_complete(fleet)


@pytest.mark.e2e
def test_the_store_runs_on_a_cluster_that_speaks_only_tls(
    sim_url: str, redis_url: str, tmp_path: Path, process_environ: dict[str, str]
) -> None:
    try:
        cluster_binaries()
    except ClusterUnavailableError as exc:
        pytest.skip(f"no Redis Cluster on this machine: {exc}")
    cluster = LocalCluster(tmp_path / "cluster", tls=make_certificates(tmp_path / "certs"))
    prefix = f"antwort-e2e-{uuid.uuid4().hex[:8]}:"
    try:
        cluster.start()
        with small_fleet(
            process_environ,
            tmp_path,
            sim_url,
            ANTWORT_REDIS_URL=cluster.url,  # rediss+cluster://…?ssl_ca_certs=…
            ANTWORT_BROKER_URL=redis_url,
            ANTWORT_KEY_PREFIX=prefix,
        ) as fleet:
            assert_a_chord_and_a_stream_complete(fleet)
            with cluster.client() as store:
                assert list(store.scan_iter(match=f"{prefix}*r:resp_*"))  # the store is there
    finally:
        cluster.stop()
        with redis.Redis.from_url(redis_url) as queues:
            delete_prefix(queues, prefix)


@pytest.mark.e2e
def test_the_fleet_runs_on_a_sentinel_set_that_speaks_only_tls(
    sim_url: str, tmp_path: Path, process_environ: dict[str, str]
) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server (the embedded Redis has no TLS)")
    (tmp_path / "sentinel").mkdir()
    redis_set = SentinelSet(tmp_path / "sentinel", tls=make_certificates(tmp_path / "certs"))
    try:
        redis_set.start()
        with small_fleet(
            process_environ,
            tmp_path,
            sim_url,
            ANTWORT_REDIS_URL=redis_set.url,  # rediss+sentinel://…?ssl_ca_certs=…
        ) as fleet:
            assert_a_chord_and_a_stream_complete(fleet)
            with redis_set.client(redis_set.master_address()[1]) as master:
                assert master.dbsize() > 0  # the store and the queues are there
            redis_set.kill_master()
            redis_set.wait_failover()
            # every process finds the new master over TLS, without a restart
            assert_a_chord_and_a_stream_complete(fleet)
    finally:
        redis_set.stop()
