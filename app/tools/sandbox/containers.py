"""Who owns a sandbox container, a code interpreter's or a hosted shell's (:mod:`app.ownership`).

The first request that names a container id (its own, the chain's or a new one) claims it for
its tenant; a request of another tenant that names it is told the container does not exist, so
it can neither read nor overwrite the container's files. The claim lives as long as the files
(the responses' TTL, restarted by every request that uses it and every save).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from app.errors import NotFoundError
from app.keys import Keys
from app.ownership import require_owned
from app.tools.sandbox.tools import CODE_INTERPRETER, SHELL


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerClaim:
    """A container as its owner key tells it."""

    container_id: str
    owner: str


def claim_container(
    client: redis.Redis, keys: Keys, container_id: str, tenant: str, *, ttl_seconds: int
) -> ContainerClaim:
    """Claim ``container_id`` for ``tenant`` unless another tenant holds it.

    Raises:
        NotFoundError: another tenant's container (404, as for an id that does not exist).
    """
    key = keys.container_owner(container_id)
    pipe = client.pipeline(transaction=True)
    pipe.set(key, tenant, nx=True, ex=ttl_seconds)
    pipe.get(key)
    _, raw = pipe.execute()
    owner = raw.decode() if isinstance(raw, bytes) else str(raw)
    claim = ContainerClaim(container_id=container_id, owner=owner)
    message = f"No container found with id '{container_id}'."
    require_owned(claim, tenant, missing=lambda: NotFoundError(message, param="container"))
    client.expire(key, ttl_seconds)
    return claim


def claim_containers(
    client: redis.Redis,
    keys: Keys,
    tools: Sequence[Mapping[str, Any]],
    tenant: str,
    *,
    ttl_seconds: int,
) -> None:
    """Claim the container of each echoed code interpreter and hosted shell."""
    for index, tool in enumerate(tools):
        found = _container(tool)
        if found is None:
            continue
        container_id, param = found
        try:
            claim_container(client, keys, container_id, tenant, ttl_seconds=ttl_seconds)
        except NotFoundError as exc:
            exc.param = f"tools.{index}.{param}"
            raise


def _container(tool: Mapping[str, Any]) -> tuple[str, str] | None:
    """An echoed tool's container id and the field naming it; None: it has none."""
    if tool.get("type") == CODE_INTERPRETER and isinstance(tool.get("container"), str):
        return tool["container"], "container"
    environment = tool.get("environment")
    if tool.get("type") == SHELL and isinstance(environment, Mapping):
        container_id = environment.get("container_id")
        if isinstance(container_id, str):
            return container_id, "environment.container_id"
    return None
