"""SSRF allowlist and header sealing."""

import pytest

from app.tools.mcp.security import Sealer, ServerUrlRefusedError, check_server_url

ADDRESSES = {
    "public.example": ["93.184.216.34"],
    "localhost": ["127.0.0.1", "::1"],
    "internal.example": ["10.0.0.7"],
    "metadata.example": ["169.254.169.254"],
    "mixed.example": ["93.184.216.34", "192.168.1.1"],
    "mapped.example": ["::ffff:127.0.0.1"],
}


def resolve(host: str) -> list[str]:
    if host in ADDRESSES:
        return ADDRESSES[host]
    if host[0].isdigit() or ":" in host:
        return [host]
    raise OSError("unknown host")


def check(url: str, allowed: str | None = None) -> None:
    check_server_url(url, allowed, resolve=resolve)


def test_public_hosts_pass_without_an_allowlist() -> None:
    check("https://public.example/mcp")
    check("http://93.184.216.34:8080/mcp")


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8000/mcp",
        "http://127.0.0.1/mcp",
        "http://[::1]/mcp",
        "http://internal.example/mcp",
        "http://metadata.example/latest",
        "http://169.254.169.254/",
        "http://mixed.example/mcp",
        "http://mapped.example/mcp",
        "http://0.0.0.0/mcp",
    ],
)
def test_private_loopback_and_link_local_are_refused_after_resolution(url: str) -> None:
    with pytest.raises(ServerUrlRefusedError, match="private, loopback or link-local"):
        check(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
        "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
        "http://[64:ff9b:1::a00:7]/",  # local-use NAT64 (RFC 8215) of 10.0.0.7
        "http://[2002:a9fe:a9fe::1]/",  # 6to4 of 169.254.169.254
        "http://[2002:c0a8:101::]/",  # 6to4 of 192.168.1.1
        "http://[::a9fe:a9fe]/",  # IPv4-compatible 169.254.169.254
        "http://[::127.0.0.1]/",  # IPv4-compatible loopback
        "http://[::ffff:a9fe:a9fe]/",  # IPv4-mapped
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo, client 127.0.0.1
        "http://[2001:0:a9fe:a9fe::1]/",  # Teredo, server 169.254.169.254
    ],
)
def test_ipv6_embedding_a_private_ipv4_is_judged_by_the_embedded_address(url: str) -> None:
    with pytest.raises(ServerUrlRefusedError, match="private, loopback or link-local"):
        check(url)


def test_ipv6_embedding_a_public_ipv4_is_public() -> None:
    check("http://[64:ff9b::5db8:d822]/")  # NAT64 of 93.184.216.34
    check("http://[2002:5db8:d822::1]/")  # 6to4 of 93.184.216.34


@pytest.mark.parametrize("url", ["http://[::1/", "http://[64:ff9b::zz]/", "http://[::1]x/"])
def test_malformed_urls_are_refused_not_raised(url: str) -> None:
    with pytest.raises(ServerUrlRefusedError):
        check(url)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://public.example/", "http:///nohost"])
def test_non_http_urls_are_refused(url: str) -> None:
    with pytest.raises(ServerUrlRefusedError, match="http"):
        check(url)


def test_credentials_in_the_url_are_refused() -> None:
    with pytest.raises(ServerUrlRefusedError, match="credentials"):
        check("https://user:pw@public.example/mcp")


def test_unresolvable_hosts_are_refused() -> None:
    with pytest.raises(ServerUrlRefusedError, match="cannot be resolved"):
        check("https://nowhere.invalid/mcp")


def test_allowlist_admits_listed_hosts_even_on_private_addresses() -> None:
    check("http://localhost:9000/mcp", "localhost")
    check("http://internal.example/mcp", "*.example")
    check("http://10.0.0.7/mcp", "10.0.0.0/8")
    check("http://127.0.0.1:1234/mcp", "127.0.0.1,localhost")


def test_allowlist_refuses_everything_else() -> None:
    with pytest.raises(ServerUrlRefusedError, match="not in the MCP allowlist"):
        check("https://public.example/mcp", "localhost")
    with pytest.raises(ServerUrlRefusedError, match="not in the MCP allowlist"):
        check("http://192.168.0.1/mcp", "10.0.0.0/8")


def test_star_allows_any_public_host_but_still_no_private_one() -> None:
    check("https://public.example/mcp", "*")
    with pytest.raises(ServerUrlRefusedError):
        check("http://localhost/mcp", "*")


def test_sealer_round_trip_hides_the_secret() -> None:
    sealer = Sealer(b"key one")
    token = sealer.seal("alpha", {"Authorization": "Bearer s3cret"})
    assert "s3cret" not in token and "Authorization" not in token
    assert sealer.open("alpha", token) == {"Authorization": "Bearer s3cret"}
    assert sealer.seal("alpha", {"a": "b"}) != sealer.seal("alpha", {"a": "b"})  # fresh nonce


def test_sealed_headers_open_only_with_their_key_and_label() -> None:
    token = Sealer(b"key one").seal("alpha", {"X": "y"})
    with pytest.raises(ValueError, match="cannot be opened"):
        Sealer(b"key two").open("alpha", token)
    with pytest.raises(ValueError, match="cannot be opened"):
        Sealer(b"key one").open("beta", token)
    with pytest.raises(ValueError, match="unknown sealed format"):
        Sealer(b"key one").open("alpha", "plain")
