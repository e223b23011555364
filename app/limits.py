"""Per-tenant rate limits, enforced in Redis across every gateway replica (``admit.lua``).

Three limits (:class:`~app.tenancy.Limits`, 0 = none): requests to ``/v1`` per minute, tokens
per minute, and responses queued or running at once. Windows are whole minutes, shared by all
replicas: a counter for each minute's requests, and one ledger of the tenant's tokens. Tokens are
estimated when a response is created (its input's characters / 4, plus ``max_output_tokens``:
OpenAI's own rule), before the model has said anything, and that estimate is reserved. What the
model then takes beyond it (the history a chain sends again, the tools' definitions, each further
turn of a tool loop, the count before a compaction) is charged as the response's ``usage`` grows:
before each write of its run, what its model calls took past the reservation is added to the
tenant's tokens of the current minute (:func:`charge_usage`). That may take them over the limit:
what passed it is carried into the next minute, less that minute's limit, and so on
(``lua/include/token_ledger.lua``), so a tenant's tokens stay within its limit over time, and its
next create waits until they fit.
A refusal is a :class:`~app.errors.RateLimitError` carrying ``Retry-After`` and OpenAI's
``x-ratelimit-*`` headers; an admission carries the same headers for the answer.

A job a request waits for (``/v1/responses/compact``, ``/v1/responses/input_tokens``:
:mod:`app.jobs`) is a model call too: it is admitted as a response is, its tokens estimated by
the same rule, and counts in flight while its gateway waits for it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from app import cooperation
from app.errors import RateLimitError
from app.protocol.request import CreateResponseRequest
from app.store import ResponseStore
from app.store.admission import ADMIT, CHARGE, AdmitCall, ChargeCall
from app.store.base import text
from app.store.fair_share import ended_responses
from app.telemetry import metrics
from app.tenancy import Tenant

WINDOW_MS = 60_000
RESERVE_MS = 30_000
"""How long an admitted response counts in flight before it is stored (a gateway that died
between the two leaves a place taken no longer than this); a job renews it while it waits."""
HOLD_SECONDS = RESERVE_MS / 3000
"""How often a waiting job renews its place in flight (:meth:`RateLimiter.hold`)."""
_REFUSED = {1: "requests", 2: "tokens", 3: "in_flight"}

TOKEN_CHARGE_EXTRA = "token_charge"
"""Set in a response's extra when its tenant has a tokens per minute limit: the tenant charged
and the tokens its create reserved, ``{"tenant", "reserved"}`` (:func:`charge_usage`)."""


def estimate_tokens(request: CreateResponseRequest) -> int:
    """A create's tokens before the model runs: input and instructions / 4, plus its output cap.

    The characters are those of the two as JSON; a list input's, a batch of items at a time
    (:mod:`app.cooperation`), and a heavy item's longest list a batch of its entries at a time.
    """
    if isinstance(request.input, str):
        chars = len(json.dumps(request.model_dump(mode="json", include={"input", "instructions"})))
    else:
        chars = len(json.dumps(request.instructions))
        for batch in cooperation.weighed_batches(request.input):
            light = []
            for item in batch:
                heavy = cooperation.longest_list(vars(item).items())
                if heavy is None:
                    light.append(item.model_dump(mode="json"))
                else:
                    chars += _heavy_chars(item, heavy)
            chars += len(json.dumps(light))
    return max(1, chars // 4 + (request.max_output_tokens or 0))


def _heavy_chars(item: BaseModel, field: str) -> int:
    """The characters of ``item`` as JSON, its list ``field`` a batch of entries at a time."""
    chars = len(json.dumps(item.model_dump(mode="json", exclude={field})))
    for batch in cooperation.in_batches(getattr(item, field)):
        chars += len(json.dumps(to_jsonable_python(batch)))
    return chars


def _reset(milliseconds: int) -> str:
    return f"{math.ceil(milliseconds / 1000)}s"


class RateLimiter:
    """Admits a tenant's requests and responses against its limits."""

    def __init__(self, store: ResponseStore, *, clock: Callable[[], float] | None = None):
        self.store = store
        self.clock = store.now if clock is None else clock
        """Epoch seconds (the fleet's clock, :meth:`ResponseStore.now`: every gateway's minute
        is the same minute)."""

    def admit_request(self, tenant: Tenant) -> dict[str, str]:
        """Count one request; its ``x-ratelimit-*`` headers (none when the tenant has no limit).

        Raises:
            RateLimitError: the tenant's requests of this minute are used up.
        """
        if not tenant.limits.requests_per_minute:
            return {}
        return self._admit(tenant, requests=1, tokens=0, response_id="")

    def admit_response(self, tenant: Tenant, response_id: str, tokens: int) -> dict[str, str]:
        """Count a new response's tokens and take its place in flight; its headers.

        Raises:
            RateLimitError: tokens of this minute used up, or too many responses in flight.
        """
        limits = tenant.limits
        if not limits.tokens_per_minute and not limits.max_in_flight:
            return {}
        return self._admit(tenant, requests=0, tokens=tokens, response_id=response_id)

    def confirm(self, tenant: Tenant, response_id: str) -> None:
        """The admitted response is stored: it counts in flight for as long as it runs."""
        if tenant.limits.max_in_flight:
            key = self.store.keys.in_flight(tenant.name)
            self.store.redis.zadd(key, {response_id: 0}, xx=True)

    def hold(self, tenant: Tenant, job_id: str) -> None:
        """An admitted job is still waited for: its place in flight is reserved anew.

        A job has no record in ``active``: it counts by its reservation, renewed by its
        gateway while it waits (a gateway that died leaves the place taken ``RESERVE_MS``).
        """
        if tenant.limits.max_in_flight:
            key = self.store.keys.in_flight(tenant.name)
            self.store.redis.zadd(key, {job_id: int(self.clock() * 1000)}, xx=True)

    def release(self, tenant: Tenant, job_id: str) -> None:
        """An admitted job was answered (or failed): its place in flight is free."""
        if tenant.limits.max_in_flight:
            self.store.redis.zrem(self.store.keys.in_flight(tenant.name), job_id)

    def _admit(
        self, tenant: Tenant, *, requests: int, tokens: int, response_id: str
    ) -> dict[str, str]:
        keys, limits = self.store.keys, tenant.limits
        ended: tuple[str, ...] = ()
        if keys.is_sharded and limits.max_in_flight and response_id:
            # the responses' `active` sets are in other slots than the tenant's: ask them first
            in_flight = self.store.redis.zrange(keys.in_flight(tenant.name), 0, -1)
            members = [text(raw) for raw in in_flight if isinstance(raw, bytes | str)]
            ended = ended_responses(self.store.redis, keys, members)
        now_ms = int(self.clock() * 1000)
        window = now_ms // WINDOW_MS
        code, used_requests, used_tokens, running = self.store.script(ADMIT)(
            AdmitCall(
                requests_key=keys.rate_window(tenant.name, "requests", window),
                tokens_ledger=keys.token_ledger(tenant.name),
                in_flight=keys.in_flight(tenant.name),
                active=keys.in_flight(tenant.name) if keys.is_sharded else keys.active,
                parked=keys.tenant_parked(tenant.name),
                now_ms=now_ms,
                window_ms=WINDOW_MS,
                request_limit=limits.requests_per_minute,
                token_limit=limits.tokens_per_minute,
                in_flight_limit=limits.max_in_flight,
                requests=requests,
                tokens=tokens,
                response_id=response_id,
                reserve_ms=RESERVE_MS,
                watches_active=not keys.is_sharded,
                ended=ended,
            )
        )
        used_tokens = int(used_tokens)
        token_limit = limits.tokens_per_minute

        def until(windows: int) -> int:  # ms from now to the start of the window `windows` on
            return (window + windows) * WINDOW_MS - now_ms

        headers = _headers(
            tenant,
            int(used_requests),
            used_tokens,
            requests_reset=until(1),
            tokens_reset=until(_windows_until(used_tokens, token_limit, room=token_limit)),
        )
        if not code:
            return headers
        limit = _REFUSED[int(code)]
        if limit == "tokens":
            room = min(tokens, token_limit)  # too large: never fits, wait until back to none
            retry_ms = until(_windows_until(used_tokens, token_limit, room=room))
        else:
            retry_ms = until(1)
        raise _refusal(tenant, limit, headers, retry_ms, running=int(running), requested=tokens)


def _windows_until(used: int, limit: int, *, room: int) -> int:
    """How many windows on a ledger of ``used`` tokens has ``room`` under ``limit``; at least 1.

    Each window takes ``limit`` off what earlier ones carried (``token_ledger.lua``).
    """
    if limit <= 0:
        return 1
    return max(1, math.ceil((used + room - limit) / limit))


def _headers(
    tenant: Tenant, used_requests: int, used_tokens: int, *, requests_reset: int, tokens_reset: int
) -> dict[str, str]:
    headers: dict[str, str] = {}
    for unit, limit, used, reset_ms in (
        ("requests", tenant.limits.requests_per_minute, used_requests, requests_reset),
        ("tokens", tenant.limits.tokens_per_minute, used_tokens, tokens_reset),
    ):
        if limit:
            headers[f"x-ratelimit-limit-{unit}"] = str(limit)
            headers[f"x-ratelimit-remaining-{unit}"] = str(max(0, limit - used))
            headers[f"x-ratelimit-reset-{unit}"] = _reset(reset_ms)
    return headers


def _refusal(
    tenant: Tenant,
    limit: str,
    headers: dict[str, str],
    retry_ms: int,
    *,
    running: int,
    requested: int,
) -> RateLimitError:
    limits = tenant.limits
    if limit == "in_flight":
        # a place frees when a response ends: no window to wait for, try again soon
        message = (
            f"Rate limit reached: {running} responses queued or running, the limit is "
            f"{limits.max_in_flight}. Try again when one of them has finished."
        )
        retry_ms, kind = 1000, "requests"
    elif limit == "tokens" and requested > limits.tokens_per_minute:
        message = (
            f"Request too large for tokens per minute: limit {limits.tokens_per_minute}, "
            f"requested {requested}. The input or output tokens must be reduced in order to "
            "run successfully."
        )
        kind = limit
    else:
        per_minute = limits.requests_per_minute if limit == "requests" else limits.tokens_per_minute
        message = (
            f"Rate limit reached for {limit} per minute: limit {per_minute}. Please try again in "
            f"{_reset(retry_ms)}."
        )
        kind = limit
    retry_after = math.ceil(retry_ms / 1000)
    metrics.RATE_LIMITED.labels(metrics.tenant_label(tenant.name), limit).inc()
    error = RateLimitError(message)
    error.type = kind
    error.headers = {**headers, "Retry-After": str(retry_after)}
    return error


class Caller:
    """Who creates a response: the tenant that will own it, admitted against its limits.

    Admitted before the response is stored, confirmed after; keeps the admission's headers for
    the answer (``x-ratelimit-*``). ``limiter`` None: no limits apply. ``tenants`` says how many
    tenants the fleet has now (the fair share's automatic cap, ``app.fairness``); none given:
    one.
    """

    def __init__(
        self,
        tenant: Tenant,
        limiter: RateLimiter | None = None,
        *,
        tenants: Callable[[], int] | None = None,
    ):
        self.tenant = tenant
        self.limiter = limiter
        self.tenants = tenants or _one
        self.headers: dict[str, str] = {}
        self.token_charge: dict[str, Any] | None = None
        """The last admission's (:meth:`admit`), for a job's tokens (:meth:`charge`)."""

    def admit(self, response_id: str, request: CreateResponseRequest) -> dict[str, Any] | None:
        """Take the response's tokens and place in flight.

        Returns its token charge (:data:`TOKEN_CHARGE_EXTRA`) when the tenant has a tokens per
        minute limit: what its run charges beyond the tokens reserved here.

        Raises:
            RateLimitError: a limit refuses it.
        """
        if self.limiter is None:
            return None
        tokens = estimate_tokens(request)
        self.headers.update(self.limiter.admit_response(self.tenant, response_id, tokens))
        if self.tenant.limits.tokens_per_minute:
            self.token_charge = {"tenant": self.tenant.name, "reserved": tokens}
        return self.token_charge

    def charge(self, tokens: int) -> None:
        """An admitted job's model call took ``tokens``: what passes its reservation is charged."""
        if self.limiter is not None:
            limiter = self.limiter
            charge_usage(
                limiter.store, self.token_charge, before=0, after=tokens, clock=limiter.clock
            )

    def confirm(self, response_id: str) -> None:
        """The response is stored (and watched by the sweeper): it counts while it runs."""
        if self.limiter is not None:
            self.limiter.confirm(self.tenant, response_id)

    def hold(self, job_id: str) -> None:
        """An admitted job is still waited for: its place is renewed (:meth:`RateLimiter.hold`).

        At each look of its gateway: every ``lease_seconds``, 10 s at most.
        """
        if self.limiter is not None:
            self.limiter.hold(self.tenant, job_id)

    def release(self, job_id: str) -> None:
        """An admitted job ended, answered or not: its place in flight is free."""
        if self.limiter is not None:
            self.limiter.release(self.tenant, job_id)


def _one() -> int:
    return 1


def charge_usage(
    store: ResponseStore,
    charge: Mapping[str, Any] | None,
    *,
    before: int,
    after: int,
    clock: Callable[[], float] | None = None,
) -> int:
    """Charge a response's tenant for the tokens its usage grew by beyond its reservation.

    ``charge``: the response's :data:`TOKEN_CHARGE_EXTRA` (None: its tenant had no tokens per
    minute limit, nothing to charge). ``before``, ``after``: its ``usage.total_tokens`` as last
    written and as written now. What passes the reservation is added to the tenant's tokens of
    the current minute (:func:`charge_tokens`). Returns the tokens charged.
    """
    if not charge:
        return 0
    reserved = int(charge["reserved"])
    excess = max(0, after - reserved) - max(0, before - reserved)
    return charge_tokens(store, charge, excess, clock=clock)


def charge_tokens(
    store: ResponseStore,
    charge: Mapping[str, Any] | None,
    tokens: int,
    *,
    clock: Callable[[], float] | None = None,
) -> int:
    """Charge ``tokens`` to the tenant of ``charge`` (:data:`TOKEN_CHARGE_EXTRA`; None: nothing).

    They are added to its tokens of the current minute, which may take them over the limit:
    what passed it is carried into the next minutes (``charge.lua``), and its next create waits
    until its tokens fit again. Returns the tokens charged.
    """
    if not charge or tokens <= 0:
        return 0
    store.script(CHARGE)(
        ChargeCall(
            tokens_ledger=store.keys.token_ledger(str(charge["tenant"])),
            now_ms=int((store.now() if clock is None else clock()) * 1000),
            window_ms=WINDOW_MS,
            tokens=tokens,
        )
    )
    return tokens
