r"""Client JSON as the fleet accepts it: parsed, bounded in depth, valid Unicode throughout.

Python's parser takes JSON nested thousands deep (until it hits the recursion limit) and strings
holding lone surrogates (``"\ud800"``), which no UTF-8 encoder will write: either would fail
later, far from the request, as a 500. Both are refused here, at the edge, as a 400.
"""

from __future__ import annotations

import json
from typing import Any

from app.errors import InvalidRequestError

MAX_DEPTH = 64
"""How deeply arrays and objects may nest in a request (OpenAI's own bodies need under 15)."""


def load_json(raw: str | bytes) -> Any:
    """The value ``raw`` holds, checked by :func:`check_json_value`.

    Raises:
        InvalidRequestError: not JSON (``invalid_json``), nested deeper than :data:`MAX_DEPTH`
            or holding a lone surrogate (``invalid_value``).
    """
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested past Python's own limit
        raise InvalidRequestError(
            "We could not parse the JSON body of your request.", code="invalid_json"
        ) from None
    check_json_value(value)
    return value


def check_json_value(value: Any) -> None:
    """Refuse a parsed value nested too deeply or holding text that is not valid Unicode.

    Walks the value without recursion, so any depth is safe to check.

    Raises:
        InvalidRequestError: the first problem found.
    """
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, str):
            _check_text(current)
        elif isinstance(current, dict | list):
            if depth >= MAX_DEPTH:
                raise InvalidRequestError(
                    f"The JSON body nests arrays and objects deeper than {MAX_DEPTH} levels.",
                    code="invalid_value",
                )
            children = [*current, *current.values()] if isinstance(current, dict) else current
            pending.extend((child, depth + 1) for child in children)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(
            "The JSON body holds a lone surrogate (\\ud800-\\udfff): not valid Unicode text.",
            code="invalid_value",
        ) from None
