"""What a Redis client got back, command by command, on real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis


class Replies:
    """Sizes of the replies ``client`` gets from now on (values, nested lists flattened).

    ``scripts``: each script call's (EVALSHA/EVAL) reply; ``largest``: the largest reply of
    any command.
    """

    def __init__(self, client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scripts: list[int] = []
        self.largest = 0
        execute = client.execute_command

        def recording(*args: Any, **options: Any) -> Any:
            reply = execute(*args, **options)
            size = values(reply)
            if str(args[0]).upper() in ("EVALSHA", "EVAL"):
                self.scripts.append(size)
            self.largest = max(self.largest, size)
            return reply

        monkeypatch.setattr(client, "execute_command", recording)


def values(reply: Any) -> int:
    """How many values a reply holds, nested lists flattened."""
    return sum(map(values, reply)) if isinstance(reply, list) else 1
