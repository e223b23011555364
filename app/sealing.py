"""Sealed ``compaction`` items: the conversation so far, opaque to clients, readable only here.

A compaction item's ``encrypted_content`` is ``ac1.`` + base64url(nonce ‖ AES-256-GCM
ciphertext) of a small JSON record (the model's summary, the model, the time). GCM
authenticates it, so a client can neither read nor forge nor alter one: any change is a 400.
The key is the ``compaction_key`` setting (hashed to 256 bits) or, when unset, one derived from
the fleet's generated key in ``secrets_file`` (``app.aead.fleet_secret``); never a key in Redis.

Before a model call, :func:`model_items` replaces each compaction item by what it stands for:
an assistant message carrying the summary.

Reasoning items are sealed the same way (``ar1.``, their own associated data) when a request
includes ``reasoning.encrypted_content``: a client that keeps no state on the server
(``store: false``) sends them back, and the model reads its reasoning again where its server
takes it (:func:`model_items`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from app import cooperation
from app.aead import Aead, fleet_secret
from app.config import Settings
from app.errors import InvalidRequestError
from app.store import ResponseStore

_VERSION = "ac1."
_AAD = b"antwort-fleet compaction v1"
ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""The ``include`` entry that asks for sealed reasoning on reasoning items."""
_REASONING_VERSION = "ar1."
_REASONING_AAD = b"antwort-fleet reasoning v1"
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


class InvalidReasoningError(InvalidRequestError):
    """A reasoning item's ``encrypted_content`` this server did not seal, or altered (400)."""

    default_code = "invalid_encrypted_content"


class Sealer:
    """Seals and opens compaction states and reasoning with one AES-256-GCM key."""

    def __init__(self, key: bytes):
        self._aead = Aead(key)

    def seal(self, state: CompactedState) -> str:
        """The ``encrypted_content`` of ``state``."""
        plain = json.dumps(asdict(state), separators=(",", ":")).encode()
        return self._seal(plain, _VERSION, _AAD)

    def open(self, token: str, *, param: str | None = None) -> CompactedState:
        """The state sealed in ``token``.

        Raises:
            InvalidCompactionError: not sealed by this server's key, or altered.
        """
        try:
            fields = json.loads(self._open(token, _VERSION, _AAD))
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

    def seal_reasoning(self, text: str) -> str:
        """The ``encrypted_content`` of a reasoning item whose reasoning is ``text``."""
        return self._seal(text.encode(), _REASONING_VERSION, _REASONING_AAD)

    def open_reasoning(self, token: str, *, param: str | None = None) -> str:
        """The reasoning sealed in ``token``.

        Raises:
            InvalidReasoningError: not sealed by this server's key, or altered.
        """
        try:
            return self._open(token, _REASONING_VERSION, _REASONING_AAD).decode()
        except (ValueError, binascii.Error):
            raise InvalidReasoningError(
                "The reasoning item's encrypted_content is invalid: it was not produced by this "
                "server or it was altered.",
                param=param,
            ) from None

    def _seal(self, plain: bytes, version: str, aad: bytes) -> str:
        sealed = self._aead.seal(plain, aad)
        return version + base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def _open(self, token: str, version: str, aad: bytes) -> bytes:
        """Raises ValueError (or binascii.Error) for anything but an intact token of ours."""
        if not token.startswith(version):
            raise ValueError("unknown version")
        body = token[len(version) :]
        return self._aead.open(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)), aad)


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


def is_sealed(item: dict[str, Any]) -> bool:
    """Whether showing ``item`` to the model takes the fleet's key: compaction, sealed reasoning."""
    kind = item.get("type")
    return kind == "compaction" or (kind == "reasoning" and bool(item.get("encrypted_content")))


def check_sealed_items(
    store: ResponseStore, settings: Settings, inputs: Sequence[dict[str, Any]], *, owner: str
) -> None:
    """Every sealed input item (``compaction``, reasoning's ``encrypted_content``) is ours, intact.

    Raises:
        InvalidCompactionError: with ``param`` naming the first bad compaction item; another
            tenant's compaction item is refused like a forged one.
        InvalidReasoningError: with ``param`` naming the first bad reasoning item.
    """
    if not any(is_sealed(item) for item in cooperation.each(inputs)):
        return
    sealer = fleet_sealer(store, settings)
    for index, item in enumerate(cooperation.each(inputs, every=100)):  # each one a decryption
        param = f"input.{index}.encrypted_content"
        if item.get("type") == "compaction":
            if sealer.open(item["encrypted_content"], param=param).owner != owner:
                raise sealer.invalid(param)
        elif is_sealed(item):
            sealer.open_reasoning(item["encrypted_content"], param=param)


def summary_message(summary: str) -> dict[str, Any]:
    """The message the model sees in place of a compaction item."""
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": f"{SUMMARY_HEADER}\n{summary}"}],
    }


def open_items(sealer: Sealer, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with each compaction item replaced by its summary message, without reasoning."""
    return [
        summary_message(sealer.open(item["encrypted_content"]).summary)
        if item.get("type") == "compaction"
        else item
        for item in items
        if item.get("type") != "reasoning"
    ]


def reasoning_text(sealer: Sealer | None, item: dict[str, Any]) -> str:
    """A reasoning item's reasoning: its text, else what its ``encrypted_content`` seals."""
    text = "".join(part.get("text", "") for part in item.get("content") or [])
    if text or sealer is None or not item.get("encrypted_content"):
        return text
    return sealer.open_reasoning(item["encrypted_content"])


def model_items(
    store: ResponseStore, settings: Settings, items: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The items a model call sees: compaction items opened, earlier reasoning as text.

    Reasoning goes back to the model only where its server takes it (``llm_reasoning_replay``:
    vLLM's ``reasoning_content``); else it is left out. No key is read without sealed items.
    """
    sealer = fleet_sealer(store, settings) if any(is_sealed(i) for i in items) else None
    viewed: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "compaction":
            assert sealer is not None
            viewed.append(summary_message(sealer.open(item["encrypted_content"]).summary))
        elif kind != "reasoning":
            viewed.append(item)
        elif settings.llm_reasoning_replay and (text := reasoning_text(sealer, item)):
            viewed.append({**item, "content": [{"type": "reasoning_text", "text": text}]})
    return viewed
