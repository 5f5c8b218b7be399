"""``E2BSandbox``'s native file transfers (``files.write`` / ``rename`` /
``read``): the transfer contract kit and what it does not cover, through the
real SDK and the fake service."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("e2b", reason="the e2b extra is not installed: pip install -e '.[e2b]'")

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.e2b import E2BSandbox
from sandbox_sdk.testing import HOSTILE_CONTENTS, HOSTILE_NAMES, TransferContractTests, provided_sandbox
from tests.providers.e2b.conftest import home_of, make_provider
from tests.providers.e2b.fake_server import FakeE2BServer


class TestE2BTransferContract(TransferContractTests):
    known_gaps = {  # noqa: RUF012 - the kit's documented way to declare gaps
        "test_hostile_names_round_trip[non-utf8]": "envd's APIs carry paths as UTF-8 strings",
        "test_replacing_keeps_permission_bits": "files.write cannot set a mode; a renamed file keeps its own",
    }

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, fake_e2b: FakeE2BServer) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(make_provider(fake_e2b), "transfer-contract")


def test_upload_download_round_trip_in_order(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    files = [(f"deep/er/file-{i}.bin", content) for i, content in enumerate(HOSTILE_CONTENTS)]
    files.append((str(home / "absolute.txt"), b"absolute path"))
    assert [r.model_dump() for r in e2b_sandbox.upload_files(files)] == [
        {"path": path, "error": None} for path, _ in files
    ]
    for path, content in files:
        assert (home / path).read_bytes() == content
    downloaded = e2b_sandbox.download_files([path for path, _ in reversed(files)])
    assert [(r.path, r.content, r.error) for r in downloaded] == [(p, c, None) for p, c in reversed(files)]


def test_hostile_names_round_trip(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    names = [name for name in HOSTILE_NAMES if isinstance(name, str)]
    files = [(f"hostile/{name}", name.encode()) for name in names]
    assert [r.error for r in e2b_sandbox.upload_files(files)] == [None] * len(files)
    home = home_of(fake_e2b, e2b_sandbox)
    assert sorted(p.name for p in (home / "hostile").iterdir()) == sorted(names)
    downloaded = e2b_sandbox.download_files([path for path, _ in files])
    assert [(r.content, r.error) for r in downloaded] == [(content, None) for _, content in files]


def test_upload_errors_are_per_file(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    (home / "a-dir").mkdir()
    (home / "a-file").write_bytes(b"plain")
    responses = e2b_sandbox.upload_files(
        [
            ("first.txt", b"1"),
            ("a-dir", b"onto a directory"),
            ("", b"empty path"),
            ("nul\0byte", b"x"),
            ("slash/", b"x"),
            ("a-file/child", b"under a file"),
            (str(home / "missing-local"), home / "does-not-exist"),
            ("last.txt", b"2"),
        ]
    )
    codes = [r.error for r in responses]
    assert codes[:5] == [None, "is_directory", "invalid_path", "invalid_path", "is_directory"]
    assert codes[5] is not None and "path is a file" in codes[5]  # envd's words for a parent that is a file
    assert codes[6] is not None and codes[6].startswith("cannot read local source")
    assert codes[7] is None
    assert (home / "first.txt").read_bytes() == b"1" and (home / "last.txt").read_bytes() == b"2"
    assert (home / "a-dir").is_dir() and (home / "a-file").read_bytes() == b"plain"
    assert not [p for p in home.rglob("*") if ".sbx-" in p.name], "staging files were left behind"


def test_upload_replaces_by_rename(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    """The new content is written beside the target and renamed over it, so a
    reader holding the old file never sees a half-written one."""
    target = home_of(fake_e2b, e2b_sandbox) / "replace-me.txt"
    target.write_bytes(b"old content")
    with open(target, "rb") as reader:
        old_inode = os.fstat(reader.fileno()).st_ino
        assert e2b_sandbox.upload_files([("replace-me.txt", b"new content")])[0].error is None
        assert reader.read() == b"old content"
    assert target.read_bytes() == b"new content"
    assert target.stat().st_ino != old_inode


def test_upload_sources_and_progress(tmp_path: Path, e2b_sandbox: E2BSandbox) -> None:
    local = tmp_path / "local.bin"
    local.write_bytes(b"from a path")
    seen: list[tuple[int, int]] = []
    responses = e2b_sandbox.upload_files(
        [
            ("p.bin", local),
            ("s.bin", str(local)),
            ("f.bin", io.BytesIO(b"file object")),
            ("b.bin", bytearray(b"bytearray")),
            ("m.bin", memoryview(b"memoryview")),
        ],
        progress=lambda done, total: seen.append((done, total)),
    )
    assert all(r.error is None for r in responses)
    got = e2b_sandbox.download_files(["p.bin", "s.bin", "f.bin", "b.bin", "m.bin"])
    expected = [b"from a path", b"from a path", b"file object", b"bytearray", b"memoryview"]
    assert [r.content for r in got] == expected
    assert seen[-1][0] == sum(len(content) for content in expected)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


def test_download_errors_are_per_file(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    (home / "dir").mkdir()
    (home / "ok.txt").write_bytes(b"fine")
    responses = e2b_sandbox.download_files(["missing.txt", "dir", "", "ok.txt"])
    assert [(r.content, r.error) for r in responses] == [
        (None, "file_not_found"),
        (None, "is_directory"),
        (None, "invalid_path"),
        (b"fine", None),
    ]


@pytest.fixture
def unprivileged(fake_e2b: FakeE2BServer) -> Iterator[FakeE2BServer]:
    """The fake running commands as E2B's ``user`` would, without root's bypass."""
    fake_e2b.unprivileged_commands = True
    yield fake_e2b
    fake_e2b.unprivileged_commands = False


def test_mode_bits_hold_for_commands_and_not_for_envds_own_file_api(
    unprivileged: FakeE2BServer, e2b_sandbox: E2BSandbox
) -> None:
    """Commands run as ``user``, so file operations through them are refused
    what the mode bits refuse, even when the tests run as root (the fake drops
    root's bypass); envd itself runs as root, so the native transfers read and
    write through the bits (the fake's file API is whoever runs the tests).
    The sandbox starts no operation server (tests/providers/fake_users.py says why)."""
    e2b_sandbox.operation_server = False
    home = home_of(unprivileged, e2b_sandbox)
    (home / "secret").write_bytes(b"x")
    (home / "secret").chmod(0)
    (home / "locked").mkdir(mode=0o500)
    try:
        with pytest.raises(errors.SandboxPermissionError):
            e2b_sandbox.read("secret")
        with pytest.raises(errors.SandboxPermissionError):
            e2b_sandbox.write("locked/new", "x")
        assert e2b_sandbox.execute("cat secret").exit_code == 1
        downloaded = e2b_sandbox.download_files(["secret"])[0]
        uploaded = e2b_sandbox.upload_files([("locked/new", b"x")])[0]
        if os.geteuid() == 0:
            assert (downloaded.content, downloaded.error, uploaded.error) == (b"x", None, None)
        else:
            assert (downloaded.error, uploaded.error) == ("permission_denied", "permission_denied")
    finally:
        (home / "locked").chmod(0o700)


async def test_async_transfers(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    (home / "adir").mkdir()
    uploaded = await e2b_sandbox.aupload_files([("async/one.bin", b"\0\1\2"), ("adir", b"x")])
    assert [r.error for r in uploaded] == [None, "is_directory"]
    downloaded = await e2b_sandbox.adownload_files(["async/one.bin", "async/none"])
    assert [(r.content, r.error) for r in downloaded] == [(b"\0\1\2", None), (None, "file_not_found")]


@pytest.mark.slow
def test_large_file_streams_both_ways(tmp_path: Path, e2b_sandbox: E2BSandbox) -> None:
    local = tmp_path / "big.bin"
    with open(local, "wb") as out:
        for block in range(32):
            out.write(hashlib.sha256(str(block).encode()).digest() * 8192)  # 256 KiB a block
    assert e2b_sandbox.upload_files([("big/big.bin", local)])[0].error is None
    [response] = e2b_sandbox.download_files(["big/big.bin"])
    assert response.content is not None
    assert hashlib.sha256(response.content).digest() == hashlib.sha256(local.read_bytes()).digest()
    assert e2b_sandbox.stat("big/big.bin").size == local.stat().st_size


async def test_async_transfers_run_concurrently_in_order(
    fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox
) -> None:
    files = [(f"many/{i:02}.txt", f"file {i}".encode()) for i in range(12)]
    seen: list[int] = []
    uploaded = await e2b_sandbox.aupload_files(files, progress=lambda done, _: seen.append(done))
    assert [r.path for r in uploaded] == [path for path, _ in files]
    assert all(r.error is None for r in uploaded)
    assert seen[-1] == sum(len(content) for _, content in files)
    downloaded = await e2b_sandbox.adownload_files([path for path, _ in reversed(files)])
    assert [(r.path, r.content) for r in downloaded] == list(reversed(files))


async def test_repeated_paths_keep_the_last_upload(fake_e2b: FakeE2BServer, e2b_sandbox: E2BSandbox) -> None:
    home = home_of(fake_e2b, e2b_sandbox)
    versions = [("same.txt", f"version {i}".encode()) for i in range(6)]
    assert all(r.error is None for r in await e2b_sandbox.aupload_files(versions))
    assert (home / "same.txt").read_bytes() == b"version 5"
    assert all(r.error is None for r in e2b_sandbox.upload_files(list(reversed(versions))))
    assert (home / "same.txt").read_bytes() == b"version 0"
