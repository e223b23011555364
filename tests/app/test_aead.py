"""The one sealing construction: AES-256-GCM, nonce ‖ ciphertext, bound to associated data."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from app.aead import Aead, MissingSecretError, fleet_secret


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


def test_fleet_secret_is_made_once_per_file_and_differs_by_purpose(tmp_path: Path) -> None:
    path = str(tmp_path / "secrets.key")

    first = fleet_secret(path, "seal", setting="X")

    assert len(first) == 32
    assert fleet_secret(path, "seal", setting="X") == first  # every process: the same
    assert fleet_secret(path, "other", setting="X") != first
    assert fleet_secret(str(tmp_path / "another.key"), "seal", setting="X") != first


def test_fleet_secret_without_a_file_is_refused_naming_the_setting() -> None:
    with pytest.raises(MissingSecretError, match="ANTWORT_SOME_KEY"):
        fleet_secret(None, "seal", setting="ANTWORT_SOME_KEY")
