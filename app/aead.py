"""Authenticated encryption for what the fleet seals, and the fleet's generated keys.

One construction for every sealed value (compaction items, per-request MCP headers):
AES-256-GCM with a fresh 96-bit nonce per message, laid out as ``nonce ‖ ciphertext+tag``.
Callers pick the associated data (what a token is bound to) and the text encoding around it.
"""

from __future__ import annotations

import secrets

import redis

_NONCE_BYTES = 12


class Aead:
    """AES-256-GCM under one 32-byte key."""

    def __init__(self, key: bytes):
        # imported here: cryptography costs a process ~8 MB, and most never seal anything
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)

    def seal(self, plain: bytes, associated: bytes) -> bytes:
        """``plain`` encrypted and authenticated, with ``associated`` bound to it."""
        nonce = secrets.token_bytes(_NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plain, associated)

    def open(self, sealed: bytes, associated: bytes) -> bytes:
        """The plain text of ``sealed``.

        Raises:
            ValueError: not sealed under this key with this associated data, or altered.
        """
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], associated)
        except InvalidTag:
            raise ValueError("the sealed value cannot be opened with this key") from None


def generated_key(client: redis.Redis, key: str) -> str:
    """A random 256-bit key (hex) made once for the whole fleet and kept in Redis at ``key``.

    The first process to need it stores it with ``SET NX``; every replica then reads the same.
    """
    client.set(key, secrets.token_hex(32), nx=True)
    stored = client.get(key)
    if stored is None:  # pragma: no cover - deleted between SET NX and GET
        raise RuntimeError(f"the generated key {key} vanished from Redis")
    return stored.decode() if isinstance(stored, bytes) else str(stored)
