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
from typing import Any, Protocol, Self, TypedDict, Unpack

from sandbox_sdk import errors


class CreateOptions(TypedDict, total=False):
    """The names of the shipped providers' own ``create`` options, of any type
    (each provider checks the values, and refuses a name it does not take, with
    an ``InvalidArgumentError``, before anything is made): what ``create`` and
    ``get_or_create`` take besides their own keywords, so that a type checker
    catches a misspelt one (``create(ttll=5)``). tests/test_registry.py keeps it
    the union of the names the providers accept. A third-party provider with
    options of its own widens it by overriding ``create`` (a mapping passed as
    ``**options`` is checked at run time only)."""

    setup: Any  # the host providers (bwrap, local; remote, through its runner)
    limits: Any  # bwrap
    network: Any  # bwrap, docker, e2b
    mounts: Any  # bwrap, docker
    image: Any  # docker, kubernetes, modal, daytona
    env: Any  # docker, modal
    cpu: Any  # docker, modal
    memory_bytes: Any  # docker
    pids_limit: Any  # docker
    ephemeral_storage_bytes: Any  # kubernetes
    name: Any  # docker, modal, daytona
    template: Any  # e2b
    envs: Any  # e2b
    allow_internet_access: Any  # e2b
    lifecycle: Any  # e2b
    memory: Any  # modal
    region: Any  # modal
    cloud: Any  # modal
    block_network: Any  # modal
    secrets: Any  # modal, daytona
    create_timeout: Any  # daytona, and its CreateSandboxFrom{Snapshot,Image}Params:
    auto_archive_interval: Any
    auto_delete_interval: Any
    auto_pause_interval: Any
    auto_stop_interval: Any
    domain_allow_list: Any
    env_vars: Any
    ephemeral: Any
    kvm: Any
    language: Any
    linked_sandbox: Any
    network_allow_list: Any
    network_block_all: Any
    os_user: Any
    otel_endpoint_override: Any
    outbound_proxy_url: Any
    public: Any
    queue_timeout: Any
    resources: Any
    snapshot: Any
    spot: Any
    target: Any
    ttl_minutes: Any
    volumes: Any


class SandboxOwner(Protocol):
    """What deletes a sandbox, and makes its forks: its provider."""

    def delete(self, sandbox_id: str) -> None: ...

    async def adelete(self, sandbox_id: str) -> None: ...

    def create(
        self, *, from_snapshot: Any = ..., snapshot_store: Any = ..., **options: Unpack[CreateOptions]
    ) -> Any: ...

    async def acreate(
        self, *, from_snapshot: Any = ..., snapshot_store: Any = ..., **options: Unpack[CreateOptions]
    ) -> Any: ...


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
