"""Tokens and TLS for the runner, the coordinator and the client.

A runner has two secrets (:class:`RunnerTokens`): the *runner token*, with
which it registers at a coordinator, and the *client token*, which its
clients present. They differ, so a client cannot register as the runner at
the coordinator (while the real one is away) and receive the next
clients' commands. Whoever checks a token keeps only its SHA-256 and
compares digests with :func:`hmac.compare_digest`: constant time, and equal
lengths whatever was presented, so neither the token's content nor its
length leaks through timing.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import ssl
from typing import NamedTuple
from urllib.parse import urlsplit

from sandbox_sdk import errors

#: Where the runner reads its runner token when none is given.
TOKEN_ENV = "SANDBOX_SDK_RUNNER_TOKEN"
#: Where the runner and the client read the client token when none is given.
CLIENT_TOKEN_ENV = "SANDBOX_SDK_CLIENT_TOKEN"
#: Shortest token accepted: ``secrets.token_urlsafe(32)`` gives 43 characters.
MIN_TOKEN_CHARS = 16


class RunnerTokens(NamedTuple):
    """A runner's two secrets: ``runner`` registers it at a coordinator,
    ``client`` is what its clients present."""

    runner: str
    client: str

    def check(self) -> None:
        """Both long enough (:func:`token_digest`), and not the same."""
        token_digest(self.runner)
        token_digest(self.client)
        if self.runner == self.client:
            raise errors.InvalidArgumentError(
                "the runner token and the client token must differ: a client holding the runner "
                "token could register as the runner at the coordinator"
            )


def token_digest(token: str) -> bytes:
    if len(token) < MIN_TOKEN_CHARS:
        raise errors.InvalidArgumentError(
            f"a token must have at least {MIN_TOKEN_CHARS} characters; make one with "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return hashlib.sha256(token.encode("utf-8")).digest()


def token_matches(presented: object, digest: bytes) -> bool:
    """Whether ``presented`` (a hello's token field, of any type) is the token of ``digest``."""
    if not isinstance(presented, str):
        return False
    return hmac.compare_digest(hashlib.sha256(presented.encode("utf-8", "replace")).digest(), digest)


def server_context(certfile: str | None, keyfile: str | None) -> ssl.SSLContext | None:
    """TLS for a listening runner or coordinator; ``None`` without a certificate."""
    if certfile is None:
        if keyfile is not None:
            raise errors.InvalidArgumentError("a TLS key needs its certificate (--certfile)")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    return context


def client_context(url: str, cafile: str | None = None) -> ssl.SSLContext | None:
    """TLS for dialling ``url``: the system's trusted certificates, or those
    of ``cafile`` (a self-signed server's); ``None`` for ``ws://``."""
    if urlsplit(url).scheme != "wss":
        if cafile is not None:
            raise errors.InvalidArgumentError(f"a CA file was given for {url}, which is not wss://")
        return None
    return ssl.create_default_context(cafile=cafile)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_cleartext(logger: logging.Logger, host: str, tls: bool) -> None:
    """Tokens and files cross the network in clear without TLS: say so
    unless the traffic stays on this machine."""
    if not tls and not is_loopback(host):
        logger.warning(
            "no TLS towards %s: the token, commands and file contents travel in clear; "
            "use wss:// (--certfile/--keyfile on the listening side)",
            host,
        )
