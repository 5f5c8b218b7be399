"""Edge cases found in review, each a regression test."""

from __future__ import annotations

import base64
import io
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox_sdk import BaseSandbox, errors, protocol
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import LimitedSandbox
from tests.transfer.transfer_helpers import scratch_entries


def test_timeout_holds_after_the_command_closes_its_output(local: LocalSandbox) -> None:
    started = time.monotonic()
    response = local.execute("exec >/dev/null 2>&1; sleep 6", timeout=1)
    assert response.timed_out
    assert time.monotonic() - started < 4


def test_a_cut_frame_is_never_accepted_even_if_it_decodes() -> None:
    body = base64.b64encode(json.dumps({"ok": True, "value": {}}).encode()).decode()
    blob = base64.b64encode(b"x" * 300).decode()
    output = f"\n@@SANDBOX_SDK n {body} {blob[:200]}"  # cut on a 4-character boundary
    with pytest.raises(errors.SandboxRuntimeError):
        protocol.parse_result(ExecuteResponse(output=output, exit_code=0, truncated=True), "n", "read")


def test_run_stdin_at_the_edge_of_one_command(local: LocalSandbox) -> None:
    small = LimitedSandbox(local, max_command_bytes=16 * 1024, max_output_bytes=64 * 1024)
    args = {"op": "run", "command": protocol.encode_path(b"wc -c"), "stdin": 0}
    capacity = small.limits.blob_capacity("run", args, small.scratch_dir)
    for size in range(capacity - 12, capacity + 12):
        assert small.run("wc -c", stdin=b"x" * size).output.strip() == str(size)


def test_run_without_a_timeout_gets_the_provider_default(local: LocalSandbox) -> None:
    local.limits = replace(local.limits, operation_timeout=0.5)  # file operations only
    assert local.run("sleep 1; echo done").output == "done\n"
    assert local.run("sleep 1; echo done", cwd=".").output == "done\n"


def test_exit_127_of_the_users_command_is_its_own(local: LocalSandbox) -> None:
    response = local.run("./python3-missing-tool", cwd=".")
    assert response.exit_code == 127
    assert "python3-missing-tool" in response.output


class _Unseekable(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        return self._data.readinto(buffer)


def test_repeated_paths_land_in_order(local: LocalSandbox) -> None:
    responses = local.upload_files(
        [("dup.bin", b"first"), ("dup.bin", io.BufferedReader(_Unseekable(b"second, and last")))]
    )
    assert [r.error for r in responses] == [None, None]
    assert (local.root_dir / "dup.bin").read_bytes() == b"second, and last"


def test_download_dir_never_packs_its_own_archive(
    local: LocalSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = local.root_dir / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a")
    monkeypatch.setattr(BaseSandbox, "scratch_dir", str(tree))
    back = tmp_path / "back"
    assert local.download_dir("tree", back).entries == len(list(back.rglob("*")))
    assert scratch_entries(back) == ["a.txt"]  # and the scripts installed in the tree, its own files
    assert scratch_entries(tree) == ["a.txt"]
    assert not list(back.rglob("*.tar")) and not list(tree.rglob("*.tar"))


def test_large_edit_of_a_missing_file_creates_nothing(local: LocalSandbox) -> None:
    small = LimitedSandbox(local, max_command_bytes=16 * 1024, max_output_bytes=64 * 1024)
    with pytest.raises(FileNotFoundError):
        small.edit("no/such/dir/f.txt", "a" * 40_000, "b")
    assert not (local.root_dir / "no").exists()


def test_download_file_gets_an_ordinary_mode(local: LocalSandbox, tmp_path: Path) -> None:
    (local.root_dir / "f").write_bytes(b"data")
    fresh = tmp_path / "fresh"
    local.download_file("f", fresh)
    umask = os.umask(0o022)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    existing = tmp_path / "existing"
    existing.write_bytes(b"old")
    existing.chmod(0o640)
    local.download_file("f", existing)
    assert existing.stat().st_mode & 0o777 == 0o640
    assert existing.read_bytes() == b"data"
