"""The remote provider; see the package docstring."""

from __future__ import annotations

import builtins
import os
import ssl
from collections.abc import Mapping
from typing import Any, TypedDict

import anyio.to_thread

from sandbox_sdk import errors
from sandbox_sdk.models import SandboxPage
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.provider_kit.host_state import SETUP_TIMEOUT
from sandbox_sdk.providers.remote._link import Link, Reply, Request
from sandbox_sdk.providers.remote.sandbox import RemoteSandbox
from sandbox_sdk.wire import security

#: Where the provider reads the runner's URL when none is given.
URL_ENV = "SANDBOX_SDK_REMOTE_URL"


class RemoteProviderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`RemoteProvider` (``get_provider("remote", **config)``
    type-checks them against this; tests/test_registry.py keeps the two alike)."""

    url: str | None
    token: str | None
    cafile: str | None
    tls: ssl.SSLContext | None
    connect_timeout: float
    request_timeout: float


class RemoteProvider(SandboxProvider[RemoteSandbox]):
    """Sandboxes of one runner. ``url`` is the runner's own (``ws://HOST:PORT``
    of ``--listen``) or a coordinator's for it (``wss://HOST/client/<runner-id>``);
    ``token`` is the runner's client token (default: ``$SANDBOX_SDK_CLIENT_TOKEN``).
    ``cafile`` trusts a self-signed certificate; ``tls`` replaces the whole
    TLS context. ``request_timeout`` bounds a lifecycle request (``create``
    with ``setup`` gets the setup's time on top).

    ``create`` options: ``ttl``, ``idle_timeout``, ``setup``; the runner's
    owner sets the rest. One connection serves the provider and every
    sandbox it hands out; :meth:`close` (or ``with``) ends it."""

    name = "remote"
    #: Clients of one runner share no label lock (the runner serves list and
    #: create, not get_or_create), so a client that created converges after
    #: creating: the oldest sandbox with the labels wins, the others are deleted.
    #: The runner's listing is exact: this bounds a wait that ends at once.
    _listing_lag = 5.0

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        cafile: str | None = None,
        tls: ssl.SSLContext | None = None,
        connect_timeout: float = 10.0,
        request_timeout: float = 60.0,
    ) -> None:
        url = url or os.environ.get(URL_ENV)
        token = token or os.environ.get(security.CLIENT_TOKEN_ENV)
        if not url:
            raise errors.ProviderUnavailableError(f"no runner URL: pass url= or set {URL_ENV}")
        if not token:
            raise errors.AuthenticationError(
                f"no client token: pass token= or set {security.CLIENT_TOKEN_ENV}"
            )
        context = tls if tls is not None else security.client_context(url, cafile)
        self._link = Link(url, token, tls=context, connect_timeout=connect_timeout)
        self.url = url
        self.request_timeout = request_timeout

    def _create(self, *, labels: dict[str, str], **options: Any) -> RemoteSandbox:
        return self._sandbox(self._link.call(self._create_request(labels, options)))

    async def _acreate(self, *, labels: dict[str, str], **options: Any) -> RemoteSandbox:
        return self._sandbox(await self._link.acall(self._create_request(labels, options)))

    def _get(self, sandbox_id: str) -> RemoteSandbox:
        return self._sandbox(self._link.call(self._request("get", sandbox=sandbox_id)))

    async def _aget(self, sandbox_id: str) -> RemoteSandbox:
        return self._sandbox(await self._link.acall(self._request("get", sandbox=sandbox_id)))

    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        return _page(self._link.call(self._list_request(labels, cursor, limit)))

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        return _page(await self._link.acall(self._list_request(labels, cursor, limit)))

    def _delete(self, sandbox_id: str) -> None:
        self._link.call(self._request("delete", sandbox=sandbox_id))

    async def _adelete(self, sandbox_id: str) -> None:
        await self._link.acall(self._request("delete", sandbox=sandbox_id))

    def reap(self) -> builtins.list[str]:
        """Delete every expired sandbox on the runner (its backend's ``reap``:
        sandboxes there are kept on the runner's machine, which nothing else
        expires); returns their ids."""
        return _reaped(self._link.call(self._request("reap")))

    async def areap(self) -> builtins.list[str]:
        """Async twin of :meth:`reap`."""
        return _reaped(await self._link.acall(self._request("reap")))

    def close(self) -> None:
        """End the connection; the provider's sandboxes can no longer be used."""
        self._link.close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close` (it waits for the connection's own loop thread)."""
        await anyio.to_thread.run_sync(self.close)

    # -- requests ----------------------------------------------------------------------

    def _request(self, op: str, *, extra_seconds: float = 0.0, **args: Any) -> Request:
        return Request(op, args, timeout=self.request_timeout + extra_seconds)

    def _create_request(self, labels: dict[str, str], options: dict[str, Any]) -> Request:
        extra = SETUP_TIMEOUT if options.get("setup") is not None else 0.0
        return self._request("create", extra_seconds=extra, labels=labels, options=options)

    def _list_request(self, labels: Mapping[str, str] | None, cursor: str | None, limit: int) -> Request:
        return self._request(
            "list", labels=None if labels is None else dict(labels), cursor=cursor, limit=limit
        )

    def _sandbox(self, reply: Reply) -> RemoteSandbox:
        return RemoteSandbox(self._link, str(reply.result["id"]))


def _reaped(reply: Reply) -> builtins.list[str]:
    reaped = reply.result.get("reaped")
    if not isinstance(reaped, builtins.list) or not all(isinstance(item, str) for item in reaped):
        raise errors.SandboxRuntimeError(f"reap: malformed reply from the runner: {reply.result!r:.200}")
    return reaped


def _page(reply: Reply) -> SandboxPage:
    return SandboxPage.model_validate(reply.result)
