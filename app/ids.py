"""The fleet's id formats, checked before any Redis key is built from a client's id.

A key is the id with a prefix (:mod:`app.keys`), and the keys of one response share its id
with suffixes (``r:<id>:in``, ``r:<id>:ev``), as a conversation's do (``conv:<id>:items``,
``conv:<id>:order``): an id that is not of the fleet's own format could name another object's
list, stream or hash. Ids from clients are checked here first.
"""

from __future__ import annotations

import re

from app.errors import InvalidRequestError, quoted

RESPONSE_ID = re.compile(r"resp_[A-Za-z0-9]{1,64}")
"""What a response id looks like (the fleet makes ``resp_`` + 48 hex digits)."""


CONVERSATION_ID = re.compile(r"conv_[A-Za-z0-9]{1,64}")
"""What a conversation id looks like (the fleet makes ``conv_`` + 48 hex digits)."""


def is_response_id(value: str) -> bool:
    """Whether ``value`` has the format of a response id."""
    return RESPONSE_ID.fullmatch(value) is not None


def is_conversation_id(value: str) -> bool:
    """Whether ``value`` has the format of a conversation id."""
    return CONVERSATION_ID.fullmatch(value) is not None


def check_response_id(value: str, *, param: str = "response_id") -> str:
    """``value`` when it is a response id of the fleet's format.

    Raises:
        InvalidRequestError: any other string (a 400 naming ``param``).
    """
    if not is_response_id(value):
        raise InvalidRequestError(
            f"Invalid '{param}': {quoted(value)}. Expected an id that begins with 'resp_' "
            "followed by up to 64 letters or digits.",
            param=param,
            code="invalid_value",
        )
    return value
