"""Where a Redis lives: one server by URL, or a master that Redis Sentinel names.

``ANTWORT_REDIS_URL`` (and ``ANTWORT_BROKER_URL``) take either form:

* ``redis://[[user]:password@]host:port[/db]`` (or ``rediss://``): one server;
* ``unix://[[user]:password@]/path/to/redis.sock[?db=n]``: one server on a Unix socket (the
  password may instead be given as ``?password=``, as redis-py takes it);
* ``redis+sentinel://[[user]:password@]host:port[,host:port…]/master_name[/db]``: the master
  the sentinels at those addresses name, found again after every failover. The user and
  password are the master's (and its replicas'); sentinels are asked without them. Over TLS
  (to the sentinels and to the master): ``rediss+sentinel://…``, with the ``ssl_*`` options of
  :data:`SSL_OPTIONS` in its query (the certificates are checked unless ``ssl_cert_reqs=none``).

* ``redis+cluster://[[user]:password@]host:port[,host:port…]``: a Redis Cluster, found from
  any of those nodes (redis-py's ``RedisCluster``). The store only: Celery's broker cannot be a
  cluster, so ``ANTWORT_BROKER_URL`` must then name a plain or Sentinel Redis. Over TLS:
  ``rediss+cluster://…``, with ``?ssl_ca_certs=…`` and redis-py's other ``ssl_*`` options as for
  ``rediss://`` (the nodes' certificates are checked unless ``ssl_cert_reqs=none``).

Kombu's own form, ``sentinel://host:port[/db];sentinel://host:port…`` with the master's name in
``ANTWORT_REDIS_SENTINEL_MASTER``, is taken too. Each consumer gets the target in the form its
library's public API takes: redis-py's ``Sentinel(...).master_for(...)`` (:mod:`app.fleet`),
and Celery's ``sentinel://`` broker and result backend URLs with ``master_name`` in their
transport options (:func:`celery_url`, :func:`celery_transport_options`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, parse_qs, parse_qsl, quote, unquote, urlsplit

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_TLS_SCHEME = "rediss+sentinel"
SSL_OPTIONS = ("ssl_ca_certs", "ssl_cert_reqs", "ssl_certfile", "ssl_keyfile")
"""The TLS options a ``rediss+sentinel://`` URL may name: those redis-py, kombu and Celery's
result backend all take."""
CLUSTER_SCHEME = "redis+cluster"
CLUSTER_TLS_SCHEME = "rediss+cluster"
KOMBU_SENTINEL_SCHEME = "sentinel"
UNIX_SCHEME = "unix"
KOMBU_SOCKET_SCHEME = "redis+socket"
"""Kombu's name for a Redis on a Unix socket (Celery's result backend takes it without
``redis+``)."""
DEFAULT_SENTINEL_PORT = 26379
CERT_CHECK = "required"
"""redis-py's ``ssl_cert_reqs`` when a TLS URL says none, said outright for Celery's backend
(which refuses a ``rediss://`` URL without it)."""


class RedisUrlError(ValueError):
    """A Redis URL the fleet cannot use (the message says what is wrong)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SentinelTarget:
    """A master found through Redis Sentinel."""

    sentinels: tuple[tuple[str, int], ...]
    """The sentinels' addresses (any one that answers will do)."""
    master_name: str
    """The name the sentinels monitor the master under."""
    db: int = 0
    username: str | None = None
    password: str | None = None
    ssl: tuple[tuple[str, str], ...] | None = None
    """TLS to the sentinels and the master, with these :data:`SSL_OPTIONS` (None: no TLS)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterTarget:
    """A Redis Cluster (the store's only; never the broker)."""

    nodes: tuple[tuple[str, int], ...]
    """Nodes to find the cluster from (any one that answers will do)."""
    username: str | None = None
    password: str | None = None
    tls: bool = False
    """Every node is reached over TLS (``rediss+cluster://``)."""
    options: str = ""
    """The URL's query: redis-py's connection options (``ssl_ca_certs=…`` and the like)."""


RedisTarget = str | SentinelTarget | ClusterTarget
"""A plain Redis URL (for redis-py's ``from_url``; Celery's by :func:`celery_url`), a Sentinel
master, or a cluster."""


def parse_redis_url(url: str, *, sentinel_master: str | None = None) -> RedisTarget:
    """The target ``url`` names.

    Raises:
        RedisUrlError: a Sentinel URL without addresses or a master's name, a Unix socket's
            without its path, or a bad db (a Sentinel's or a Unix socket's).
    """
    scheme = _scheme(url)
    if scheme in (SENTINEL_SCHEME, SENTINEL_TLS_SCHEME):
        return _parse_sentinel(url)
    if scheme in (CLUSTER_SCHEME, CLUSTER_TLS_SCHEME):
        return _parse_cluster(url)
    if scheme == KOMBU_SENTINEL_SCHEME:
        return _parse_kombu_sentinel(url, sentinel_master)
    if scheme == UNIX_SCHEME:
        _socket_url(url)  # refuses a bad db now rather than at a worker's start
    return url


def is_unix_socket(url: str) -> bool:
    """Whether the plain Redis URL ``url`` names a Unix socket (``unix://``)."""
    return _scheme(url) == UNIX_SCHEME


def _scheme(url: str) -> str:
    return url.partition("://")[0].lower()


def _parse_sentinel(url: str) -> SentinelTarget:
    parts = urlsplit(url)
    credentials, _, hosts = parts.netloc.rpartition("@")
    username, _, password = credentials.partition(":")
    path = [segment for segment in parts.path.split("/") if segment]
    if not path:
        raise RedisUrlError(f"{redacted(url)}: name the master, {SENTINEL_SCHEME}://host:port/name")
    if len(path) > 2:
        raise RedisUrlError(f"{redacted(url)}: expected /master_name[/db] after the addresses")
    return SentinelTarget(
        sentinels=tuple(_address(host) for host in hosts.split(",")),
        master_name=unquote(path[0]),
        db=_db(path[1] if len(path) > 1 else "0", url),
        username=unquote(username) or None,
        password=unquote(password) or None,
        ssl=_ssl_options(url, parts) if _is_tls(url, parts, SENTINEL_TLS_SCHEME) else None,
    )


def _is_tls(url: str, parts: SplitResult, tls_scheme: str) -> bool:
    """Whether ``url`` names ``tls_scheme``; TLS options in any other are refused.

    They would otherwise be ignored (a plain connection where TLS was meant) or fail at the first
    command instead of at start.
    """
    if parts.scheme.lower() == tls_scheme:
        return True
    if any(name.startswith("ssl") for name, _ in parse_qsl(parts.query)):
        scheme = parts.scheme.lower().replace("redis+", "rediss+", 1)
        raise RedisUrlError(f"{redacted(url)}: TLS options need a {scheme}:// URL")
    return False


def _ssl_options(url: str, parts: SplitResult) -> tuple[tuple[str, str], ...]:
    options = dict(parse_qsl(parts.query))
    unknown = sorted(set(options) - set(SSL_OPTIONS))
    if unknown:
        raise RedisUrlError(
            f"{redacted(url)}: {', '.join(unknown)} is not one of {', '.join(SSL_OPTIONS)}"
        )
    options.setdefault("ssl_cert_reqs", CERT_CHECK)
    return tuple(sorted(options.items()))


def _parse_cluster(url: str) -> ClusterTarget:
    parts = urlsplit(url)
    credentials, _, hosts = parts.netloc.rpartition("@")
    username, _, password = credentials.partition(":")
    if parts.path.strip("/"):
        raise RedisUrlError(f"{redacted(url)}: a cluster has one database, name none")
    return ClusterTarget(
        nodes=tuple(
            _address(host, default_port=6379, what="a cluster node's") for host in hosts.split(",")
        ),
        username=unquote(username) or None,
        password=unquote(password) or None,
        tls=_is_tls(url, parts, CLUSTER_TLS_SCHEME),
        options=parts.query,
    )


def _parse_kombu_sentinel(url: str, master_name: str | None) -> SentinelTarget:
    if not master_name:
        raise RedisUrlError(
            f"{redacted(url)}: kombu's sentinel:// form needs ANTWORT_REDIS_SENTINEL_MASTER "
            f"(or use {SENTINEL_SCHEME}://host:port,host:port/master_name/db)"
        )
    chunks = [urlsplit(chunk.strip()) for chunk in url.split(";") if chunk.strip()]
    first = chunks[0]
    return SentinelTarget(
        sentinels=tuple(_address(chunk.netloc.rpartition("@")[2]) for chunk in chunks),
        master_name=master_name,
        db=_db(first.path.strip("/") or "0", url),
        username=unquote(first.username) if first.username else None,
        password=unquote(first.password) if first.password else None,
    )


def _address(
    host: str, *, default_port: int = DEFAULT_SENTINEL_PORT, what: str = "a sentinel"
) -> tuple[str, int]:
    name, _, port = host.strip().rpartition(":")
    if not name:
        name, port = port, str(default_port)
    if not name or not port.isdigit():
        raise RedisUrlError(f"{host!r} is not {what} address (host:port)")
    return name.strip("[]"), int(port)


def _db(value: str, url: str) -> int:
    if not value.isdigit():
        raise RedisUrlError(f"{redacted(url)}: the database must be a number, not {value!r}")
    return int(value)


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs.

    That is the userinfo's, and the query's (redis-py takes ``?password=`` too), in each URL of
    kombu's ``sentinel://…;sentinel://…`` list.
    """
    return ";".join(_redacted_one(one) for one in _NEXT_URL.split(url))


def _redacted_one(url: str) -> str:
    scheme, _, rest = url.partition("://")
    credentials, at, hosts = rest.rpartition("@")
    if at:
        rest = f"{credentials.partition(':')[0]}:***@{hosts}"
    rest = _QUERY_PASSWORD.sub(r"\1***", rest)
    return f"{scheme}://{rest}"


_NEXT_URL = re.compile(r";(?=\s*[A-Za-z][A-Za-z0-9+.-]*://)")
"""A ``;`` that starts another URL (one inside a query separates its parameters)."""
_QUERY_PASSWORD = re.compile(r"([?&;]password=)[^&;]*")


def celery_url(target: RedisTarget) -> str:
    """``target`` as Celery's broker and result backend take it.

    A Sentinel master becomes kombu's list of ``sentinel://`` URLs, one per sentinel, each with
    the master's credentials and database; its name goes in :func:`celery_transport_options`.
    A ``rediss://`` URL without ``ssl_cert_reqs`` gets redis-py's default, ``required``:
    Celery's result backend refuses one without it, which stopped every worker at its start.
    A ``unix://`` URL becomes kombu's ``redis+socket://`` (Celery knows no ``unix://``): its
    ``db`` becomes the ``virtual_host`` kombu reads, and a password in its query moves to its
    userinfo.

    Raises:
        RedisUrlError: a ``unix://`` URL without a path, or whose ``db`` is not a number.
    """
    if isinstance(target, str):
        if is_unix_socket(target):
            return _socket_url(target)
        return _with_cert_check(target)
    if isinstance(target, ClusterTarget):
        raise RedisUrlError("Celery's broker cannot be a Redis Cluster (ANTWORT_BROKER_URL)")
    credentials = ""
    if target.username or target.password:
        user = quote(target.username or "", safe="")
        credentials = f"{user}:{quote(target.password or '', safe='')}@"
    return ";".join(
        f"{KOMBU_SENTINEL_SCHEME}://{credentials}{host}:{port}/{target.db}"
        for host, port in target.sentinels
    )


def _socket_url(url: str) -> str:
    """A ``unix://`` URL as kombu's ``redis+socket://``.

    Its database becomes ``virtual_host``, and the credentials (from the userinfo or the query)
    go in the userinfo, where kombu reads them.
    """
    parts = urlsplit(url)
    if not parts.path.strip("/"):
        raise RedisUrlError(
            f"{redacted(url)}: name the socket's path, unix:///path/to/redis.sock[?db=n]"
        )
    query = parse_qs(parts.query, keep_blank_values=True)
    db = query.pop("db", ["0"])[-1] or "0"
    if not db.isdigit():
        raise RedisUrlError(f"the db of a unix:// Redis URL must be a number, not {db!r}")
    username = query.pop("username", [unquote(parts.username or "")])[-1]
    password = query.pop("password", [unquote(parts.password or "")])[-1]
    credentials = ""
    if username or password:
        credentials = f"{quote(username, safe='')}:{quote(password, safe='')}@"
    rest = "".join(
        f"&{name}={quote(value, safe='')}" for name, values in query.items() for value in values
    )
    return f"{KOMBU_SOCKET_SCHEME}://{credentials}{parts.path}?virtual_host={db}{rest}"


def _with_cert_check(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme.lower() != "rediss" or "ssl_cert_reqs" in parse_qs(parts.query):
        return url
    return f"{url}{'&' if parts.query else '?'}ssl_cert_reqs={CERT_CHECK}"


def celery_transport_options(target: RedisTarget) -> dict[str, Any]:
    """What Celery's broker and result backend need besides :func:`celery_url`.

    A Sentinel master: its name, and over TLS how to reach the sentinels (their connections'
    options); the master's own are :func:`celery_ssl`.
    """
    if not isinstance(target, SentinelTarget):
        return {}
    if target.ssl is None:
        return {"master_name": target.master_name}
    return {"master_name": target.master_name, "sentinel_kwargs": sentinel_ssl(target)}


def celery_ssl(target: RedisTarget) -> dict[str, str] | None:
    """Celery's ``broker_use_ssl`` and ``redis_backend_use_ssl`` for ``target``.

    None: nothing beyond the URL (a ``rediss://`` one names its own).
    """
    return dict(target.ssl) if isinstance(target, SentinelTarget) and target.ssl else None


def sentinel_ssl(target: SentinelTarget) -> dict[str, Any]:
    """The options of a connection to one of ``target``'s sentinels over TLS ({}: no TLS)."""
    return {"ssl": True, **dict(target.ssl)} if target.ssl else {}
