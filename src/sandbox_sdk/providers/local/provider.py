"""The local provider; see the package docstring."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.provider_kit.host_state import WORKSPACE_DIR, HostStateProvider, SandboxRecord, mark_used
from sandbox_sdk.providers.local.sandbox import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_TIMEOUT,
    LocalSandbox,
)


class TrackedLocalSandbox(LocalSandbox):
    """A :class:`LocalSandbox` handed out by :class:`LocalProvider`; each
    ``execute`` counts as a use for the idle timeout."""

    #: The sandbox's directory in the provider's state (set by the provider).
    sandbox_dir: Path

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        mark_used(self.sandbox_dir)
        return super().execute(command, timeout=timeout)

    async def aexecute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        mark_used(self.sandbox_dir)
        return await super().aexecute(command, timeout=timeout)


class LocalProviderOptions(TypedDict, total=False):
    """The keyword arguments of :class:`LocalProvider` (``get_provider("local", **config)``
    type-checks them against this; tests/test_registry.py keeps the two alike)."""

    state_dir: str | os.PathLike[str] | None
    timeout: float
    max_output_bytes: int
    env: Mapping[str, str] | None


class LocalProvider(HostStateProvider[TrackedLocalSandbox]):
    """Hands out :class:`LocalSandbox` es, each a directory under ``state_dir``.

    **Not isolated** (see the module warning): choose it explicitly, for tests
    and trusted code. ``create`` options: ``ttl``, ``idle_timeout``, ``setup``
    (see docs/lifecycle.md). The operation server its sandboxes' file
    operations start is a process of this machine, shared by the user's
    programs: it is stopped when the program that started it exits
    normally, and otherwise (``os._exit``, a kill) exits after
    ``operation_server_idle`` seconds (600) without a request
    (docs/lifecycle.md)."""

    name = "local"

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(state_dir)
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.env = dict(env or {})

    def _open(self, record: SandboxRecord, directory: Path) -> TrackedLocalSandbox:
        sandbox = TrackedLocalSandbox(
            directory / WORKSPACE_DIR,
            sandbox_id=record.id,
            timeout=self.timeout,
            max_output_bytes=self.max_output_bytes,
            env=self.env,
        )
        sandbox.sandbox_dir = directory
        return sandbox
