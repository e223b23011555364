"""Sealed ``compaction`` items: the conversation so far, opaque to clients, readable only here.

A compaction item's ``encrypted_content`` is ``ac1.`` + base64url(nonce ‖ AES-256-GCM
ciphertext) of a small JSON record (the model's summary, the model, the time). GCM
authenticates it, so a client can neither read nor forge nor alter one: any change is a 400.
The key is the ``compaction_key`` setting (hashed to 256 bits) or, when unset, a random key
that the first process to need one stores in Redis (``SET NX``), so every replica of gateway
and workers seals and opens with the same key.

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

import redis

from app.aead import Aead, generated_key
from app.config import Settings
from app.errors import InvalidRequestError
from app.keys import Keys
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
    owner: str = ""
    """The tenant that compacted (:mod:`app.ownership`): only it may send the item back."""


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
                owner=str(fields.get("owner", "")),
            )
        except (ValueError, binascii.Error, KeyError, TypeError):
            raise self.invalid(param) from None

    @staticmethod
    def invalid(param: str | None) -> InvalidCompactionError:
        """The error of an item this server did not seal (for this tenant), or an altered one."""
        return InvalidCompactionError(
            "The compaction item's encrypted_content is invalid: it was not produced by this "
            "server or it was altered.",
            param=param,
        )


def load_sealer(client: redis.Redis, keys: Keys, configured: str | None) -> Sealer:
    """The fleet's sealer: the configured secret's, else the key kept in Redis (made once)."""
    if configured:
        return Sealer(hashlib.sha256(configured.encode()).digest())
    return Sealer(bytes.fromhex(generated_key(client, keys.compaction_key)))


def fleet_sealer(store: ResponseStore, settings: Settings) -> Sealer:
    """:func:`load_sealer` for the store's Redis and keyspace."""
    return load_sealer(store.redis, store.keys, settings.compaction_key)


def has_compaction(items: Sequence[dict[str, Any]]) -> bool:
    """Whether any item is a ``compaction`` item."""
    return any(item.get("type") == "compaction" for item in items)


def check_compactions(
    store: ResponseStore, settings: Settings, inputs: Sequence[dict[str, Any]], *, owner: str
) -> None:
    """Every ``compaction`` input item was sealed here for ``owner`` and is intact.

    Raises:
        InvalidCompactionError: with ``param`` naming the first bad item; another tenant's item
            is refused like a forged one.
    """
    if not has_compaction(inputs):
        return
    sealer = fleet_sealer(store, settings)
    for index, item in enumerate(inputs):
        if item.get("type") == "compaction":
            param = f"input.{index}.encrypted_content"
            if sealer.open(item["encrypted_content"], param=param).owner != owner:
                raise sealer.invalid(param)


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
