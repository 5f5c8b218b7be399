"""A sandbox handle's own lifecycle: deleting its sandbox, and ``with``.

A provider tells each handle it hands out (``create``, ``get``,
``get_or_create``) that it is the one to delete it, so ``with
provider.create() as sandbox:`` deletes the sandbox on leaving the block and
``sandbox.delete_sandbox()`` deletes it at once. A handle built directly,
without a provider (``LocalSandbox(path)``), has nothing that could delete it:
those calls raise :class:`~sandbox_sdk.errors.UnmanagedSandboxError`, and so
does entering ``with`` on it, before any work is done.

The name is ``delete_sandbox``, not ``delete``: ``sandbox.delete(path)``
deletes a file, and a forgotten argument must not delete the whole sandbox.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Protocol, Self

from sandbox_sdk import errors


class SandboxOwner(Protocol):
    """What deletes a sandbox, and makes its forks: its provider."""

    def delete(self, sandbox_id: str) -> None: ...

    async def adelete(self, sandbox_id: str) -> None: ...

    def create(self, **options: Any) -> Any: ...

    async def acreate(self, **options: Any) -> Any: ...


class SandboxHandle(ABC):
    """The lifecycle half of a sandbox handle; see the module docstring."""

    #: The provider that handed this handle out; ``None`` for one built directly.
    _owner: SandboxOwner | None = None

    @property
    @abstractmethod
    def id(self) -> str:
        """A stable identifier for this sandbox."""

    def _owning_provider(self) -> SandboxOwner:
        if self._owner is None:
            raise errors.UnmanagedSandboxError(
                f"{type(self).__name__} {self.id} was not handed out by a provider, so it cannot delete "
                "its sandbox; get it from provider.create() / get() / get_or_create()"
            )
        return self._owner

    def delete_sandbox(self) -> None:
        """Delete this sandbox through the provider that handed it out; idempotent."""
        self._owning_provider().delete(self.id)

    async def adelete_sandbox(self) -> None:
        """Async twin of :meth:`delete_sandbox`."""
        await self._owning_provider().adelete(self.id)

    def __enter__(self) -> Self:
        self._owning_provider()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.delete_sandbox()

    async def __aenter__(self) -> Self:
        self._owning_provider()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.adelete_sandbox()
