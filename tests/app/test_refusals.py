"""Which errors Redis answers are refusals for a while (``app.refusals``), and which are not."""

from __future__ import annotations

import pytest
import redis

from app.refusals import refusal_of

MISCONF = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist"


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (redis.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), "memory"),
        (redis.ResponseError(MISCONF), "disk"),
        (redis.ResponseError(f"{MISCONF} script: 3f1a, on @user_script:43."), "disk"),
        (
            redis.ResponseError(f"Command # 1 (LPUSH q x) of pipeline caused error: {MISCONF}"),
            "disk",
        ),
        (redis.ResponseError("NOREPLICAS Not enough good replicas to write."), "replicas"),
        (redis.ReadOnlyError("You can't write against a read only replica."), "read-only"),
        (redis.exceptions.MasterDownError("Link with MASTER is down"), "master"),
    ],
)
def test_a_refusal_says_why(error: redis.RedisError, why: str) -> None:
    refusal = refusal_of(error)

    assert refusal is not None and why in refusal


@pytest.mark.parametrize(
    "error",
    [
        redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        redis.ResponseError("ERR unknown command 'FOO'"),
        # a refusal's code inside a command's own arguments is not one
        redis.ResponseError(
            "Command # 1 (LPUSH q MISCONF x) of pipeline caused error: WRONGTYPE Operation"
        ),
        redis.ConnectionError("Connection refused"),
    ],
)
def test_any_other_error_is_not_a_refusal(error: redis.RedisError) -> None:
    assert refusal_of(error) is None
