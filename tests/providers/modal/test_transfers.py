"""``ModalSandbox``'s native transfers (``sandbox.filesystem``, staged and renamed into
place) on the fake backend, through the real modal SDK: the transfer contract kit and
what it does not cover."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.modal import ModalProvider, ModalSandbox
from sandbox_sdk.testing import TransferContractTests, provided_sandbox
from tests.providers.modal.fake_server import FakeModalServer

#: A name with a byte that is not UTF-8, as ``os.fsdecode`` gives it.
NOT_UTF8 = os.fsdecode(b"not-utf8-\xff")


class TestModalTransferContract(TransferContractTests):
    known_gaps = {  # noqa: RUF012 - the kit's documented way to declare gaps
        "test_hostile_names_round_trip[non-utf8]": "the file API carries paths as protobuf (UTF-8) strings",
    }

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, modal_provider: ModalProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(modal_provider, "transfer-contract")


def _root(modal_server: FakeModalServer, sandbox: ModalSandbox) -> Path:
    return modal_server.sandbox_directory(sandbox.id)


def test_upload_files_order_parents_and_per_file_errors(
    sandbox: ModalSandbox, modal_server: FakeModalServer, tmp_path: Path
) -> None:
    root = _root(modal_server, sandbox)
    (root / "adir").mkdir()
    (root / "afile").write_text("x")
    local = tmp_path / "local.bin"
    local.write_bytes(b"from disk")
    results = sandbox.upload_files(
        [
            ("new/deep/one.txt", b"one"),
            (str(root / "abs.txt"), local),
            ("adir", b"onto a directory"),
            ("afile/child", b"under a file"),
            ("", b"empty path"),
            ("nul\0name", b"nul"),
            ("missing-local", tmp_path / "does-not-exist"),
            (NOT_UTF8, b"a name Modal's file API cannot carry"),
        ]
    )
    assert [r.path for r in results] == [
        "new/deep/one.txt",
        str(root / "abs.txt"),
        "adir",
        "afile/child",
        "",
        "nul\0name",
        "missing-local",
        NOT_UTF8,
    ]
    assert [r.error for r in results[:3]] == [None, None, "is_directory"]
    assert results[3].error is not None
    assert [r.error for r in results[4:6]] == ["invalid_path", "invalid_path"]
    assert results[6].error is not None and "cannot read local source" in results[6].error
    assert results[7].error == "invalid_path"
    downloads = sandbox.download_files([NOT_UTF8, "new/deep/one.txt"])
    assert [(d.error, d.content) for d in downloads] == [("invalid_path", None), (None, b"one")]
    assert (root / "new/deep/one.txt").read_bytes() == b"one"
    assert (root / "abs.txt").read_bytes() == b"from disk"
    assert (root / "adir").is_dir() and (root / "afile").read_text() == "x"
    leftovers = [p.name for p in root.rglob("*") if ".sbx-" in p.name]
    assert leftovers == []


def test_upload_replaces_whole_file_via_rename(sandbox: ModalSandbox, modal_server: FakeModalServer) -> None:
    root = _root(modal_server, sandbox)
    target = root / "replace.txt"
    target.write_bytes(b"old content that is longer")
    inode = target.stat().st_ino
    progress: list[tuple[int, int]] = []
    [result] = sandbox.upload_files([("replace.txt", b"new")], progress=lambda d, t: progress.append((d, t)))
    assert result.error is None
    assert target.read_bytes() == b"new"
    assert target.stat().st_ino != inode  # a new file renamed over the old one, never rewritten in place
    assert progress[-1] == (3, 3)


def test_large_path_and_file_object_sources(
    sandbox: ModalSandbox, modal_server: FakeModalServer, tmp_path: Path
) -> None:
    root = _root(modal_server, sandbox)
    big = os.urandom(3 * 1024 * 1024 + 7)  # several of the SDK's 256 KiB stdin chunks
    (tmp_path / "big.bin").write_bytes(big)
    stream = io.BytesIO(b"skipped" + big[:1000])
    stream.seek(7)  # a file object is read from its position
    sync = sandbox.upload_files([("big.bin", tmp_path / "big.bin"), ("part.bin", stream)])
    assert [r.error for r in sync] == [None, None]
    assert (root / "big.bin").read_bytes() == big
    assert (root / "part.bin").read_bytes() == big[:1000]


async def test_large_path_source_async(
    sandbox: ModalSandbox, modal_server: FakeModalServer, tmp_path: Path
) -> None:
    big = os.urandom(1024 * 1024 + 3)
    (tmp_path / "big.bin").write_bytes(big)
    results = await sandbox.aupload_files([("abig.bin", str(tmp_path / "big.bin"))])
    assert results[0].error is None
    assert (_root(modal_server, sandbox) / "abig.bin").read_bytes() == big


def test_upload_keeps_mode_and_writes_through_symlinks(
    sandbox: ModalSandbox, modal_server: FakeModalServer
) -> None:
    root = _root(modal_server, sandbox)
    (root / "script.sh").write_text("old")
    (root / "script.sh").chmod(0o751)
    (root / "real").mkdir()
    (root / "real/target.txt").write_text("old")
    (root / "link.txt").symlink_to(root / "real/target.txt")
    results = sandbox.upload_files([("script.sh", b"new"), ("link.txt", b"through")])
    assert [r.error for r in results] == [None, None]
    assert (root / "script.sh").stat().st_mode & 0o777 == 0o751
    assert (root / "link.txt").is_symlink()
    assert (root / "real/target.txt").read_bytes() == b"through"


def test_download_files_order_and_errors(sandbox: ModalSandbox, modal_server: FakeModalServer) -> None:
    root = _root(modal_server, sandbox)
    (root / "d").mkdir()
    (root / "d/a.bin").write_bytes(bytes(range(256)))
    results = sandbox.download_files(["d/a.bin", "missing", "d", "", str(root / "d/a.bin")])
    assert [r.path for r in results] == ["d/a.bin", "missing", "d", "", str(root / "d/a.bin")]
    assert results[0].content == bytes(range(256)) and results[0].error is None
    assert [r.error for r in results[1:4]] == ["file_not_found", "is_directory", "invalid_path"]
    assert results[4].content == bytes(range(256))


@pytest.fixture
def unprivileged(modal_server: FakeModalServer) -> Iterator[FakeModalServer]:
    """The fake running execs as an image's user other than root would."""
    modal_server.unprivileged_execs = True
    yield modal_server
    modal_server.unprivileged_execs = False


def test_mode_bits_hold_for_an_image_user_other_than_root(
    unprivileged: FakeModalServer, sandbox: ModalSandbox
) -> None:
    """Commands and the file API are both execs on Modal, so both are refused
    what the mode bits refuse the image's user, even when the tests run as root.
    The sandbox starts no operation server (tests/providers/fake_users.py says why)."""
    sandbox.operation_server = False
    root = _root(unprivileged, sandbox)
    (root / "secret").write_bytes(b"x")
    (root / "secret").chmod(0)
    (root / "locked").mkdir(mode=0o500)
    try:
        with pytest.raises(errors.SandboxPermissionError):
            sandbox.read("secret")
        with pytest.raises(errors.SandboxPermissionError):
            sandbox.write("locked/new", "x")
        assert sandbox.execute("cat secret").exit_code == 1
        assert sandbox.download_files(["secret"])[0].error == "permission_denied"
        assert sandbox.upload_files([("locked/new", b"x")])[0].error == "permission_denied"
    finally:
        (root / "locked").chmod(0o700)


async def test_async_transfers(sandbox: ModalSandbox, modal_server: FakeModalServer) -> None:
    root = _root(modal_server, sandbox)
    files = [(f"many/{i:02d}.txt", f"file {i}".encode()) for i in range(12)]
    results = await sandbox.aupload_files([*files, ("many", b"x")])
    assert [r.error for r in results] == [None] * 12 + ["is_directory"]
    downloads = await sandbox.adownload_files([path for path, _ in files] + ["many/nope"])
    assert [d.content for d in downloads[:12]] == [data for _, data in files]
    assert downloads[12].error == "file_not_found"
    assert sorted(p.name for p in (root / "many").iterdir()) == [f"{i:02d}.txt" for i in range(12)]


def test_transfers_on_a_terminated_sandbox_raise(provider: ModalProvider, sandbox: ModalSandbox) -> None:
    sandbox.working_directory()
    provider.delete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.download_files(["anything"])
    with pytest.raises(errors.SandboxNotFoundError):
        sandbox.upload_files([("anything", b"x")])


async def test_async_transfers_on_a_terminated_sandbox_raise(
    provider: ModalProvider, sandbox: ModalSandbox
) -> None:
    await sandbox.aworking_directory()
    await provider.adelete(sandbox_id=sandbox.id)
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.adownload_files(["a", "b", "c"])
    with pytest.raises(errors.SandboxNotFoundError):
        await sandbox.aupload_files([("a", b"x"), ("b", b"y")])
