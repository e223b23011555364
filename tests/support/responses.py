"""A stored response for tests that need one to write events to."""

from __future__ import annotations

import time
import uuid
from typing import Any

from app.protocol.response import ResponseObject, ResponseStatus
from app.store import ResponseStore


def stored_response(store: ResponseStore, /, **fields: Any) -> ResponseObject:
    """An ``in_progress`` response (with ``fields``), created in ``store`` with no inputs."""
    values: dict[str, Any] = {
        "id": f"resp_{uuid.uuid4().hex}",
        "created_at": int(time.time()),
        "status": ResponseStatus.IN_PROGRESS,
        "model": "test-model",
        **fields,
    }
    response = ResponseObject(**values)
    store.create(response, inputs=[], extra={}, events=[])
    return response
