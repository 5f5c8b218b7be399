"""``NetworkPolicy``'s decisions and the egress proxy's reading of requests,
on their own (tests/providers/bwrap/test_egress.py runs them for real)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from sandbox_sdk import NetworkPolicy, errors
from sandbox_sdk.network import EgressRefused
from sandbox_sdk.provider_kit import egress_proxy
from sandbox_sdk.provider_kit.egress_proxy import BadRequest, EgressProxy


def resolver(*addresses: str) -> Callable[[str], list[str]]:
    return lambda host: list(addresses)


def test_names_match_exactly_or_under_a_wildcard() -> None:
    policy = NetworkPolicy(allow=["API.example.com.", "*.example.org"])
    assert policy.allow == ("api.example.com", "*.example.org")
    assert policy.allows_name("api.example.com") and policy.allows_name("API.Example.Com.")
    assert not policy.allows_name("www.api.example.com")
    assert policy.allows_name("a.example.org") and policy.allows_name("a.b.example.org")
    assert not policy.allows_name("example.org")  # the wildcard is for names under it
    assert not policy.allows_name("badexample.org")
    assert not policy.allows_name("example.org.evil.test")


def test_addresses_pass_only_when_listed() -> None:
    policy = NetworkPolicy(allow=["api.test", "10.0.0.0/8", "192.0.2.7"])
    assert policy.destinations("10.1.2.3") == ["10.1.2.3"]
    assert policy.destinations("192.0.2.7") == ["192.0.2.7"]
    for literal in ("192.0.2.8", "127.0.0.1", "[::1]", "::ffff:127.0.0.1", "8.8.8.8"):
        with pytest.raises(EgressRefused, match="address not listed"):
            policy.destinations(literal)


def test_a_name_is_let_out_only_to_its_public_or_listed_addresses() -> None:
    policy = NetworkPolicy(allow=["api.test", "*.corp.test", "10.9.0.0/16"])
    assert policy.destinations("api.test", resolver("93.184.216.34")) == ["93.184.216.34"]
    # rebinding: a private or loopback answer is dropped, a listed one kept
    assert policy.destinations("api.test", resolver("127.0.0.1", "93.184.216.34")) == ["93.184.216.34"]
    assert policy.destinations("db.corp.test", resolver("10.9.1.1")) == ["10.9.1.1"]
    for answers in (
        ("127.0.0.1",),
        ("10.8.0.1",),
        ("169.254.169.254",),
        ("::1",),
        ("fd00::1",),
        ("0.0.0.0",),
    ):
        with pytest.raises(EgressRefused, match="private or loopback"):
            policy.destinations("api.test", resolver(*answers))
    with pytest.raises(EgressRefused, match="not allowed"):
        policy.destinations("other.test", resolver("93.184.216.34"))
    assert NetworkPolicy(allow=["api.test"], deny_private=False).destinations(
        "api.test", resolver("10.8.0.1")
    ) == ["10.8.0.1"]


def test_hosts_come_before_the_resolver() -> None:
    policy = NetworkPolicy(allow=["api.test", "127.0.0.5"], hosts={"API.test": "127.0.0.5"})
    assert policy.destinations("api.test", resolver("93.184.216.34")) == ["127.0.0.5"]


def test_a_name_that_does_not_resolve_is_refused() -> None:
    def failing(host: str) -> list[str]:
        raise socket.gaierror("no such name")

    with pytest.raises(EgressRefused, match="does not resolve"):
        NetworkPolicy(allow=["api.test"]).destinations("api.test", failing)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"allow": "api.test"}, "not a string"),
        ({"allow": ["api.test/x"]}, "neither a host name"),
        ({"allow": ["*"]}, "neither a host name"),
        ({"allow": ["a..b"]}, "neither a host name"),
        ({"allow": [3]}, "neither a host name"),
        ({"allow": ["api.test"], "hosts": {"api.test": "not an address"}}, "is not an IP address"),
        ({"allow": ["api.test"], "hosts": {"*.test": "127.0.0.1"}}, "not a host name"),
        ({"allow": ["api.test"], "deny_private": "no"}, "boolean"),
        ({"allow": ["api.test"], "block": True}, "Extra inputs"),
        ({}, "Field required"),
    ],
)
def test_a_bad_policy_is_a_typed_error(values: dict[str, object], message: str) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=message):
        NetworkPolicy(**values)


def test_request_heads_are_read_strictly() -> None:
    method, target, headers = egress_proxy.parse_head(
        b"GET http://a.test/x?q=1 HTTP/1.1\r\nHost: b.test\r\nX: y"
    )
    assert (method, target, headers) == ("GET", "http://a.test/x?q=1", [("Host", "b.test"), ("X", "y")])
    host, port, request = egress_proxy.origin_request(method, target, headers)
    assert (host, port) == ("a.test", 80)
    assert request == b"GET /x?q=1 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\nX: y\r\n\r\n"
    assert egress_proxy.split_authority("[::1]:8443", None) == ("::1", 8443)
    for head in (b"GET /x", b"GET / HTTP/2\r\n", b"GET / HTTP/1.1\r\n bad", b"GET / HTTP/1.1\r\nno colon"):
        with pytest.raises(BadRequest):
            egress_proxy.parse_head(head)
    for authority in ("a.test", "a.test:x", "u@a.test:1", "a.test:1/p", ":80"):
        with pytest.raises(BadRequest):
            egress_proxy.split_authority(authority, None)
    for target in ("/relative", "https://a.test/", "ftp://a.test/"):
        with pytest.raises(BadRequest, match="only absolute http://"):
            egress_proxy.origin_request("GET", target, [])


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int]]:
    """A proxy on this process's loopback allowing nothing, with room for one connection."""
    monkeypatch.setattr(egress_proxy, "MAX_CONNECTIONS", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(
        target=EgressProxy(listener, NetworkPolicy(allow=["api.test"])).serve_forever, daemon=True
    ).start()
    yield listener.getsockname()[:2]
    listener.close()


def answer(connection: socket.socket, request: bytes = b"") -> bytes:
    connection.settimeout(30)
    if request:
        connection.sendall(request)
    data = b""
    while chunk := connection.recv(4096):
        data += chunk
    return data


def test_a_connection_over_the_limit_is_answered_503(proxy: tuple[str, int]) -> None:
    with socket.create_connection(proxy, timeout=30) as first:
        first.sendall(b"GET http://api.te")  # holds its room, its head unfinished
        with socket.create_connection(proxy, timeout=30) as second:
            assert answer(second).startswith(b"HTTP/1.1 503 ")
        first.sendall(b"st.invalid/ HTTP/1.1\r\n\r\n")
        assert answer(first).startswith(b"HTTP/1.1 403 ")
    with socket.create_connection(proxy, timeout=30) as third:  # the room is free again
        assert answer(third, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403 ")
