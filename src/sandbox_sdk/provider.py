"""``SandboxProvider``: create, find, list and delete sandboxes.

A provider implements four primitives (``_create``, ``_get``, ``list``,
``_delete``); this class derives ``get``, ``delete``, ``get_or_create``,
``create`` (all or nothing: a sandbox that fails its health check is deleted
before the error propagates), the cursor-following iterator, and async twins
of all of them. Every handle it hands out knows its provider, so
``sandbox.delete_sandbox()`` and ``with provider.create() as sandbox:`` work.
Each is written once, as a flow in :mod:`sandbox_sdk._provider_flows` that
the kernel runs with the sync primitives or with the async ones (the public
shells are generated into :mod:`sandbox_sdk._provider_lifecycle`). The async
primitives run the sync ones in a worker thread unless a provider overrides
them (``_acreate``, ``_aget``, ``alist``, ``_adelete``) with a native async client.

Every provider imports this module, so it knows no provider: finding one by
name (``get_provider``) is :mod:`sandbox_sdk.registry`, above the providers.
"""

from __future__ import annotations

import contextlib
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.to_thread

from sandbox_sdk._handle import CreateOptions as CreateOptions  # noqa: PLC0414 - re-exported: create's **options
from sandbox_sdk._provider_flows import (
    Create,
    Delete,
    Get,
    List,
    Listing,
    Lock,
    Probe,
    Request,
    Restore,
    SandboxT,
    Sleep,
    Unlock,
)
from sandbox_sdk._provider_lifecycle import ProviderLifecycle
from sandbox_sdk.models import SandboxInfo, SandboxPage

#: Timeout of the liveness probe run before a sandbox is handed out.
HEALTH_CHECK_TIMEOUT = 30.0
#: The liveness probe: a sandbox is usable if this exits 0.
PROBE_COMMAND = "true"


def labels_match(have: Mapping[str, str], want: Mapping[str, str] | None) -> bool:
    """The ``list`` filter: every requested label is present with its value."""
    return not want or all(have.get(key) == value for key, value in want.items())


class SandboxProvider(ProviderLifecycle[SandboxT]):
    """Hands out sandboxes of one kind. See docs/provider-guide.md."""

    # -- what a provider implements -----------------------------------------------------

    @abstractmethod
    def _create(self, *, labels: dict[str, str], **options: Any) -> SandboxT:
        """Make a new sandbox carrying ``labels``; ``options`` are provider-specific."""

    @abstractmethod
    def _get(self, sandbox_id: str) -> SandboxT:
        """Connect to an existing sandbox, or raise :class:`~sandbox_sdk.errors.SandboxNotFoundError`."""

    @abstractmethod
    def list(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """A page of sandboxes carrying ``labels`` (at least), in a stable order."""

    @abstractmethod
    def _delete(self, sandbox_id: str) -> None:
        """Delete a sandbox; deleting one that does not exist succeeds."""

    def _label_lock(self, labels: Mapping[str, str]) -> contextlib.AbstractContextManager[object]:
        """Held while ``get_or_create`` looks up and creates by labels. Providers
        that can (the local ones, with a file lock) make it exclusive across
        processes, so concurrent callers get the same sandbox. It may block:
        the async twins enter it in a worker thread."""
        return contextlib.nullcontext()

    # -- clients: released by close(), also on leaving ``with provider:`` ------------------

    def close(self) -> None:
        """Release the provider's clients (connections, sessions); idempotent. Its
        sandboxes keep running, but handles from this provider may stop working.
        The default has nothing to release."""

    async def aclose(self) -> None:
        """Async twin of :meth:`close`; providers with async clients close them here."""
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- async primitives: worker threads unless a provider has a native async client ----

    async def _acreate(self, *, labels: dict[str, str], **options: Any) -> SandboxT:
        return await anyio.to_thread.run_sync(lambda: self._create(labels=labels, **options))

    async def _aget(self, sandbox_id: str) -> SandboxT:
        """Connect to an existing sandbox, or raise :class:`~sandbox_sdk.errors.SandboxNotFoundError`."""
        return await anyio.to_thread.run_sync(self._get, sandbox_id)

    async def alist(
        self, *, labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 100
    ) -> SandboxPage:
        """A page of sandboxes carrying ``labels`` (at least), in a stable order."""
        return await anyio.to_thread.run_sync(lambda: self.list(labels=labels, cursor=cursor, limit=limit))

    async def _adelete(self, sandbox_id: str) -> None:
        """Delete a sandbox; deleting one that does not exist succeeds."""
        await anyio.to_thread.run_sync(self._delete, sandbox_id)

    # -- derived here: the iterators (the rest, generated, comes from ProviderLifecycle) --

    def iter_sandboxes(
        self, *, labels: Mapping[str, str] | None = None, page_size: int = 100
    ) -> Iterator[SandboxInfo]:
        """Every sandbox carrying ``labels``, following cursors to the end (a
        page is fetched when the iteration reaches it)."""
        listing = Listing(labels, page_size)
        while not listing.done:
            yield from self._drive(listing.next_page())

    async def aiter_sandboxes(
        self, *, labels: Mapping[str, str] | None = None, page_size: int = 100
    ) -> AsyncIterator[SandboxInfo]:
        """Every sandbox carrying ``labels``, following cursors to the end (a
        page is fetched when the iteration reaches it)."""
        listing = Listing(labels, page_size)
        while not listing.done:
            for info in await self._adrive(listing.next_page()):
                yield info

    def _handed_out(self, sandbox: SandboxT) -> SandboxT:
        """``sandbox``, told which provider deletes it."""
        sandbox._owner = self
        return sandbox

    # -- the kernel's performers ---------------------------------------------------------

    def _perform(self, request: Request) -> Any:
        """One request of a flow, with the sync primitives."""
        match request:
            case Get(sandbox_id):
                return self._handed_out(self._get(sandbox_id))
            case List(labels, cursor, limit):
                return self.list(labels=labels, cursor=cursor, limit=limit)
            case Create(labels, options):
                return self._handed_out(self._create(labels=labels, **options))
            case Probe(sandbox):
                return sandbox.execute(PROBE_COMMAND, timeout=HEALTH_CHECK_TIMEOUT)
            case Restore(sandbox, snapshot, store):
                return sandbox.restore(snapshot, store=store)
            case Delete(sandbox_id):
                return self._delete(sandbox_id)
            case Lock(labels):
                return enter_lock(self._label_lock(labels))
            case Unlock(held):
                return held.__exit__(None, None, None)
            case Sleep(seconds):
                return time.sleep(seconds)
        raise TypeError(f"{type(self).__name__} cannot perform a {type(request).__name__}")

    async def _aperform(self, request: Request) -> Any:
        """One request of a flow, with the async primitives; a blocking label
        lock is entered in a worker thread, the flow stays on the event loop."""
        match request:
            case Get(sandbox_id):
                return self._handed_out(await self._aget(sandbox_id))
            case List(labels, cursor, limit):
                return await self.alist(labels=labels, cursor=cursor, limit=limit)
            case Create(labels, options):
                return self._handed_out(await self._acreate(labels=labels, **options))
            case Probe(sandbox):
                return await sandbox.aexecute(PROBE_COMMAND, timeout=HEALTH_CHECK_TIMEOUT)
            case Restore(sandbox, snapshot, store):
                return await sandbox.arestore(snapshot, store=store)
            case Delete(sandbox_id):
                return await self._adelete(sandbox_id)
            case Lock(labels):
                return await anyio.to_thread.run_sync(enter_lock, self._label_lock(labels))
            case Unlock(held):
                return held.__exit__(None, None, None)
            case Sleep(seconds):
                return await anyio.sleep(seconds)
        raise TypeError(f"{type(self).__name__} cannot perform a {type(request).__name__}")


def enter_lock(lock: contextlib.AbstractContextManager[object]) -> contextlib.AbstractContextManager[object]:
    """Enter ``lock`` and return it, for the :class:`Unlock` that leaves it."""
    lock.__enter__()
    return lock
