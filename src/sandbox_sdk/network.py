"""Egress by name: ``create(network=NetworkPolicy(allow=[...]))``.

A sandbox under a policy has a network namespace of its own whose only way
out is a proxy on the host that the SDK starts (``provider_kit.egress_proxy``),
which programs in the sandbox reach through ``HTTP_PROXY`` / ``HTTPS_PROXY``.
The proxy decides each connection here, by the name the program asked for,
never by what a program put in a header, and connects only to the addresses
it resolved itself (docs/policy.md):

- a name must match an entry of ``allow``: ``example.com`` (that name only) or
  ``*.example.com`` (any name under it, not the name itself);
- an address asked for directly (an IP literal) must lie in an address or
  network listed in ``allow`` (``10.0.0.0/8``, ``192.0.2.7``): a listed name
  does not let its addresses in by number;
- with ``deny_private`` (the default), a name that resolves to a loopback,
  private, link-local or otherwise non-public address is refused unless that
  address is listed too: a public name pointed at the host's own services or
  the local network (DNS rebinding) reaches nothing.

``hosts`` maps names to addresses for the proxy, ahead of the host's
resolver (as ``curl --resolve`` or ``docker run --add-host``): for names a
private DNS does not serve, and for tests, which give their own servers on
127.0.0.x names of their choosing.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from sandbox_sdk import errors

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: One label of a host name (letters, digits and hyphens, not at either end).
_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_NAME = re.compile(rf"(\*\.)?{_LABEL}(\.{_LABEL})*")


class EgressRefused(Exception):
    """A connection the policy does not let out; the message says why."""


def _network(entry: str) -> Network | None:
    """``entry`` as an address or network, or ``None`` if it is neither."""
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return None


def _name(host: str) -> str:
    """A host name as compared: lower case, without a final dot."""
    return host.lower().removesuffix(".")


class NetworkPolicy(BaseModel):
    """Which destinations a sandbox may reach, by name or address (see the module)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    allow: tuple[str, ...]
    deny_private: bool = True
    hosts: Mapping[str, str] = {}

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            problems = "; ".join(error["msg"] for error in exc.errors())
            raise errors.InvalidArgumentError(f"invalid NetworkPolicy: {problems}") from None

    @field_validator("allow", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        if isinstance(value, str):  # one name, not its letters
            raise ValueError("allow must be a list of names, addresses and networks, not a string")
        if isinstance(value, list | tuple | set | frozenset):
            entries = tuple(value)
            for entry in entries:
                if not isinstance(entry, str) or not (_network(entry) or _NAME.fullmatch(_name(entry))):
                    raise ValueError(
                        f"{entry!r} in allow is neither a host name (or *.suffix) nor an address or network"
                    )
            return tuple(_name(entry) if _network(entry) is None else entry for entry in entries)
        return value

    @field_validator("hosts", mode="before")
    @classmethod
    def _mapped(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            for name, address in value.items():
                if not isinstance(name, str) or not _NAME.fullmatch(_name(name)) or name.startswith("*"):
                    raise ValueError(f"{name!r} in hosts is not a host name")
                try:
                    ipaddress.ip_address(address)
                except (TypeError, ValueError):
                    raise ValueError(f"hosts[{name!r}] = {address!r} is not an IP address") from None
            return {_name(name): address for name, address in value.items()}
        return value

    @property
    def networks(self) -> tuple[Network, ...]:
        """The addresses and networks listed in ``allow``."""
        return tuple(network for entry in self.allow if (network := _network(entry)) is not None)

    def allows_name(self, host: str) -> bool:
        """Whether ``host`` (a name, not an address) matches an entry of ``allow``."""
        host = _name(host)
        for entry in self.allow:
            if entry.startswith("*."):
                if host.endswith(entry[1:]) and len(host) > len(entry) - 1:
                    return True
            elif entry == host:
                return True
        return False

    def listed(self, address: Address) -> bool:
        """Whether ``address`` lies in an address or network listed in ``allow``."""
        return any(address in network for network in self.networks)

    def destinations(self, host: str, resolve: Callable[[str], list[str]] | None = None) -> list[str]:
        """The addresses a connection to ``host`` may go to, in the resolver's
        order; :class:`EgressRefused` saying why if there is none."""
        literal = _address(host)
        if literal is not None:
            if not self.listed(literal):
                raise EgressRefused(f"{host} is an address not listed in the policy")
            return [str(literal)]
        if not self.allows_name(host):
            raise EgressRefused(f"{host} is not allowed by the policy")
        mapped = self.hosts.get(_name(host))
        try:
            found = [mapped] if mapped is not None else (resolve or resolve_name)(host)
        except OSError as exc:
            raise EgressRefused(f"{host} does not resolve: {exc}") from None
        allowed = []
        for text in found:
            address = ipaddress.ip_address(text)
            if self.listed(address) or address.is_global or not self.deny_private:
                allowed.append(str(address))
        if not allowed:
            raise EgressRefused(
                f"{host} resolves only to addresses that are private or loopback "
                f"({', '.join(found)}), and none of them is listed in the policy"
            )
        return allowed


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def resolve_name(host: str) -> list[str]:
    """The host's resolver's addresses for ``host``, each once, in its order."""
    found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))
