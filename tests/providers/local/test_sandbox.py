"""The sandbox conformance kit against the local shell provider's sandboxes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import BaseSandbox, InvalidArgumentError, UnmanagedSandboxError
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


def test_run_timeout_zero_means_the_default_and_a_negative_one_is_refused(tmp_path: Path) -> None:
    """One meaning of 0 across run and the deepagents backend: the sandbox's default."""
    sandbox = LocalSandbox(tmp_path)
    assert sandbox.run("sleep 0.2; echo done", timeout=0).output == "done\n"
    assert sandbox.run("echo in", cwd=".", timeout=0).output == "in\n"
    with pytest.raises(InvalidArgumentError, match="timeout must be seconds > 0"):
        sandbox.run("true", timeout=-1)
