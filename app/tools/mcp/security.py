"""Where MCP servers may be, and how their secrets are kept.

``server_url`` must pass :func:`check_server_url`: with ``ANTWORT_MCP_ALLOWED_HOSTS`` unset, any
host whose addresses (after DNS resolution) are all public; with it set, only the listed hosts
(``name``, ``*.domain``, an IP address or a CIDR range; ``*`` for any public host), which may
then resolve to private addresses. A request's ``headers`` and ``authorization`` are sealed with
AES-GCM (:class:`Sealer`) before they are stored, and only the tool worker opens them.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from app.aead import Aead
from app.errors import InvalidRequestError

Resolver = Callable[[str], list[str]]
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class ServerUrlRefusedError(InvalidRequestError):
    """A ``server_url`` the fleet will not connect to."""

    default_code = "invalid_value"


def resolve_host(host: str) -> list[str]:
    """The addresses a host name resolves to (an IP literal resolves to itself)."""
    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    return sorted({str(info[4][0]) for info in infos})


def check_server_url(
    url: str, allowed_hosts: str | None, *, resolve: Resolver = resolve_host
) -> None:
    """Refuse a URL the fleet must not reach (see the module docstring).

    Raises:
        ServerUrlRefusedError: a bad scheme, an unresolvable host, a host off the allowlist,
            or a private, loopback or link-local address.
    """
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port  # validated here: a bad one raises now, not in the MCP client
    except ValueError:  # e.g. an unclosed IPv6 bracket, a bad IPv6 literal or port
        raise ServerUrlRefusedError("server_url is not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not host or port == 0:
        raise ServerUrlRefusedError("server_url must be an http(s) URL with a host.")
    if parts.username is not None or parts.password is not None:
        # The URL is echoed in the response object; credentials belong in headers.
        raise ServerUrlRefusedError(
            "server_url must not carry credentials; use headers or authorization."
        )
    entries = _entries(allowed_hosts)
    if "*" not in entries and any(_names(entry, host) for entry in entries):
        return  # a listed name needs no DNS here; the client checks what it connects to
    allowed_addresses(host, allowed_hosts, resolve=resolve)


def _entries(allowed_hosts: str | None) -> list[str]:
    return [e.strip().lower() for e in (allowed_hosts or "").split(",") if e.strip()]


def allowed_addresses(
    host: str, allowed_hosts: str | None, *, resolve: Resolver = resolve_host
) -> list[str]:
    """The addresses of ``host`` the fleet may connect to (the policy of the module docstring).

    The MCP client connects to these very addresses, so a DNS answer that changes after the
    check (DNS rebinding) cannot lead it elsewhere.

    Raises:
        ServerUrlRefusedError: an unresolvable host, a host off the allowlist, or a private,
            loopback or link-local address.
    """
    host = host.lower().strip("[]")
    entries = _entries(allowed_hosts)
    is_listed = bool(entries) and "*" not in entries
    addresses = _resolved(host, resolve)
    if is_listed:
        if not any(_names(e, host) or _contains(e, addresses) for e in entries):
            raise ServerUrlRefusedError(
                f"The host '{host}' is not in the MCP allowlist (ANTWORT_MCP_ALLOWED_HOSTS)."
            )
    elif not addresses or any(not _is_public(address) for address in addresses):
        raise ServerUrlRefusedError(
            f"server_url '{host}' resolves to a private, loopback or link-local address."
        )
    return [str(address) for address in addresses]


def _resolved(host: str, resolve: Resolver) -> list[IpAddress]:
    try:
        return [ipaddress.ip_address(a.split("%")[0]) for a in resolve(host)]
    except (OSError, ValueError):
        message = f"The host '{host}' of server_url cannot be resolved."
        raise ServerUrlRefusedError(message) from None


def _names(entry: str, host: str) -> bool:
    if entry.startswith("*."):
        return host.endswith(entry[1:])
    return entry == host


def _contains(entry: str, addresses: list[IpAddress]) -> bool:
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return bool(addresses) and all(address in network for address in addresses)


_NAT64_PREFIXES = (
    ipaddress.IPv6Network("64:ff9b::/96"),  # RFC 6052, the well-known prefix
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # RFC 8215, local-use translators
)


def _is_public(address: IpAddress) -> bool:
    """Whether ``address`` and every IPv4 address it embeds are public unicast addresses."""
    return all(
        each.is_global and not each.is_multicast for each in (address, *_embedded_ipv4(address))
    )


def _embedded_ipv4(address: IpAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: a translator or tunnel would reach these.

    IPv4-mapped and IPv4-compatible (``::a.b.c.d``) addresses, NAT64 (the low 32 bits), 6to4
    (``2002:a.b.c.d::``) and Teredo (its server and its client).
    """
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if int(address) >> 32 == 0:  # IPv4-compatible (deprecated, still routed by some stacks)
        found.append(low32)
    if any(address in prefix for prefix in _NAT64_PREFIXES):
        found.append(low32)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    return found


class Sealer:
    """Seals and opens small secrets with AES-GCM; the label is bound as associated data."""

    def __init__(self, key: bytes):
        self._aead = Aead(hashlib.sha256(key).digest())

    def seal(self, label: str, secret: dict[str, str]) -> str:
        """``secret`` as an opaque token."""
        sealed = self._aead.seal(json.dumps(secret).encode(), label.encode())
        return "v1." + base64.urlsafe_b64encode(sealed).decode()

    def open(self, label: str, token: str) -> dict[str, str]:
        """The secret sealed in ``token``.

        Raises:
            ValueError: the token was not sealed by this key for this label.
        """
        if not token.startswith("v1."):
            raise ValueError("unknown sealed format")
        try:
            plain = self._aead.open(base64.urlsafe_b64decode(token[3:]), label.encode())
        except ValueError:
            raise ValueError("the sealed headers cannot be opened with this key") from None
        value = json.loads(plain)
        return {str(k): str(v) for k, v in value.items()}
