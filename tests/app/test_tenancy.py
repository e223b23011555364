"""Tenants and keys (``app.tenancy``): env keys, the key store in Redis, the gateway's cache."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from app.errors import AuthenticationError
from app.keys import Keys
from app.tenancy import (
    OPEN_TENANT,
    KeyStore,
    Limits,
    TenantDirectory,
    key_digest,
    parse_env_keys,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def keystore(redis_client: redis.Redis, key_prefix: str) -> KeyStore:
    return KeyStore(redis_client, Keys(key_prefix))


def directory(
    keystore: KeyStore, clock: Clock, env: str | None = None, cache_seconds: float = 5.0
) -> TenantDirectory:
    return TenantDirectory(
        keystore,
        env_keys=parse_env_keys(env),
        defaults=Limits(requests_per_minute=10),
        cache_seconds=cache_seconds,
        clock=clock,
    )


def test_tenancy_env_keys_are_tenants_of_their_own_unless_named() -> None:
    found = parse_env_keys("alone, team-a:k1 ,team-a:k2,team-b:with:colon")

    assert found[key_digest("k1")] == found[key_digest("k2")] == "team-a"
    assert found[key_digest("with:colon")] == "team-b"
    alone = found[key_digest("alone")]
    assert alone.startswith("env-") and "alone" not in alone  # never the key itself
    assert parse_env_keys(None) == parse_env_keys(" , ") == {}
    with pytest.raises(ValueError, match="tenant name"):
        parse_env_keys("bad tenant:key")
    with pytest.raises(ValueError, match="no key"):
        parse_env_keys("team:")


def test_tenancy_key_store_keeps_only_the_digest(keystore: KeyStore) -> None:
    token, stored = keystore.create("team-a")

    assert token.startswith("ak-") and len(token) > 40
    raw = keystore.redis.hgetall(keystore.keys.api_keys)
    assert list(raw) == [hashlib.sha256(token.encode()).hexdigest().encode()]
    assert token.encode() not in b"".join(raw.values())  # not in clear anywhere
    assert keystore.lookup(token) == stored
    assert [key.id for key in keystore.all()] == [stored.id]
    assert keystore.revoke("key_nope") is None
    assert keystore.revoke(stored.id) == stored
    assert keystore.lookup(token) is None and keystore.all() == []
    assert keystore.is_auth_on()  # revoking the last key does not open the fleet


def test_tenancy_limits_are_stored_with_the_tenant(keystore: KeyStore) -> None:
    assert keystore.set_limits("team-a", {"requests_per_minute": 5, "max_in_flight": 2}) == {
        "requests_per_minute": 5,
        "max_in_flight": 2,
    }
    assert keystore.set_limits("team-a", {"max_in_flight": None}) == {"requests_per_minute": 5}
    defaults = Limits(requests_per_minute=100, tokens_per_minute=1000)
    assert defaults.over(keystore.limits_of("team-a")) == Limits(
        requests_per_minute=5, tokens_per_minute=1000
    )


def test_tenancy_open_only_while_no_key_is_configured(keystore: KeyStore) -> None:
    clock = Clock()
    open_directory = directory(keystore, clock, cache_seconds=0)

    assert open_directory.resolve(None).name == OPEN_TENANT
    token, _ = keystore.create("team-a")
    with pytest.raises(AuthenticationError):
        open_directory.resolve(None)  # a stored key turns auth on, no restart
    assert open_directory.resolve(f"Bearer {token}").name == "team-a"
    with pytest.raises(AuthenticationError):
        directory(keystore, clock, env="k").resolve(None)


def test_tenancy_counts_the_fleets_tenants_for_the_fair_share(keystore: KeyStore) -> None:
    clock = Clock()

    assert directory(keystore, clock).count() == 1  # auth off: the open tenant alone
    assert directory(keystore, clock, env="team-a:k1,team-a:k2").count() == 1
    assert directory(keystore, clock, env="k1,k2").count() == 2  # a tenant each
    keystore.create("team-b")
    keystore.create("team-b")
    tenants = directory(keystore, clock, env="team-a:k1", cache_seconds=5.0)
    assert tenants.count() == 2
    keystore.create("team-c")
    assert tenants.count() == 2  # read again once the cache runs out
    clock.now += 5.1
    assert tenants.count() == 3


def test_tenancy_a_revoked_key_works_until_the_cache_runs_out(keystore: KeyStore) -> None:
    clock = Clock()
    token, stored = keystore.create("team-a")
    tenants = directory(keystore, clock, cache_seconds=5.0)
    assert tenants.resolve(f"Bearer {token}").name == "team-a"

    keystore.revoke(stored.id)  # the last key: auth stays on all the same
    clock.now += 4.9
    assert tenants.resolve(f"Bearer {token}").name == "team-a"  # the documented delay
    clock.now += 0.2
    with pytest.raises(AuthenticationError):
        tenants.resolve(f"Bearer {token}")


def test_tenancy_requests_arriving_together_share_one_read_of_an_entry(
    keystore: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of connections on a cold (or just expired) cache reads Redis once, not each."""
    reads = 0
    is_auth_on = keystore.is_auth_on

    def slow_is_auth_on() -> bool:
        nonlocal reads
        reads += 1
        time.sleep(0.2)  # a round trip in a busy process: the others arrive meanwhile
        return is_auth_on()

    monkeypatch.setattr(keystore, "is_auth_on", slow_is_auth_on)
    clock = Clock()
    tenants = directory(keystore, clock, cache_seconds=5.0)
    with ThreadPoolExecutor(20) as pool:
        names = list(pool.map(lambda _: tenants.resolve(None).name, range(20)))

    assert names == [OPEN_TENANT] * 20
    assert reads == 1
    clock.now += 5.1  # expired: the next burst reads once more
    with ThreadPoolExecutor(20) as pool:
        list(pool.map(lambda _: tenants.resolve(None), range(20)))
    assert reads == 2


def test_tenancy_a_stale_entry_serves_while_another_request_reads_it(
    keystore: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the request that reads waits for Redis; the others take the value it replaces.

    Waiting on the read's lock, the requests of a burst were all woken in one pass of the
    gateway's loop when the read ended (gevent), and held it for seconds.
    """
    is_auth_on = keystore.is_auth_on
    reading, answer = threading.Event(), threading.Event()

    def held_is_auth_on() -> bool:
        reading.set()
        answer.wait(10)
        return is_auth_on()

    clock = Clock()
    tenants = directory(keystore, clock, cache_seconds=5.0)
    assert tenants.is_open()  # read and cached: nothing stored
    monkeypatch.setattr(keystore, "is_auth_on", held_is_auth_on)
    clock.now += 5.1
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(tenants.is_open)
        assert reading.wait(10)
        assert tenants.is_open()  # the stale value, while the first read is held
        assert not first.done()
        answer.set()
        assert first.result(10)


def test_tenancy_tenant_limits_are_the_defaults_under_its_own(keystore: KeyStore) -> None:
    clock = Clock()
    token, _ = keystore.create("team-a")
    keystore.set_limits("team-a", {"max_in_flight": 3})
    tenant = directory(keystore, clock).resolve(f"bearer  {token} ")

    assert tenant.limits == Limits(requests_per_minute=10, max_in_flight=3)


@pytest.mark.parametrize(
    "authorization",
    ["Bearer clé-€", "Bearer \udcff", "Bearer ключ", "Bearer \x00", "Bearer ", "Bearer", "ключ"],
)
def test_tenancy_any_token_is_a_401_never_a_type_error(
    keystore: KeyStore, authorization: str
) -> None:
    with pytest.raises(AuthenticationError):
        directory(keystore, Clock(), env="k").resolve(authorization)
