"""The engine: the protocol, the loop (``run``), the store, the tools; no framework.

Importing it first settles one process-wide switch, ``ANTWORT_HIREDIS`` (default on): redis-py
parses replies and packs commands with hiredis's C code whenever it can import ``hiredis``
(a pinned dependency), and ``ANTWORT_HIREDIS=0`` makes it not importable here, so redis-py,
kombu's Redis transport included, stays on its pure-Python parser and packer. That must happen
before anything imports ``redis``: every process of the fleet imports this package before
anything else that does (``gateway/__init__``, ``workers/__init__``;
tests/app/test_hiredis.py holds them to it).
"""

from __future__ import annotations

import os
import sys

from pydantic import TypeAdapter, ValidationError


def _switched_off(name: str) -> bool:
    """Whether the boolean setting ``name`` is set false, read as ``Settings`` reads it."""
    value = os.environ.get(name)
    if value is None:
        return False
    try:
        return not TypeAdapter(bool).validate_python(value)
    except ValidationError:
        return False  # not a boolean: Settings() refuses it when the process starts


if _switched_off("ANTWORT_HIREDIS") and "redis" not in sys.modules:
    sys.modules["hiredis"] = None  # type: ignore[assignment] # the import system's "not here"
