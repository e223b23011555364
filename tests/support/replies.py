"""What a Redis client got back, command by command, on real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection


class Replies:
    """Sizes of the replies Redis sends from now on (values, nested lists flattened).

    ``scripts``: each reply to a script call (EVALSHA/EVAL) of ``client``; ``largest``: the
    largest reply any connection read (a pipeline's replies each count on their own).
    """

    def __init__(self, client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scripts: list[int] = []
        self.largest = 0
        execute = client.execute_command
        read_response = AbstractConnection.read_response

        def recording(*args: Any, **options: Any) -> Any:
            reply = execute(*args, **options)
            if str(args[0]).upper() in ("EVALSHA", "EVAL"):
                self.scripts.append(values(reply))
            return reply

        def reading(connection: AbstractConnection, *args: Any, **options: Any) -> Any:
            reply = read_response(connection, *args, **options)
            self.largest = max(self.largest, values(reply))
            return reply

        monkeypatch.setattr(client, "execute_command", recording)
        monkeypatch.setattr(AbstractConnection, "read_response", reading)


def values(reply: Any) -> int:
    """How many values a reply holds, nested lists flattened."""
    return sum(map(values, reply)) if isinstance(reply, list) else 1
