"""Tenants and their API keys: who a bearer key is, and what that tenant may do.

A key belongs to one tenant. Keys come from two places: ``ANTWORT_API_KEYS`` (each key a tenant
of its own, unless written ``tenant:key``) and the key store in Redis (``antwort keys``), which
keeps only the SHA-256 of each key, never the key itself. The gateway resolves a bearer token
through :class:`TenantDirectory`: environment keys in memory, stored keys in Redis behind a short
local cache, so a key created or revoked while the fleet runs takes effect within
``key_cache_seconds`` on every gateway process.

When no key is configured anywhere the fleet is open: every request is the tenant
:data:`OPEN_TENANT` (the empty name), which owns what it creates like any other tenant. Once a
key was stored, auth stays on even after the last key is revoked (revoking must never open the
fleet to everyone).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import redis

from app.errors import AuthenticationError
from app.keys import Keys

OPEN_TENANT = ""
"""The tenant of every request while no key is configured."""
KEY_PREFIX = "ak-"
"""How keys made by ``antwort keys create`` begin."""
_TENANT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
LIMIT_NAMES = ("requests_per_minute", "tokens_per_minute", "max_in_flight")


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """A tenant's limits; 0 means unlimited."""

    requests_per_minute: int = 0
    """Requests of any kind to ``/v1`` per minute."""
    tokens_per_minute: int = 0
    """Tokens per minute: a create's estimate, then what its model took past it (app.limits)."""
    max_in_flight: int = 0
    """Responses queued or running at once."""

    def over(self, overrides: dict[str, int]) -> Limits:
        """These limits with a tenant's own values in place of the defaults."""
        return replace(self, **{k: v for k, v in overrides.items() if k in LIMIT_NAMES})


@dataclass(frozen=True, slots=True, kw_only=True)
class Tenant:
    """Who made a request."""

    name: str
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredKey:
    """What the key store keeps of a key (never the key)."""

    id: str
    """``key_…``: how ``antwort keys list|revoke`` name it."""
    tenant: str
    hint: str
    """The key's first and last characters, to recognise it."""
    created_at: int


def check_tenant_name(name: str) -> str:
    """A tenant name: 1-64 letters, digits, ``_``, ``.`` or ``-``.

    Raises:
        ValueError: anything else.
    """
    if not _TENANT_NAME.match(name):
        raise ValueError(f"a tenant name has 1-64 letters, digits, '_', '.' or '-': {name!r}")
    return name


def key_digest(token: str) -> str:
    """SHA-256 (hex) of a bearer token; any text, even one that is not ASCII."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def parse_env_keys(raw: str | None) -> dict[str, str]:
    """``ANTWORT_API_KEYS`` as digest → tenant (``key`` alone: a tenant named by its digest).

    Raises:
        ValueError: a ``tenant:key`` entry with a bad tenant name or no key.
    """
    found: dict[str, str] = {}
    for entry in (raw or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        tenant, sep, key = entry.partition(":")
        if not sep:
            key, tenant = entry, "env-" + key_digest(entry)[:12]
        elif not key.strip():
            raise ValueError(f"ANTWORT_API_KEYS entry for tenant {tenant!r} has no key")
        found[key_digest(key.strip())] = check_tenant_name(tenant.strip())
    return found


class KeyStore:
    """API keys and tenant limits in Redis (``antwort keys``); keys kept as SHA-256 only."""

    def __init__(self, client: redis.Redis, keys: Keys):
        self.redis = client
        self.keys = keys

    def create(self, tenant: str) -> tuple[str, StoredKey]:
        """A new key for ``tenant``: the key (shown once) and what is stored of it."""
        token = KEY_PREFIX + secrets.token_urlsafe(32)
        digest = key_digest(token)
        stored = StoredKey(
            id="key_" + digest[:16],
            tenant=check_tenant_name(tenant),
            hint=f"{token[:7]}…{token[-4:]}",
            created_at=int(time.time()),
        )
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.api_keys, digest, json.dumps(_as_dict(stored)))
        pipe.set(self.keys.auth_on, "1")
        pipe.execute()
        return token, stored

    def lookup(self, token: str) -> StoredKey | None:
        """The stored key ``token`` is, or None."""
        raw = self.redis.hget(self.keys.api_keys, key_digest(token))
        return None if raw is None else StoredKey(**json.loads(raw))

    def all(self) -> list[StoredKey]:
        """Every stored key, oldest first."""
        found = [StoredKey(**json.loads(raw)) for raw in self.redis.hvals(self.keys.api_keys)]
        return sorted(found, key=lambda key: (key.created_at, key.id))

    def tenants(self) -> set[str]:
        """The tenants with a stored key."""
        return {key.tenant for key in self.all()}

    def is_auth_on(self) -> bool:
        """Whether a key was ever stored: auth stays on, even once every key is revoked."""
        return bool(self.redis.exists(self.keys.auth_on))

    def revoke(self, key_id: str) -> StoredKey | None:
        """Remove the key ``key_id`` (None: no such key)."""
        for digest, raw in self.redis.hgetall(self.keys.api_keys).items():
            stored = StoredKey(**json.loads(raw))
            if stored.id == key_id and self.redis.hdel(self.keys.api_keys, digest):
                return stored
        return None

    def limits_of(self, tenant: str) -> dict[str, int]:
        """The tenant's own limits (the fleet's defaults apply to the rest)."""
        raw = self.redis.hgetall(self.keys.tenant_limits(tenant))
        return {_text(name): int(value) for name, value in raw.items()}

    def set_limits(self, tenant: str, limits: dict[str, int | None]) -> dict[str, int]:
        """Set (a number) or clear (None) some of the tenant's own limits; returns them all."""
        key = self.keys.tenant_limits(check_tenant_name(tenant))
        pipe = self.redis.pipeline(transaction=True)
        for name, value in limits.items():
            if value is None:
                pipe.hdel(key, name)
            else:
                pipe.hset(key, name, value)
        pipe.execute()
        return self.limits_of(tenant)


def _as_dict(stored: StoredKey) -> dict[str, Any]:
    return {
        "id": stored.id,
        "tenant": stored.tenant,
        "hint": stored.hint,
        "created_at": stored.created_at,
    }


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


@dataclass(slots=True)
class _Cached:
    value: Any
    until: float


class TenantDirectory:
    """Resolves bearer tokens to tenants for the gateway.

    Stored keys, tenant limits and whether any key is stored are read from Redis at most once per
    ``cache_seconds`` for each token (and tenant): a revoked key keeps working for at most that
    long on a gateway process that used it just before.
    """

    def __init__(
        self,
        store: KeyStore,
        *,
        env_keys: dict[str, str],
        defaults: Limits,
        cache_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.env_keys = env_keys
        self.defaults = defaults
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._cache: dict[tuple[str, str], _Cached] = {}
        self._reading: dict[tuple[str, str], threading.Lock] = {}  # one per entry being read
        self._lock = threading.Lock()

    def is_open(self) -> bool:
        """Whether no key is configured: auth is off (env keys are fixed; stored ones cached)."""
        return not self.env_keys and bool(self._cached("open", "", self._nothing_stored))

    def count(self) -> int:
        """How many tenants the fleet has: 1 while auth is off (the open tenant).

        Else those with a key, environment and stored ones (read at most once per
        ``cache_seconds``).
        """
        if self.is_open():
            return 1
        stored: set[str] = self._cached("tenants", "", self._stored_tenants)
        return len({*self.env_keys.values(), *stored})

    def _stored_tenants(self, _: str) -> set[str]:
        return self.store.tenants()

    def _nothing_stored(self, _: str) -> bool:
        return not self.store.is_auth_on()

    def resolve(self, authorization: str | None) -> Tenant:
        """The tenant of an ``Authorization`` header (the open tenant when auth is off).

        Raises:
            AuthenticationError: no bearer token, or one that is no key (401).
        """
        if self.is_open():
            return Tenant(name=OPEN_TENANT, limits=self.defaults)
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        name = None
        if scheme.lower() == "bearer" and token:
            digest = key_digest(token)
            name = self.env_keys.get(digest) or self._cached("key", digest, self._stored_tenant)
        if not name:
            raise AuthenticationError("Incorrect or missing API key.")
        return self.tenant(name)

    def tenant(self, name: str) -> Tenant:
        """The tenant ``name`` with its limits (the defaults under its own overrides)."""
        overrides: dict[str, int] = self._cached("limits", name, self.store.limits_of)
        return Tenant(name=name, limits=self.defaults.over(overrides))

    def _stored_tenant(self, digest: str) -> str | None:
        raw = self.store.redis.hget(self.store.keys.api_keys, digest)
        return None if raw is None else str(json.loads(raw)["tenant"])

    def _cached(self, kind: str, name: str, read: Callable[[str], Any]) -> Any:
        """The value ``read`` gave at most ``cache_seconds`` ago; one read at a time per entry.

        A request that finds the entry stale while another reads it takes the value that read
        replaces; one that finds no entry waits for that read. 10,000 clients connecting at once
        would otherwise send 10,000 reads of one entry, each holding a pooled connection the
        others queue for; and waiting on the read's lock at each expiry, the requests were all
        woken in one pass when it ended (gevent notifies a lock's waiters in one callback):
        3,000 WebSocket handshakes back to back held a gateway's loop, ``/healthz`` too, 2 s.
        """
        entry = self._cache.get((kind, name))
        if entry is not None and entry.until > self.clock():
            return entry.value
        with self._lock:
            reading = self._reading.setdefault((kind, name), threading.Lock())
        if entry is None:
            reading.acquire()  # nothing to serve meanwhile: wait for a read under way, if any
        elif not reading.acquire(blocking=False):
            return entry.value  # being read: the stale value serves until that read ends
        try:
            entry = self._cache.get((kind, name))
            now = self.clock()
            if entry is None or entry.until <= now:
                if len(self._cache) > 10_000:  # tokens that are no keys must not grow it forever
                    self._cache.clear()
                entry = self._cache[(kind, name)] = _Cached(read(name), now + self.cache_seconds)
        finally:
            reading.release()
        with self._lock:
            if len(self._reading) > 10_000:
                self._reading.clear()  # a lock in use is held by its users, not only here
        return entry.value
