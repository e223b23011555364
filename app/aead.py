"""Authenticated encryption for what the fleet seals, and the fleet's generated key.

One construction for every sealed value (compaction items, per-request MCP headers):
AES-256-GCM with a fresh 96-bit nonce per message, laid out as ``nonce ‖ ciphertext+tag``.
Callers pick the associated data (what a token is bound to) and the text encoding around it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from pathlib import Path

from app.errors import ServerError

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


class MissingSecretError(ServerError):
    """No key is configured to seal with, and no ``secrets_file`` to keep a generated one in."""

    default_code = "secret_key_missing"


def fleet_secret(secrets_file: str | None, purpose: str, *, setting: str) -> bytes:
    """A 256-bit key for ``purpose``, derived from the fleet's generated key in ``secrets_file``.

    The first process to need the file makes it (mode 0600, exclusively); every other reads it.
    It is never kept in Redis: a reader of Redis alone must not open what is sealed.

    Raises:
        MissingSecretError: ``secrets_file`` is unset (say which ``setting`` to configure).
    """
    if not secrets_file:
        raise MissingSecretError(
            f"The fleet has no key to seal with: set {setting} (or ANTWORT_SECRETS_FILE)."
        )
    path = Path(secrets_file)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))
    master = _read_key(path)
    return hashlib.sha256(master + b"\0" + purpose.encode()).digest()


def _read_key(path: Path) -> bytes:
    for _ in range(50):  # another process made the file an instant ago and is writing it
        text = path.read_text().strip()
        if len(text) == 64:
            return bytes.fromhex(text)
        time.sleep(0.01)
    raise MissingSecretError(f"ANTWORT_SECRETS_FILE {str(path)!r} does not hold a key.")
