"""``antwort keys create|list|revoke|limits``: tenants' API keys and limits, while the fleet runs.

Works on the fleet's Redis (``ANTWORT_REDIS_URL``; ``antwort up`` prints its embedded one). A
new key is printed once and stored only as its SHA-256; every gateway accepts it, and forgets a
revoked one, within ``ANTWORT_KEY_CACHE_SECONDS``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TextIO

from app.config import Settings
from app.fleet import make_redis
from app.tenancy import LIMIT_NAMES, KeyStore, check_tenant_name

_NO_LIMIT = "none"


def _limit(raw: str) -> int | None:
    if raw == _NO_LIMIT:
        return None
    value = int(raw)
    if value < 0:
        raise argparse.ArgumentTypeError("a limit is a number ≥ 0 (0: unlimited) or 'none'")
    return value


def _tenant(raw: str) -> str:
    try:
        return check_tenant_name(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``keys`` subcommands."""
    sub = parser.add_subparsers(dest="keys_command", required=True)
    create = sub.add_parser("create", help="make a key for a tenant (printed once)")
    create.add_argument("--tenant", required=True, type=_tenant)
    _add_limit_options(create)
    sub.add_parser("list", help="list the stored keys (never the keys themselves)")
    revoke = sub.add_parser("revoke", help="revoke a key by its id (key_…)")
    revoke.add_argument("key_id")
    limits = sub.add_parser("limits", help="show or set a tenant's own limits")
    limits.add_argument("tenant", type=_tenant)
    _add_limit_options(limits)


def _add_limit_options(parser: argparse.ArgumentParser) -> None:
    for name in LIMIT_NAMES:
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=_limit,
            default=argparse.SUPPRESS,
            help="this tenant's own limit (0: unlimited; 'none': the fleet's default)",
        )


def run_keys(args: argparse.Namespace, settings: Settings, out: TextIO | None = None) -> int:
    """Run one ``antwort keys`` command; its exit code."""
    if not settings.redis_url:
        print("antwort keys: set ANTWORT_REDIS_URL to the fleet's Redis.", file=sys.stderr)
        return 2
    store = KeyStore(make_redis(settings), settings.keys)
    command = _COMMANDS[args.keys_command]
    return command(store, args, out or sys.stdout)


def _limits_given(args: argparse.Namespace) -> dict[str, int | None]:
    return {name: getattr(args, name) for name in LIMIT_NAMES if hasattr(args, name)}


def _create(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    token, stored = store.create(args.tenant)
    limits = _limits_given(args)
    if limits:
        store.set_limits(args.tenant, limits)
    print(f"{stored.id}  tenant {stored.tenant}", file=out)
    print(f"key (shown once, keep it secret): {token}", file=out)
    return 0


def _list(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    for key in store.all():
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(key.created_at))
        print(f"{key.id}  {key.tenant}  {key.hint}  {created} UTC", file=out)
    return 0


def _revoke(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    revoked = store.revoke(args.key_id)
    if revoked is None:
        print(f"antwort keys: no key {args.key_id}", file=sys.stderr)
        return 1
    print(f"revoked {revoked.id} (tenant {revoked.tenant})", file=out)
    return 0


def _limits(store: KeyStore, args: argparse.Namespace, out: TextIO) -> int:
    limits = _limits_given(args)
    own = store.set_limits(args.tenant, limits) if limits else store.limits_of(args.tenant)
    shown = ", ".join(f"{name}={own[name]}" for name in LIMIT_NAMES if name in own)
    print(f"{args.tenant}: {shown or 'the fleet defaults'}", file=out)
    return 0


_COMMANDS: dict[str, Callable[[KeyStore, argparse.Namespace, TextIO], int]] = {
    "create": _create,
    "list": _list,
    "revoke": _revoke,
    "limits": _limits,
}
