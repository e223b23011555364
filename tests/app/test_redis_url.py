"""Redis URLs: one server, a Sentinel master, and what Celery is given for each."""

from __future__ import annotations

import re
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
import redis
from kombu import Connection
from redis.sentinel import SentinelConnectionPool

from app.config import Settings
from app.fair_queue import FairLifoQueue
from app.fleet import make_redis
from app.keys import CLUSTER_SHARDS, Keys
from app.redis_url import (
    ClusterTarget,
    RedisUrlError,
    SentinelTarget,
    celery_transport_options,
    celery_url,
    parse_redis_url,
    redacted,
)
from broker.celery_app import make_celery
from broker.results import FleetSentinelBackend
from programs.supervisor import free_port
from tests.support.cluster import LocalCluster
from tests.support.sentinel import SentinelSet
from tests.support.sockets import connections_to, redis_port


def test_parse_redis_url_keeps_a_plain_url_as_it_is() -> None:
    assert parse_redis_url("redis://127.0.0.1:6379/3") == "redis://127.0.0.1:6379/3"


def test_parse_redis_url_reads_the_sentinels_the_master_and_the_db() -> None:
    target = parse_redis_url("redis+sentinel://:s3cret@h1:26379,h2:26380,[::1]:5/mymaster/2")
    assert target == SentinelTarget(
        sentinels=(("h1", 26379), ("h2", 26380), ("::1", 5)),
        master_name="mymaster",
        db=2,
        password="s3cret",
    )


def test_parse_redis_url_defaults_the_sentinel_port_and_the_db() -> None:
    target = parse_redis_url("redis+sentinel://h1/mymaster")
    assert target == SentinelTarget(sentinels=(("h1", 26379),), master_name="mymaster")


def test_parse_redis_url_takes_kombus_form_with_the_masters_name() -> None:
    url = "sentinel://u:pw@h1:26379/1;sentinel://u:pw@h2:26379/1"
    assert parse_redis_url(url, sentinel_master="m") == SentinelTarget(
        sentinels=(("h1", 26379), ("h2", 26379)),
        master_name="m",
        db=1,
        username="u",
        password="pw",
    )


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("redis+sentinel://h1:26379", "name the master"),
        ("redis+sentinel://h1:26379/m/x", "must be a number"),
        ("redis+sentinel://h1:26379/m/0/9", "expected /master_name"),
        ("redis+sentinel://h1:port/m", "not a sentinel address"),
        ("sentinel://h1:26379", "ANTWORT_REDIS_SENTINEL_MASTER"),
    ],
)
def test_parse_redis_url_says_what_is_wrong(url: str, complaint: str) -> None:
    with pytest.raises(RedisUrlError, match=complaint):
        parse_redis_url(url)


def test_parse_redis_url_hides_the_password_in_its_messages() -> None:
    with pytest.raises(RedisUrlError) as caught:
        parse_redis_url("redis+sentinel://user:s3cret@h1:26379")
    assert "s3cret" not in str(caught.value)


def test_settings_refuse_a_bad_redis_url_at_start() -> None:
    with pytest.raises(pydantic.ValidationError, match="name the master"):
        Settings(redis_url="redis+sentinel://h1:26379")


def test_celery_gets_kombus_sentinel_urls_and_the_masters_name() -> None:
    target = parse_redis_url("redis+sentinel://:p%40ss@h1:1,h2:2/mymaster/4")
    assert celery_url(target) == "sentinel://:p%40ss@h1:1/4;sentinel://:p%40ss@h2:2/4"
    assert celery_transport_options(target) == {"master_name": "mymaster"}
    assert celery_url("redis://h:1/0") == "redis://h:1/0"
    assert celery_transport_options("redis://h:1/0") == {}


@pytest.mark.parametrize(
    ("url", "celerys", "checks"),
    [
        ("rediss://h:1/0", "rediss://h:1/0?ssl_cert_reqs=required", ssl.CERT_REQUIRED),
        (
            "rediss://h:1/0?ssl_ca_certs=/ca.pem",
            "rediss://h:1/0?ssl_ca_certs=/ca.pem&ssl_cert_reqs=required",
            ssl.CERT_REQUIRED,
        ),
        ("rediss://h:1/0?ssl_cert_reqs=none", "rediss://h:1/0?ssl_cert_reqs=none", ssl.CERT_NONE),
    ],
)
def test_a_tls_url_checks_the_server_s_certificate_unless_it_says_otherwise(
    url: str, celerys: str, checks: ssl.VerifyMode
) -> None:
    # Celery's result backend refused a rediss:// URL without ssl_cert_reqs (which redis-py,
    # the store, takes as "required"): every worker stopped at its start
    assert celery_url(url) == celerys
    assert make_celery(Settings(redis_url=url)).backend.connparams["ssl_cert_reqs"] == checks


def test_make_celery_points_broker_and_backend_at_the_sentinels() -> None:
    settings = Settings(redis_url="redis+sentinel://h1:1,h2:2/mymaster/0")
    celery = make_celery(settings)
    assert celery.conf.broker_transport_options["master_name"] == "mymaster"
    assert celery.conf.result_backend_transport_options["master_name"] == "mymaster"
    backend_url = "sentinel://h1:1/0;sentinel://h2:2/0"
    assert celery.conf.result_backend == f"broker.results:FleetSentinelBackend+{backend_url}"
    assert isinstance(celery.backend, FleetSentinelBackend)
    assert [(p["host"], p["port"]) for p in celery.backend.connparams["hosts"]] == [
        ("h1", 1),
        ("h2", 2),
    ]
    connection = Connection(celery.conf.broker_url)
    assert connection.transport_cls == "sentinel"
    assert [alt.partition("/0")[0] for alt in connection.alt] == [
        "sentinel://h1:1",
        "sentinel://h2:2",
    ]


def test_closing_a_client_closes_the_connections_of_its_pool(redis_url: str) -> None:
    # a client handed a pool does not own it: close() left the pool's connections open, for
    # the garbage collector (and its ResourceWarning) to close
    port = redis_port(redis_url)
    before = connections_to({port})
    client = make_redis(Settings(redis_url=redis_url))
    client.ping()
    opened = connections_to({port}) - before
    assert opened

    client.close()

    assert not opened & connections_to({port})


def test_the_broker_url_takes_the_broker_elsewhere_than_the_store() -> None:
    settings = Settings(redis_url="redis://store:1/0", broker_url="redis://queues:2/0")
    assert make_celery(settings).conf.broker_url == "redis://queues:2/0"
    store = make_redis(settings).connection_pool.connection_kwargs["host"]
    broker = make_redis(settings, broker=True).connection_pool.connection_kwargs["host"]
    assert (store, broker) == ("store", "queues")


def test_make_redis_finds_a_sentinel_master_through_a_blocking_pool() -> None:
    settings = Settings(redis_url="redis+sentinel://h1:1/mymaster/3", redis_max_connections=7)
    pool = make_redis(settings).connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "mymaster"
    assert pool.max_connections == 7
    assert pool.connection_kwargs["db"] == 3
    assert isinstance(pool.pool, FairLifoQueue)  # waiters served in the order they came


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    redis_set = SentinelSet(tmp_path_factory.mktemp("sentinel"))
    try:
        redis_set.start()
        yield redis_set
    finally:
        redis_set.stop()


def test_a_sentinel_client_reads_and_writes_on_the_master(sentinels: SentinelSet) -> None:
    client = make_redis(Settings(redis_url=sentinels.url))
    client.set("antwort-test:sentinel", "1")
    assert client.get("antwort-test:sentinel") == b"1"
    assert client.info("replication")["role"] == "master"
    client.close()


def test_closing_a_sentinel_client_closes_its_connections_to_the_sentinels_too(
    sentinels: SentinelSet,
) -> None:
    # redis-py closes the master's pool, not the clients of the sentinels it asked: left to
    # the garbage collector, whose ResourceWarning failed whichever test it collected them in
    ports = {*sentinels.sentinel_ports, sentinels.master_address()[1]}
    before = connections_to(ports)
    client = make_redis(Settings(redis_url=sentinels.url))
    client.set("antwort-test:sentinel", "1")
    opened = connections_to(ports) - before
    assert len(opened) == 2  # a sentinel's and the master's

    client.close()

    assert not opened & connections_to(ports)


def test_a_command_retried_after_a_drop_asks_the_sentinels_where_the_master_is(
    sentinels: SentinelSet,
) -> None:
    # A connection that last talked to a master which is gone now (redis/redis-py#3874): the
    # command's retry reconnects to the master the sentinels name, not to the old address.
    client = make_redis(Settings(redis_url=sentinels.url))
    connection = client.connection_pool.get_connection()
    connection.disconnect()
    connection.host, connection.port = "127.0.0.1", free_port()  # nobody listens there
    connection.send_command("PING")
    assert connection.read_response() == b"PONG"
    assert connection.port == sentinels.master_address()[1]
    client.connection_pool.release(connection)
    client.close()


def test_parse_redis_url_reads_a_clusters_nodes_and_credentials() -> None:
    target = parse_redis_url("redis+cluster://me:s%40cret@10.0.0.1:7000,10.0.0.2")

    assert target == ClusterTarget(
        nodes=(("10.0.0.1", 7000), ("10.0.0.2", 6379)), username="me", password="s@cret"
    )


def test_settings_keep_the_broker_off_a_cluster_and_shard_the_stores_keys() -> None:
    cluster = "redis+cluster://127.0.0.1:7000"
    with pytest.raises(pydantic.ValidationError, match="broker cannot be a Redis Cluster"):
        Settings(redis_url=cluster)

    settings = Settings(redis_url=cluster, broker_url="redis://127.0.0.1:6379/0")

    assert settings.keys == Keys("antwort:", CLUSTER_SHARDS)
    assert Settings(redis_url="redis://127.0.0.1:6379/0").keys == Keys("antwort:")


def test_make_redis_builds_a_cluster_client_that_reaches_every_master(
    redis_cluster: LocalCluster,
) -> None:
    settings = Settings(redis_url=redis_cluster.url, broker_url="redis://127.0.0.1:6379/0")
    client = make_redis(settings)

    assert isinstance(client, redis.RedisCluster)
    assert len(client.get_primaries()) == 3
    keys = [f"antwort-test-url:{{{shard}}}k" for shard in range(8)]
    for key in keys:
        client.set(key, "1", ex=60)
    assert all(client.get(key) == b"1" for key in keys)
    client.delete(*keys)
    pools = [node.redis_connection.connection_pool for node in client.get_primaries()]
    assert all(isinstance(pool.pool, FairLifoQueue) for pool in pools)
    client.close()


def test_closing_a_cluster_client_closes_its_connection_to_every_node(
    redis_cluster: LocalCluster,
) -> None:
    # redis-py's nodes do not own the pools it builds them from a URL, so their close() left
    # every node's connection to the garbage collector (and its ResourceWarning)
    ports = set(redis_cluster.ports)
    before = connections_to(ports)
    client = make_redis(
        Settings(redis_url=redis_cluster.url, broker_url="redis://127.0.0.1:6379/0")
    )
    for shard in range(8):
        client.set(f"antwort-test-url:{{{shard}}}k", "1", ex=60)
    opened = connections_to(ports) - before
    assert len(opened) == 3

    client.close()

    assert not opened & connections_to(ports)


def test_a_cluster_command_rides_out_a_master_that_restarts(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.start()
    try:
        settings = Settings(
            redis_url=cluster.url, broker_url="redis://127.0.0.1:6379/0", redis_outage_seconds=30
        )
        client = make_redis(settings)
        key = "antwort-test-outage:{7}k"
        client.set(key, "before")
        port = client.get_node_from_key(key).port  # type: ignore[attr-defined]
        cluster.kill(port)
        done: list[Any] = []
        writer = threading.Thread(target=lambda: done.append(client.set(key, "after")))
        writer.start()
        time.sleep(1.0)  # the write meets the dead master meanwhile, and waits
        assert not done
        cluster.restart(port)
        writer.join(timeout=30)

        assert done == [True]
        assert client.get(key) == b"after"
        client.close()
    finally:
        cluster.stop()


def test_a_cluster_pipeline_rides_out_a_master_that_restarts(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.start()
    try:
        settings = Settings(
            redis_url=cluster.url, broker_url="redis://127.0.0.1:6379/0", redis_outage_seconds=30
        )
        client = make_redis(settings)
        keys = [f"antwort-test-outage:{{{shard}}}k" for shard in range(6)]  # on every master
        ports = {client.get_node_from_key(key).port for key in keys}  # type: ignore[attr-defined]
        assert len(ports) == 3
        cluster.kill(min(ports))

        def write() -> list[Any]:
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.set(key, "after")
            return list(pipe.execute())

        done: list[list[Any]] = []
        writer = threading.Thread(target=lambda: done.append(write()))
        writer.start()
        time.sleep(1.0)  # the pipeline meets the dead master meanwhile, and waits
        assert not done
        cluster.restart(min(ports))
        writer.join(timeout=30)

        assert done == [[True] * len(keys)]
        assert [client.get(key) for key in keys] == [b"after"] * len(keys)
        client.close()
    finally:
        cluster.stop()


@pytest.mark.parametrize(
    ("url", "celerys"),
    [
        ("unix:///run/redis.sock", "redis+socket:///run/redis.sock?virtual_host=0"),
        (
            "unix://:p%40ss@/run/redis.sock?db=3",
            "redis+socket://:p%40ss@/run/redis.sock?virtual_host=3",
        ),
        (
            "unix:///run/redis.sock?db=2&password=p%40ss&username=u",
            "redis+socket://u:p%40ss@/run/redis.sock?virtual_host=2",
        ),
    ],
)
def test_a_unix_socket_url_is_given_to_celery_in_kombus_form(url: str, celerys: str) -> None:
    # Celery knows no unix://: the broker refused it ("No such transport: unix") and the result
    # backend took the socket's path for a port, so no worker could start
    assert celery_url(parse_redis_url(url)) == celerys
    celery = make_celery(Settings(redis_url=url))
    assert Connection(celery.conf.broker_url).transport_cls == "redis"
    params = celery.backend.connparams
    assert (params["path"], params["db"]) == ("/run/redis.sock", int(celerys[-1]))
    assert params.get("password") == ("p@ss" if "p%40ss" in url else None)


def test_a_unix_socket_url_gives_the_fleets_clients_no_tcp_option() -> None:
    client = make_redis(Settings(redis_url="unix://:p%40ss@/run/redis.sock?db=3"))
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["path"], kwargs["db"], kwargs["password"]) == ("/run/redis.sock", 3, "p@ss")
    assert "socket_keepalive" not in kwargs  # a TCP option, refused by a socket's connection
    client.close()


def test_settings_refuse_a_unix_socket_url_without_a_path_or_a_numbered_db() -> None:
    with pytest.raises(pydantic.ValidationError, match="must be a number"):
        Settings(redis_url="unix:///run/redis.sock?db=three")
    with pytest.raises(pydantic.ValidationError, match="name the socket's path"):
        Settings(redis_url="unix://redis.sock")  # a host, not a path


def test_parse_redis_url_reads_a_tls_clusters_options() -> None:
    target = parse_redis_url("rediss+cluster://10.0.0.1:7000,10.0.0.2?ssl_ca_certs=/ca.pem")

    assert target == ClusterTarget(
        nodes=(("10.0.0.1", 7000), ("10.0.0.2", 6379)), tls=True, options="ssl_ca_certs=/ca.pem"
    )
    assert parse_redis_url("redis+cluster://10.0.0.1:7000") == ClusterTarget(
        nodes=(("10.0.0.1", 7000),)
    )


def test_a_tls_sentinel_url_gives_every_client_its_options() -> None:
    url = "rediss+sentinel://:pw@h1:1,h2:2/mymaster/2?ssl_ca_certs=/ca.pem"
    target = parse_redis_url(url)
    tls = {"ssl_ca_certs": "/ca.pem", "ssl_cert_reqs": "required"}  # checked unless it says
    assert target == SentinelTarget(
        sentinels=(("h1", 1), ("h2", 2)),
        master_name="mymaster",
        db=2,
        password="pw",
        ssl=tuple(tls.items()),
    )

    celery = make_celery(Settings(redis_url=url))
    assert celery.conf.broker_use_ssl == celery.conf.redis_backend_use_ssl == tls
    for options in (
        celery.conf.broker_transport_options,
        celery.conf.result_backend_transport_options,
    ):
        assert options["sentinel_kwargs"] == {"ssl": True, **tls}  # the sentinels over TLS too
    assert celery.backend.connparams["connection_class"].__name__ == "SentinelManagedSSLConnection"
    plain = make_celery(Settings(redis_url="redis+sentinel://h1:1/mymaster/0"))
    assert plain.conf.broker_use_ssl is None and plain.conf.redis_backend_use_ssl is None

    client = make_redis(Settings(redis_url=url))
    pool = client.connection_pool
    assert issubclass(pool.connection_class, redis.SSLConnection)  # the master over TLS
    assert pool.connection_kwargs["ssl_ca_certs"] == "/ca.pem"
    sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    assert all(s.connection_pool.connection_class is redis.SSLConnection for s in sentinels)
    client.close()

    with pytest.raises(RedisUrlError, match="ssl_verify is not one of ssl_ca_certs"):
        parse_redis_url("rediss+sentinel://h1:1/mymaster?ssl_verify=1")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:1/0", "redis://:***@h:1/0"),
        ("redis+sentinel://me:s3cret@h1:1,h2:2/m/0", "redis+sentinel://me:***@h1:1,h2:2/m/0"),
        ("unix:///run/redis.sock?db=1&password=s3cret", "unix:///run/redis.sock?db=1&password=***"),
        ("redis://h:1/0", "redis://h:1/0"),
        (
            "sentinel://:s3cret@h1:1/0;sentinel://:s3cret@h2:2/0",
            "sentinel://:***@h1:1/0;sentinel://:***@h2:2/0",
        ),
        ("redis://h:1/0?db=1;password=s3cret", "redis://h:1/0?db=1;password=***"),
    ],
)
def test_redacted_hides_a_password_wherever_the_url_holds_it(url: str, shown: str) -> None:
    assert redacted(url) == shown


@pytest.mark.parametrize(
    ("url", "needs"),
    [
        ("redis+sentinel://h1:1/mymaster?ssl_ca_certs=/ca.pem", "rediss+sentinel://"),
        ("redis+cluster://h1:7000?ssl_ca_certs=/ca.pem", "rediss+cluster://"),
    ],
)
def test_tls_options_in_a_url_without_tls_are_refused_at_start(url: str, needs: str) -> None:
    # ignored (a Sentinel's: a plain connection where TLS was meant) or, on a cluster, a
    # TypeError at the first command
    with pytest.raises(
        pydantic.ValidationError, match=re.escape(f"TLS options need a {needs} URL")
    ):
        Settings(redis_url=url, broker_url="redis://127.0.0.1:6379/0")
