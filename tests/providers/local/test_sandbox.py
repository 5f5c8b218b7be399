"""The sandbox conformance kit against the local shell provider's sandboxes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import BaseSandbox, UnmanagedSandboxError
from sandbox_sdk.providers.local import LocalProvider, LocalSandbox
from sandbox_sdk.testing import SandboxConformanceTests, provided_sandbox


class TestLocalSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, module_provider: LocalProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(module_provider, "conformance")


def test_a_handle_built_without_a_provider_cannot_delete_its_sandbox(tmp_path: Path) -> None:
    """Nothing could delete it: ``with`` refuses on entry, before any work."""
    sandbox = LocalSandbox(tmp_path)
    with pytest.raises(UnmanagedSandboxError, match="not handed out by a provider"):
        sandbox.delete_sandbox()
    with pytest.raises(UnmanagedSandboxError), sandbox:
        sandbox.write("never.txt", "x")
    assert list(tmp_path.iterdir()) == []


async def test_a_handle_built_without_a_provider_cannot_delete_its_sandbox_async(tmp_path: Path) -> None:
    sandbox = LocalSandbox(tmp_path)
    with pytest.raises(UnmanagedSandboxError):
        await sandbox.adelete_sandbox()
    with pytest.raises(UnmanagedSandboxError):
        async with sandbox:
            await sandbox.awrite("never.txt", "x")
    assert list(tmp_path.iterdir()) == []
