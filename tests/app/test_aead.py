"""The one sealing construction: AES-256-GCM, nonce ‖ ciphertext, bound to associated data."""

from __future__ import annotations

import secrets

import pytest
import redis

from app.aead import Aead, generated_key


def test_aead_opens_what_it_sealed_and_nothing_else() -> None:
    aead = Aead(secrets.token_bytes(32))
    sealed = aead.seal(b"the secret", b"label-a")

    assert aead.open(sealed, b"label-a") == b"the secret"
    assert aead.seal(b"the secret", b"label-a") != sealed  # a fresh nonce every time
    with pytest.raises(ValueError):
        aead.open(sealed, b"label-b")  # bound to its associated data
    with pytest.raises(ValueError):
        aead.open(sealed[:-1] + bytes([sealed[-1] ^ 1]), b"label-a")  # altered
    with pytest.raises(ValueError):
        Aead(secrets.token_bytes(32)).open(sealed, b"label-a")  # another key


def test_generated_key_is_made_once_for_the_fleet(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    first = generated_key(redis_client, f"{key_prefix}seal")
    assert len(bytes.fromhex(first)) == 32
    assert generated_key(redis_client, f"{key_prefix}seal") == first  # every replica: the same
    assert generated_key(redis_client, f"{key_prefix}other") != first
