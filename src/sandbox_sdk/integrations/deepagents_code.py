"""This SDK's sandboxes as a sandbox provider of deepagents-code (``dcode``).

deepagents-code discovers third-party sandbox providers through the
``deepagents_code.sandbox_providers`` entry-point group: it calls what an entry
point names with no arguments (``entry.load()()`` in its
``integrations/sandbox_registry.py``) and uses the object it gets as its
``SandboxProvider`` (``integrations/sandbox_provider.py``):
``get_or_create(*, sandbox_id=None, **kwargs)`` returning a deepagents
``SandboxBackendProtocol``, ``delete(*, sandbox_id, **kwargs)``, their async
forms, and an optional ``metadata``. This distribution registers
:class:`DeepAgentsCodeProvider` there as ``sandbox-sdk``
(``dcode --sandbox sandbox-sdk``); ``SANDBOX_SDK_PROVIDER`` picks the provider
(``bwrap`` by default, as :func:`~sandbox_sdk.get_provider`).

deepagents-code needs Python 3.14 or later, so its ``SandboxProvider`` base
class cannot be imported where this SDK runs on 3.11-3.13: the class has its
shape (which is all the registry relies on) without subclassing it, and builds
the registry's metadata type only when deepagents-code is installed.
"""

from __future__ import annotations

import os
from typing import Any

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.integrations.deepagents import DeepAgentsBackend
from sandbox_sdk.provider import SandboxProvider
from sandbox_sdk.registry import DEFAULT_PROVIDER, PROVIDER_ENV, get_provider

__all__ = ["ENTRY_POINT_GROUP", "ENTRY_POINT_NAME", "DeepAgentsCodeProvider"]

#: The entry-point group deepagents-code reads (``ENTRY_POINT_GROUP`` in its sandbox_registry.py).
ENTRY_POINT_GROUP = "deepagents_code.sandbox_providers"
#: The name this distribution registers under it: ``dcode --sandbox sandbox-sdk``.
ENTRY_POINT_NAME = "sandbox-sdk"
#: Working directories of the providers whose sandboxes all start in the same place;
#: the others' depend on the sandbox (local: its own directory) or the image.
WORKING_DIRS = {"bwrap": "/workspace", "docker": "/workspace"}
#: What deepagents-code assumes when a provider states none.
DEFAULT_WORKING_DIR = "/workspace"


class DeepAgentsCodeProvider:
    """A deepagents-code ``SandboxProvider`` over one of this SDK's providers:
    the one given, else the one ``SANDBOX_SDK_PROVIDER`` names (``bwrap`` if
    unset), made on first use. Sandboxes come back as
    :class:`~sandbox_sdk.integrations.deepagents.DeepAgentsBackend`."""

    def __init__(self, provider: SandboxProvider[BaseSandbox] | None = None) -> None:
        self._provider = provider
        self.provider_name = os.environ.get(PROVIDER_ENV) or DEFAULT_PROVIDER

    @property
    def provider(self) -> SandboxProvider[BaseSandbox]:
        """The SDK provider, made on first use: deepagents-code makes a
        provider just to read its metadata, which needs none."""
        if self._provider is None:
            self._provider = get_provider(self.provider_name)
        return self._provider

    @property
    def metadata(self) -> Any:
        """deepagents-code's ``SandboxProviderMetadata`` for this provider
        (``None`` where deepagents-code is not installed, as its base class returns):
        reuse by id, no snapshots, the provider's working directory where it is fixed."""
        try:
            from deepagents_code.integrations.sandbox_provider import (
                SandboxInstallHint,
                SandboxProviderMetadata,
            )
        except ImportError:
            return None
        return SandboxProviderMetadata(
            name=ENTRY_POINT_NAME,
            working_dir=WORKING_DIRS.get(self.provider_name, DEFAULT_WORKING_DIR),
            install=SandboxInstallHint(kind="package", name="sandbox-sdk-py[deepagents]"),
            supports_sandbox_id=True,
            supports_snapshot_name=False,
            backend_module="sandbox_sdk.integrations.deepagents",
        )

    def get_or_create(self, *, sandbox_id: str | None = None, **kwargs: Any) -> DeepAgentsBackend:
        """The sandbox ``sandbox_id`` (``SandboxNotFoundError`` if it is gone),
        or a new one; ``kwargs`` (deepagents-code's per-provider ``params``)
        are the provider's ``get_or_create`` options: ``labels``, ``ttl``,
        ``idle_timeout`` and its own."""
        return DeepAgentsBackend(self.provider.get_or_create(sandbox_id=sandbox_id, **kwargs))

    async def aget_or_create(self, *, sandbox_id: str | None = None, **kwargs: Any) -> DeepAgentsBackend:
        """Async form of :meth:`get_or_create`, on the provider's async twin."""
        return DeepAgentsBackend(await self.provider.aget_or_create(sandbox_id=sandbox_id, **kwargs))

    def delete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        """Delete the sandbox (one already gone is not an error). deepagents-code
        passes no options to a delete; any given are refused."""
        _no_options("delete", kwargs)
        self.provider.delete(sandbox_id)

    async def adelete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        """Async form of :meth:`delete`."""
        _no_options("delete", kwargs)
        await self.provider.adelete(sandbox_id)


def _no_options(method: str, options: dict[str, Any]) -> None:
    if options:
        raise errors.InvalidArgumentError(f"{method} takes no options, not {sorted(options)}")
