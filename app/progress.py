"""Plan and step titles: the ``antwort:progress`` vendor extension of the event stream.

A request that lists ``"antwort:progress"`` in ``include`` gets three extra event types, all
prefixed ``antwort:`` as the Open Responses extension rules require: ``antwort:plan`` (the
model's plan, JSON tool protocol only), ``antwort:step.started`` (a tool call with a
human-readable title) and ``antwort:step.completed`` (its result arrived). Requests that do not
ask see only the standard events.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PROGRESS_INCLUDE = "antwort:progress"
"""The ``include`` value that turns the extension on."""

_MAX_TITLE = 80
_MAX_VALUE = 40


def wants_progress(extra: Mapping[str, Any]) -> bool:
    """Whether the request (its stored ``extra``) asked for progress events."""
    return PROGRESS_INCLUDE in (extra.get("include") or [])


def step_title(name: str, arguments: str) -> str:
    """A title for a call the model made without one: the tool and its arguments, shortened.

    ``calculator`` with ``{"expression": "6*7"}`` becomes ``calculator: expression=6*7``.
    """
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed:
        shown = ", ".join(f"{key}={_short(value)}" for key, value in parsed.items())
        title = f"{name}: {shown}"
    else:
        title = name
    return title if len(title) <= _MAX_TITLE else title[: _MAX_TITLE - 1] + "…"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"
