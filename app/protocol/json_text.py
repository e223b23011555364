r"""Client JSON as the fleet accepts it: parsed, bounded in depth, valid Unicode throughout.

Python's parser takes JSON nested thousands deep (until it hits the recursion limit) and strings
holding lone surrogates (``"\ud800"``), which no UTF-8 encoder will write: either would fail
later, far from the request, as a 500. Both are refused here, at the edge, as a 400.
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.errors import InvalidRequestError

MAX_DEPTH = 64
"""How deeply arrays and objects may nest in a request (OpenAI's own bodies need under 15)."""


def load_json(raw: str | bytes) -> Any:
    """The value ``raw`` holds, bounded in depth and valid Unicode throughout.

    Both checks run at C speed, on the text and on the value as a whole (a walk of a 5 MB
    body's values in Python took 1.8 s of the gateway's loop).

    Raises:
        InvalidRequestError: not JSON (``invalid_json``; ``NaN`` and ``Infinity`` are not),
            nested deeper than :data:`MAX_DEPTH` or holding a lone surrogate
            (``invalid_value``).
    """
    try:
        value = strict_loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested past Python's own limit
        raise InvalidRequestError(
            "We could not parse the JSON body of your request.", code="invalid_json"
        ) from None
    # as the parser read it (it takes UTF-16 and -32 too, and encoded surrogates), as UTF-8:
    # no byte of a multi-byte character is a quote, a backslash or a bracket. UTF-8 bytes are
    # that already (a BOM holds none of those bytes either): only other text is re-encoded.
    if isinstance(raw, str):
        data = raw.encode("utf-8", "surrogatepass")
    elif (encoding := json.detect_encoding(raw)).startswith("utf-8"):
        data = bytes(raw)
    else:
        data = raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    if _nests_deeper(data, MAX_DEPTH):
        raise _too_deep()
    if _may_hold_a_surrogate(data):  # the value says: a pair is a character
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _not_unicode() from None
    return value


def strict_loads(text: str | bytes) -> Any:
    """``json.loads``, refusing ``NaN``, ``Infinity`` and ``-Infinity`` as JSON does.

    Raises:
        ValueError: not JSON.
    """
    return json.loads(text, parse_constant=_not_a_number)


def _not_a_number(constant: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's parser takes them, JSON does not."""
    raise ValueError(f"{constant} is not JSON")


_NOT_MARKS = bytes(set(range(256)) - set(b'"[]{}'))
_INNERMOST = re.compile(rb"\[\]|\{\}")
_MAY_BE_A_SURROGATE = re.compile(rb"\\u[dD][89abcdefABCDEF]|\xed[\xa0-\xbf]")
"""An escaped surrogate (or ``\\\\u…``, text), or one encoded (ED A0–BF: only surrogates)."""


def _nests_deeper(text: bytes, limit: int) -> bool:
    """Whether arrays and objects nest deeper than ``limit`` in valid JSON ``text``.

    The brackets outside strings, their innermost pairs taken away once per level.
    """
    # in valid JSON a backslash escapes only within a string: without the escaped backslashes
    # and quotes, every other quote opens a string. Of the text only quotes and brackets are
    # kept, and two quotes side by side dropped (a string without brackets, or the end of one
    # and the start of the next: the quotes after them keep their parity), so the split below
    # makes a part only for what is left: a string holding a bracket.
    unescaped = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = unescaped.translate(None, delete=_NOT_MARKS).replace(b'""', b"")
    brackets = b"".join(marks.split(b'"')[::2])
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _INNERMOST.sub(b"", brackets)
    return bool(brackets)


def _may_hold_a_surrogate(text: bytes) -> bool:
    if b"\\ud" not in text and b"\\uD" not in text and b"\xed" not in text:
        return False  # the common case, at memchr's speed
    return _MAY_BE_A_SURROGATE.search(text) is not None


def _too_deep() -> InvalidRequestError:
    return InvalidRequestError(
        f"The JSON body nests arrays and objects deeper than {MAX_DEPTH} levels.",
        code="invalid_value",
    )


def _not_unicode() -> InvalidRequestError:
    return InvalidRequestError(
        "The JSON body holds a lone surrogate (\\ud800-\\udfff): not valid Unicode text.",
        code="invalid_value",
    )
