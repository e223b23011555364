"""The model server's list of models, cached briefly (the gateway's ``GET /v1/models``)."""

from __future__ import annotations

import threading
import time
from typing import Any

from app.providers.openai_chat import ChatCompletionsProvider


class ModelLister:
    """Lists the provider's models; keeps the answer for ``ttl`` seconds."""

    def __init__(
        self, provider: ChatCompletionsProvider, *, default_model: str | None, ttl: float = 30.0
    ):
        self._provider = provider
        self._default_model = default_model
        self._ttl = ttl
        self._cached: tuple[float, list[dict[str, Any]]] | None = None
        self._lock = threading.Lock()

    def list(self) -> list[dict[str, Any]]:
        """The models, as ``{id, object, created, owned_by}``."""
        with self._lock:
            if self._cached and time.monotonic() - self._cached[0] < self._ttl:
                return self._cached[1]
        data = [
            {
                "id": str(model.get("id")),
                "object": "model",
                "created": int(model.get("created") or 0),
                "owned_by": str(model.get("owned_by") or "antwort"),
            }
            for model in self._provider.list_models()
        ]
        if self._default_model and all(model["id"] != self._default_model for model in data):
            data.insert(
                0,
                {"id": self._default_model, "object": "model", "created": 0, "owned_by": "antwort"},
            )
        with self._lock:
            self._cached = (time.monotonic(), data)
        return data

    def close(self) -> None:
        """Release the provider's pooled connections."""
        self._provider.close()
