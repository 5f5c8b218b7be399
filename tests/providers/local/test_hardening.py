"""Issue 13's permission findings as root: the local provider runs commands as
the host user, here root, whom the kernel lets write any file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import BaseSandbox
from sandbox_sdk.providers.local import LocalProvider
from sandbox_sdk.testing import provided_sandbox


@pytest.fixture(scope="module")
def sandbox(module_provider: LocalProvider) -> Iterator[BaseSandbox]:
    yield from provided_sandbox(module_provider, "hardening")


@pytest.mark.skipif(os.geteuid() != 0, reason="root's permission bypass")
def test_root_replaces_a_read_only_file_as_the_kernel_lets_it(sandbox: BaseSandbox, tmp_path: Path) -> None:
    target = tmp_path / "ro"
    target.write_text("old")
    target.chmod(0o444)
    sandbox.write(str(target), "new", overwrite=True)
    assert (target.read_text(), target.stat().st_mode & 0o777) == ("new", 0o444)
