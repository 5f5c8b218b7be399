"""``SandboxProvider``: create, find, list and delete sandboxes.

A provider implements four primitives (``_create``, ``get``, ``list``,
``delete``); this class derives ``get_or_create``, ``create`` (all or
nothing: a sandbox that fails its health check is deleted before the error
propagates), the cursor-following iterator, and async twins of all of them.
The twins run the sync primitives in a worker thread unless a provider
overrides the async primitives (``_acreate``, ``aget``, ``alist``,
``adelete``) with a native async client.
"""

from __future__ import annotations

import builtins
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, ClassVar, Generic, TypeVar

import anyio.to_thread

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import SandboxInfo, SandboxPage

SandboxT = TypeVar("SandboxT", bound=BaseSandbox)

#: Entry-point group under which providers register, by name.
ENTRY_POINT_GROUP = "sandbox_sdk.providers"
#: Timeout of the liveness probe run before a sandbox is handed out.
HEALTH_CHECK_TIMEOUT = 30.0


def labels_match(have: Mapping[str, str], want: Mapping[str, str] | None) -> bool:
    """The ``list`` filter: every requested label is present with its value."""
    return not want or all(have.get(key) == value for key, value in want.items())


class SandboxProvider(ABC, Generic[SandboxT]):
    """Hands out sandboxes of one kind. See docs/provider-guide.md."""

    #: The name under which the provider is registered (entry point).
    name: ClassVar[str] = ""

    # -- what a provider implements -----------------------------------------------------

    @abstractmethod
    def _create(self, *, labels: dict[str, str], **options: Any) -> SandboxT:
        """Make a new sandbox carrying ``labels``; ``options`` are provider-specific."""

    @abstractmethod
    def get(self, sandbox_id: str) -> SandboxT:
        """Connect to an existing sandbox, or raise :class:`~sandbox_sdk.errors.SandboxNotFoundError`."""

    @abstractmethod
    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """A page of sandboxes carrying ``labels`` (at least), in a stable order."""

    @abstractmethod
    def delete(self, *, sandbox_id: str) -> None:
        """Delete a sandbox; deleting one that does not exist succeeds."""

    # -- derived ----------------------------------------------------------------------------

    def is_alive(self, sandbox: SandboxT) -> bool:
        """Whether the sandbox answers a trivial command."""
        try:
            response = sandbox.execute("true", timeout=HEALTH_CHECK_TIMEOUT)
        except Exception:  # noqa: BLE001 - any failure means "not usable"
            return False
        return response.exit_code == 0

    def create(self, *, labels: Mapping[str, str] | None = None, **options: Any) -> SandboxT:
        """A new sandbox, checked alive; deleted again if the check fails."""
        sandbox = self._create(labels=dict(labels or {}), **options)
        try:
            if not self.is_alive(sandbox):
                raise errors.SandboxRuntimeError(f"new sandbox {sandbox.id} failed its health check")
        except BaseException:
            with contextlib.suppress(Exception):
                self.delete(sandbox_id=sandbox.id)
            raise
        return sandbox

    def label_lock(self, labels: Mapping[str, str]) -> contextlib.AbstractContextManager[object]:
        """Held while ``get_or_create`` looks up and creates by labels. Providers
        that can (the local ones, with a file lock) make it exclusive across
        processes, so concurrent callers get the same sandbox."""
        return contextlib.nullcontext()

    def get_or_create(
        self, *, sandbox_id: str | None = None, labels: Mapping[str, str] | None = None, **options: Any
    ) -> SandboxT:
        """With ``sandbox_id``: that sandbox, or ``SandboxNotFoundError`` (never a
        new one). With ``labels``: a live sandbox carrying exactly those labels,
        or a new one with them. With neither: a new sandbox."""
        if sandbox_id is not None:
            sandbox = self.get(sandbox_id)
            if not self.is_alive(sandbox):
                raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} exists but is not running")
            return sandbox
        if not labels:
            return self.create(**options)
        with self.label_lock(labels):
            for info in self.iter_sandboxes(labels=labels):
                if info.labels == dict(labels):
                    with contextlib.suppress(errors.SandboxNotFoundError):
                        sandbox = self.get(info.id)
                        if self.is_alive(sandbox):
                            return sandbox
            return self.create(labels=labels, **options)

    def iter_sandboxes(
        self, *, labels: Mapping[str, str] | None = None, page_size: int = 100
    ) -> Iterator[SandboxInfo]:
        """Every sandbox carrying ``labels``, following cursors to the end."""
        cursor: str | None = None
        while True:
            page = self.list(labels=labels, cursor=cursor, limit=page_size)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- async twins ----------------------------------------------------------------------

    async def _acreate(self, *, labels: dict[str, str], **options: Any) -> SandboxT:
        return await anyio.to_thread.run_sync(lambda: self._create(labels=labels, **options))

    async def aget(self, sandbox_id: str) -> SandboxT:
        return await anyio.to_thread.run_sync(self.get, sandbox_id)

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        return await anyio.to_thread.run_sync(lambda: self.list(labels=labels, cursor=cursor, limit=limit))

    async def adelete(self, *, sandbox_id: str) -> None:
        await anyio.to_thread.run_sync(lambda: self.delete(sandbox_id=sandbox_id))

    async def ais_alive(self, sandbox: SandboxT) -> bool:
        try:
            response = await sandbox.aexecute("true", timeout=HEALTH_CHECK_TIMEOUT)
        except Exception:  # noqa: BLE001 - any failure means "not usable"
            return False
        return response.exit_code == 0

    async def acreate(self, *, labels: Mapping[str, str] | None = None, **options: Any) -> SandboxT:
        sandbox = await self._acreate(labels=dict(labels or {}), **options)
        try:
            if not await self.ais_alive(sandbox):
                raise errors.SandboxRuntimeError(f"new sandbox {sandbox.id} failed its health check")
        except BaseException:
            with contextlib.suppress(Exception):
                await self.adelete(sandbox_id=sandbox.id)
            raise
        return sandbox

    async def aget_or_create(
        self, *, sandbox_id: str | None = None, labels: Mapping[str, str] | None = None, **options: Any
    ) -> SandboxT:
        if sandbox_id is not None:
            sandbox = await self.aget(sandbox_id)
            if not await self.ais_alive(sandbox):
                raise errors.SandboxNotFoundError(f"sandbox {sandbox_id} exists but is not running")
            return sandbox
        if not labels:
            return await self.acreate(**options)
        if type(self).label_lock is not SandboxProvider.label_lock:
            # A blocking cross-process lock: run the whole lookup in a thread.
            return await anyio.to_thread.run_sync(lambda: self.get_or_create(labels=labels, **options))
        async for info in self.aiter_sandboxes(labels=labels):
            if info.labels == dict(labels):
                with contextlib.suppress(errors.SandboxNotFoundError):
                    sandbox = await self.aget(info.id)
                    if await self.ais_alive(sandbox):
                        return sandbox
        return await self.acreate(labels=labels, **options)

    async def aiter_sandboxes(
        self, *, labels: Mapping[str, str] | None = None, page_size: int = 100
    ) -> AsyncIterator[SandboxInfo]:
        cursor: str | None = None
        while True:
            page = await self.alist(labels=labels, cursor=cursor, limit=page_size)
            for info in page.items:
                yield info
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


def available_providers() -> builtins.list[str]:
    """Names of the providers registered under the ``sandbox_sdk.providers`` entry point."""
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def get_provider(name: str, **config: Any) -> SandboxProvider[Any]:
    """The provider registered as ``name``, constructed with ``config``.

    Third-party packages register theirs under the same entry-point group."""
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        raise errors.ProviderUnavailableError(
            f"no sandbox provider named {name!r}; installed: {', '.join(available_providers()) or 'none'}"
        )
    try:
        factory = matches[0].load()
    except ImportError as exc:
        raise errors.ProviderUnavailableError(
            f"provider {name!r} is registered but cannot be imported ({exc}); is its extra installed?"
        ) from exc
    provider = factory(**config)
    if not isinstance(provider, SandboxProvider):
        raise errors.ProviderUnavailableError(f"entry point {name!r} did not produce a SandboxProvider")
    return provider
