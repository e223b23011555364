"""The engine: the protocol, the loop (``run``), the store, the tools; no framework.

Importing it first settles one process-wide switch, ``ANTWORT_HIREDIS`` (default on): redis-py
parses replies and packs commands with hiredis's C code whenever it can import ``hiredis``
(a pinned dependency), and ``ANTWORT_HIREDIS=0`` makes it not importable here, so redis-py,
kombu's Redis transport included, stays on its pure-Python parser and packer. That must happen
before anything imports ``redis``: every process of the fleet imports this package before
anything else that does (``gateway/__init__``, ``workers.main``; tests/app/test_hiredis.py holds
them to it).
"""

from __future__ import annotations

import os
import sys

_OFF = ("0", "false", "f", "no", "n", "off")  # pydantic's false values (Settings.hiredis)

if os.environ.get("ANTWORT_HIREDIS", "").strip().lower() in _OFF and "redis" not in sys.modules:
    sys.modules["hiredis"] = None  # type: ignore[assignment] # the import system's "not here"
