"""An interrupted transfer (async cancellation, Ctrl-C) still cleans up after itself."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from sandbox_sdk import BaseSandbox
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import LimitedSandbox
from tests.transfer.transfer_helpers import (
    SMALL_COMMAND_BYTES,
    SMALL_OUTPUT_BYTES,
    leftovers,
    scratch_entries,
)


async def test_cancelled_async_upload_leaves_nothing(local: LocalSandbox) -> None:
    sandbox = LimitedSandbox(
        local, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES
    )
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        await sandbox.aupload_files([("big.bin", os.urandom(2_000_000))])
    assert scope.cancelled_caught
    assert time.monotonic() - started < 5
    assert sandbox.executed > 2  # it was cancelled mid-transfer, then cleaned up
    assert not (local.root_dir / "big.bin").exists()
    assert leftovers(local.root_dir) == []


async def test_cancelled_async_download_dir_removes_its_archive(
    local: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archives = tmp_path / "archives"
    archives.mkdir()
    monkeypatch.setattr(BaseSandbox, "scratch_dir", str(archives))
    tree = local.root_dir / "tree"
    tree.mkdir()
    (tree / "data.bin").write_bytes(os.urandom(1_500_000))
    sandbox = LimitedSandbox(
        local, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES
    )
    with anyio.move_on_after(0.5) as scope:
        await sandbox.adownload_dir("tree", tmp_path / "back")
    assert scope.cancelled_caught
    assert scratch_entries(archives) == []


class _InterruptedSandbox(LimitedSandbox):
    """Ctrl-C arrives during the ``interrupt_at``-th ``execute()``."""

    interrupt_at = 3

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        if self._count() == self.interrupt_at:
            raise KeyboardInterrupt
        return self._run(command, timeout)


def test_ctrl_c_during_a_sync_upload_leaves_nothing(local: LocalSandbox) -> None:
    (local.root_dir / "dest.bin").write_bytes(b"old")
    sandbox = _InterruptedSandbox(
        local, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES
    )
    with pytest.raises(KeyboardInterrupt):
        sandbox.upload_files([("dest.bin", os.urandom(100_000))])
    assert (local.root_dir / "dest.bin").read_bytes() == b"old"
    assert leftovers(local.root_dir) == []
