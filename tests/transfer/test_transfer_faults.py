"""A failure on any one ``execute()`` of a chunked transfer: destination intact,
no staging or partial files left, and the failure reported."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sandbox_sdk import BaseSandbox, errors
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import FAULTS_BEFORE_RUNNING, Fault, LimitedSandbox

from .transfer_helpers import SMALL_COMMAND_BYTES, SMALL_OUTPUT_BYTES, faulty, leftovers, scratch_entries

OLD = b"the previous content, which must survive a failed upload\n"


def clean_run_calls(local: LocalSandbox, action: str, data: bytes) -> int:
    """Round trips of the transfer without faults (and a check that it chunks)."""
    sandbox = faulty(local, Fault.RAISE, None)
    if action == "upload":
        assert sandbox.upload_files([("probe/clean.bin", data)])[0].error is None
    else:
        (local.root_dir / "probe").mkdir(exist_ok=True)
        (local.root_dir / "probe" / "clean.bin").write_bytes(data)
        assert sandbox.read_bytes("probe/clean.bin") == data
    assert sandbox.executed >= 4, "the payload must need several chunks"
    return sandbox.executed


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_fault_on_every_call_of_a_chunked_upload(local: LocalSandbox, root: Path, fault: Fault) -> None:
    data = os.urandom(40_000)
    calls = clean_run_calls(local, "upload", data)
    for fail_at in range(1, calls + 1):
        (root / "dest.bin").write_bytes(OLD)
        sandbox = faulty(local, fault, fail_at)
        [response] = sandbox.upload_files([("dest.bin", data)])
        assert sandbox.injected
        committed = fail_at == calls and fault not in FAULTS_BEFORE_RUNNING
        # Only when the commit itself ran and its reply was lost is the new
        # content in place (whole), and the client, asking, reports success;
        # otherwise the failure is reported and the old file is untouched.
        assert (response.error is None) == committed, f"call {fail_at}: {response.error}"
        assert (root / "dest.bin").read_bytes() == (data if committed else OLD), f"call {fail_at}"
        assert leftovers(root) == [], f"call {fail_at}"


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_fault_on_every_call_of_a_chunked_upload_to_a_new_file(
    local: LocalSandbox, root: Path, fault: Fault
) -> None:
    data = os.urandom(40_000)
    calls = clean_run_calls(local, "upload", data)
    for fail_at in range(1, calls):
        sandbox = faulty(local, fault, fail_at)
        [response] = sandbox.upload_files([(f"new/{fail_at}.bin", data)])
        assert response.error
        assert not (root / "new" / f"{fail_at}.bin").exists()
        assert leftovers(root) == []


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
async def test_fault_on_every_call_of_an_async_chunked_upload(
    local: LocalSandbox, root: Path, fault: Fault
) -> None:
    data = os.urandom(40_000)
    calls = clean_run_calls(local, "upload", data)
    for fail_at in range(1, calls + 1):
        (root / "dest.bin").write_bytes(OLD)
        sandbox = faulty(local, fault, fail_at)
        [response] = await sandbox.aupload_files([("dest.bin", data)])
        committed = fail_at == calls and fault not in FAULTS_BEFORE_RUNNING
        assert (response.error is None) == committed, f"call {fail_at}: {response.error}"
        assert (root / "dest.bin").read_bytes() == (data if committed else OLD), f"call {fail_at}"
        assert leftovers(root) == [], f"call {fail_at}"


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_fault_on_every_call_of_a_chunked_download(
    local: LocalSandbox, root: Path, tmp_path: Path, fault: Fault
) -> None:
    data = os.urandom(60_000)
    calls = clean_run_calls(local, "download", data)
    target = tmp_path / "client" / "dest.bin"
    target.parent.mkdir()
    for fail_at in range(1, calls + 1):
        target.write_bytes(OLD)
        sandbox = faulty(local, fault, fail_at)
        expected = errors.IntegrityError if fault is Fault.CORRUPT else errors.SandboxError
        with pytest.raises(expected):
            sandbox.download_file("probe/clean.bin", target)
        assert target.read_bytes() == OLD, f"call {fail_at}"
        assert leftovers(target.parent) == [], f"call {fail_at}"


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
async def test_fault_on_every_call_of_an_async_chunked_download(
    local: LocalSandbox, tmp_path: Path, fault: Fault
) -> None:
    data = os.urandom(60_000)
    calls = clean_run_calls(local, "download", data)
    target = tmp_path / "client" / "dest.bin"
    target.parent.mkdir()
    for fail_at in range(1, calls + 1):
        target.write_bytes(OLD)
        with pytest.raises(errors.SandboxError):
            await faulty(local, fault, fail_at).adownload_file("probe/clean.bin", target)
        assert target.read_bytes() == OLD, f"call {fail_at}"
        assert leftovers(target.parent) == [], f"call {fail_at}"


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_fault_in_a_batch_never_yields_wrong_content(local: LocalSandbox, root: Path, fault: Fault) -> None:
    """Whatever call fails, each file's response is its exact content or an error."""
    files = {"a.txt": b"small a", "big.bin": os.urandom(40_000), "b.txt": b"small b"}
    for name, content in files.items():
        (root / name).write_bytes(content)
    clean = faulty(local, fault, None)
    assert [r.content for r in clean.download_files(list(files))] == list(files.values())
    for fail_at in range(1, clean.executed + 1):
        responses = faulty(local, fault, fail_at).download_files(list(files))
        assert [r.path for r in responses] == list(files)
        assert any(r.error for r in responses), f"call {fail_at}"
        for response in responses:
            assert (response.content is None) != (response.error is None)
            if response.content is not None:
                assert response.content == files[response.path]


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_fault_while_uploading_a_directory(
    local: LocalSandbox, root: Path, tmp_path: Path, fault: Fault, monkeypatch: pytest.MonkeyPatch
) -> None:
    archives = tmp_path / "archives"
    archives.mkdir()
    monkeypatch.setattr(BaseSandbox, "scratch_dir", str(archives))
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "data.bin").write_bytes(os.urandom(30_000))
    clean = faulty(local, fault, None)
    clean.upload_dir(tree, "clean")
    for fail_at in range(1, clean.executed + 1):
        try:
            faulty(local, fault, fail_at).upload_dir(tree, f"copy{fail_at}")
        except errors.SandboxError:
            pass
        else:  # only the archive's commit, run with its reply lost, can still succeed: whole
            assert fault not in FAULTS_BEFORE_RUNNING, f"call {fail_at}"
            copied = root / f"copy{fail_at}" / "sub" / "data.bin"
            assert copied.read_bytes() == (tree / "sub" / "data.bin").read_bytes()
        assert leftovers(root) == []
        assert scratch_entries(archives) == [], f"call {fail_at}: the staged archive was left behind"


class _ChangingSource(LimitedSandbox):
    """Cuts (or extends) a local file while its upload is under way: during
    the first ``execute()``, after the size was taken."""

    def __init__(self, inner: LocalSandbox, source: Path, new_size: int) -> None:
        super().__init__(inner, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES)
        self.source = source
        self.new_size = new_size

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        if self._count() == 1:
            with self.source.open("r+b") as f:
                f.truncate(self.new_size)
        return self._run(command, timeout)


class _MisreportedSize(io.BytesIO):
    """A stream whose end is not where seeking says: a file that changed
    between the moment its size was taken and the moment it was read."""

    def __init__(self, data: bytes, claimed: int) -> None:
        super().__init__(data)
        self.claimed = claimed

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        position = super().seek(offset, whence)
        return self.claimed if whence == io.SEEK_END else position


@pytest.mark.parametrize("change", ["shrank", "grew"])
def test_a_local_source_that_changes_size_mid_upload_is_an_error_not_a_torn_file(
    local: LocalSandbox, root: Path, tmp_path: Path, change: str
) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(40_000))  # staged: several chunks
    (root / "dest.bin").write_bytes(OLD)
    sandbox = _ChangingSource(local, source, 20_000 if change == "shrank" else 80_000)
    [response] = sandbox.upload_files([("dest.bin", source)])
    assert response.error is not None
    assert f"local source {change}" in response.error
    assert (root / "dest.bin").read_bytes() == OLD
    assert leftovers(root) == []


@pytest.mark.parametrize(("change", "actual"), [("shrank", 500), ("grew", 2_000)])
def test_a_packed_source_that_changed_size_is_reported_alone(
    local: LocalSandbox, root: Path, change: str, actual: int
) -> None:
    (root / "dest.bin").write_bytes(OLD)
    sandbox = faulty(local, Fault.RAISE, None)
    responses = sandbox.upload_files(
        [("dest.bin", _MisreportedSize(os.urandom(actual), 1_000)), ("other.bin", b"fine")]
    )
    assert responses[0].error is not None
    assert f"local source {change}" in responses[0].error
    assert responses[1].error is None
    assert (root / "dest.bin").read_bytes() == OLD
    assert (root / "other.bin").read_bytes() == b"fine"
