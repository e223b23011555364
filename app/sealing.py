"""Sealed ``compaction`` items: the conversation so far, opaque to clients, readable only here.

A compaction item's ``encrypted_content`` is ``ac1.`` + base64url(nonce ‖ AES-256-GCM
ciphertext) of a small JSON record (the model's summary, the model, the time). GCM
authenticates it, so a client can neither read nor forge nor alter one: any change is a 400.
The key is the ``compaction_key`` setting (hashed to 256 bits) or, when unset, one derived from
the fleet's generated key in ``secrets_file`` (``app.aead.fleet_secret``); never a key in Redis.

Before a model call, :func:`model_items` replaces each compaction item by what it stands for:
an assistant message carrying the summary.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from app.aead import Aead, fleet_secret
from app.config import Settings
from app.errors import InvalidRequestError
from app.store import ResponseStore

_VERSION = "ac1."
_AAD = b"antwort-fleet compaction v1"
SUMMARY_HEADER = "Summary of the conversation so far:"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactedState:
    """What a compaction item holds."""

    summary: str
    """The model's summary of the conversation it replaces."""
    model: str
    """The model that wrote the summary."""
    created_at: int
    """When (Unix seconds)."""


class InvalidCompactionError(InvalidRequestError):
    """A ``compaction`` item this server did not seal, or one that was altered (400)."""

    default_code = "invalid_encrypted_content"


class Sealer:
    """Seals and opens compaction states with one AES-256-GCM key."""

    def __init__(self, key: bytes):
        self._aead = Aead(key)

    def seal(self, state: CompactedState) -> str:
        """The ``encrypted_content`` of ``state``."""
        plain = json.dumps(asdict(state), separators=(",", ":")).encode()
        sealed = self._aead.seal(plain, _AAD)
        return _VERSION + base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def open(self, token: str, *, param: str | None = None) -> CompactedState:
        """The state sealed in ``token``.

        Raises:
            InvalidCompactionError: not sealed by this server's key, or altered.
        """
        try:
            if not token.startswith(_VERSION):
                raise ValueError("unknown version")
            body = token[len(_VERSION) :]
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            fields = json.loads(self._aead.open(raw, _AAD))
            return CompactedState(
                summary=str(fields["summary"]),
                model=str(fields["model"]),
                created_at=int(fields["created_at"]),
            )
        except (ValueError, binascii.Error, KeyError, TypeError):
            raise InvalidCompactionError(
                "The compaction item's encrypted_content is invalid: it was not produced by this "
                "server or it was altered.",
                param=param,
            ) from None


def load_sealer(configured: str | None, secrets_file: str | None) -> Sealer:
    """The fleet's sealer: the configured secret's, else one from the key in ``secrets_file``.

    Raises:
        MissingSecretError: neither is configured.
    """
    if configured:
        return Sealer(hashlib.sha256(configured.encode()).digest())
    return Sealer(fleet_secret(secrets_file, "compaction", setting="ANTWORT_COMPACTION_KEY"))


def fleet_sealer(store: ResponseStore, settings: Settings) -> Sealer:
    """:func:`load_sealer` of the settings."""
    return load_sealer(settings.compaction_key, settings.secrets_file)


def has_compaction(items: Sequence[dict[str, Any]]) -> bool:
    """Whether any item is a ``compaction`` item."""
    return any(item.get("type") == "compaction" for item in items)


def check_compactions(
    store: ResponseStore, settings: Settings, inputs: Sequence[dict[str, Any]]
) -> None:
    """Every ``compaction`` input item was sealed here and is intact.

    Raises:
        InvalidCompactionError: with ``param`` naming the first bad item.
    """
    if not has_compaction(inputs):
        return
    sealer = fleet_sealer(store, settings)
    for index, item in enumerate(inputs):
        if item.get("type") == "compaction":
            sealer.open(item["encrypted_content"], param=f"input.{index}.encrypted_content")


def summary_message(summary: str) -> dict[str, Any]:
    """The message the model sees in place of a compaction item."""
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": f"{SUMMARY_HEADER}\n{summary}"}],
    }


def open_items(sealer: Sealer, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with each compaction item replaced by its summary message."""
    return [
        summary_message(sealer.open(item["encrypted_content"]).summary)
        if item.get("type") == "compaction"
        else item
        for item in items
    ]


def model_items(
    store: ResponseStore, settings: Settings, items: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The items a model call sees: compaction items opened (no key is read when there are none)."""
    if not has_compaction(items):
        return list(items)
    return open_items(fleet_sealer(store, settings), items)
