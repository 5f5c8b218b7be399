"""DaytonaSandbox's native transfers (the daemon's bulk file API) and its execute
fallback: the transfer contract kit and what it does not cover."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import errors
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.providers.daytona import DaytonaProvider, DaytonaSandbox
from sandbox_sdk.testing import HOSTILE_CONTENTS, HOSTILE_NAMES, TransferContractTests, provided_sandbox
from tests.providers.daytona.conftest import make_provider
from tests.providers.daytona.fake_server import FakeDaytonaServer


class TestDaytonaTransferContract(TransferContractTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, daytona_server: FakeDaytonaServer) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(make_provider(daytona_server), "conformance")


@pytest.fixture
def sandbox(provider: DaytonaProvider) -> Iterator[DaytonaSandbox]:
    sandbox = provider.create(labels={"suite": "transfers"})
    yield sandbox
    provider.delete(sandbox_id=sandbox.id)


def _traffic(server: FakeDaytonaServer, sandbox: DaytonaSandbox) -> list[str]:
    """The toolbox routes hit so far for this sandbox, in order."""
    prefix = f"/toolbox/{sandbox.id}/"
    return [path.removeprefix(prefix) for _, path in server.requests if path.startswith(prefix)]


def test_upload_uses_one_bulk_request_and_creates_parents(
    sandbox: DaytonaSandbox, daytona_server: FakeDaytonaServer, tmp_path: Path
) -> None:
    local = tmp_path / "local.bin"
    local.write_bytes(b"from a local file")
    root = daytona_server.root / sandbox.id
    files: list[tuple[str, bytes | str | io.BytesIO]] = [
        (f"deep/er/{i}.bin", content) for i, content in enumerate(HOSTILE_CONTENTS)
    ]
    files += [("from-path.bin", str(local)), ("from-file.bin", io.BytesIO(b"from a file object"))]
    progress: list[tuple[int, int]] = []
    before = len(_traffic(daytona_server, sandbox))
    results = sandbox.upload_files(files, progress=lambda done, total: progress.append((done, total)))
    assert [r.path for r in results] == [path for path, _ in files]
    assert all(r.error is None for r in results)
    assert _traffic(daytona_server, sandbox)[before:] == ["files/bulk-upload"]
    for i, content in enumerate(HOSTILE_CONTENTS):
        assert (root / f"deep/er/{i}.bin").read_bytes() == content
    assert (root / "from-path.bin").read_bytes() == b"from a local file"
    assert (root / "from-file.bin").read_bytes() == b"from a file object"
    total = sum(map(len, HOSTILE_CONTENTS)) + len(b"from a local file") + len(b"from a file object")
    assert progress[-1] == (total, total)


def test_upload_errors_are_per_file_and_in_order(
    sandbox: DaytonaSandbox, daytona_server: FakeDaytonaServer, tmp_path: Path
) -> None:
    root = daytona_server.root / sandbox.id
    (root / "a-dir").mkdir()
    (root / "a-file").write_bytes(b"plain")
    before = len(_traffic(daytona_server, sandbox))
    results = sandbox.upload_files(
        [
            ("ok-1.txt", b"one"),
            ("a-dir", b"cannot replace a directory"),
            ("", b"empty path"),
            ("nul\0byte", b"bad path"),
            ("a-file/child", b"parent is a file"),
            (str(tmp_path / "missing-local"), tmp_path / "missing-local"),
            ("ok-2.txt", b"two"),
        ]
    )
    errors_by_path = {r.path: r.error for r in results}
    assert [r.path for r in results] == [
        "ok-1.txt",
        "a-dir",
        "",
        "nul\0byte",
        "a-file/child",
        str(tmp_path / "missing-local"),
        "ok-2.txt",
    ]
    assert errors_by_path["ok-1.txt"] is None and errors_by_path["ok-2.txt"] is None
    assert errors_by_path["a-dir"] == "is_directory"
    assert errors_by_path[""] == "invalid_path"
    assert errors_by_path["nul\0byte"] == "invalid_path"
    assert errors_by_path["a-file/child"] is not None
    assert errors_by_path[str(tmp_path / "missing-local")] is not None
    assert (root / "ok-1.txt").read_bytes() == b"one"
    assert (root / "ok-2.txt").read_bytes() == b"two"
    assert (root / "a-file").read_bytes() == b"plain"
    assert (root / "a-dir").is_dir()
    # Only the files the daemon refused went through execute, to get precise codes.
    assert _traffic(daytona_server, sandbox)[before] == "files/bulk-upload"
    assert "process/execute" in _traffic(daytona_server, sandbox)[before:]


def test_upload_replaces_existing_files(sandbox: DaytonaSandbox, daytona_server: FakeDaytonaServer) -> None:
    sandbox.write("replace-me.txt", "a much longer original content\n")
    (result,) = sandbox.upload_files([("replace-me.txt", b"short")])
    assert result.error is None
    assert sandbox.read_bytes("replace-me.txt") == b"short"


def test_download_uses_one_bulk_request(sandbox: DaytonaSandbox, daytona_server: FakeDaytonaServer) -> None:
    root = daytona_server.root / sandbox.id
    (root / "d").mkdir()
    for i, content in enumerate(HOSTILE_CONTENTS):
        (root / "d" / f"{i}.bin").write_bytes(content)
    paths = [f"d/{i}.bin" for i in range(len(HOSTILE_CONTENTS))]
    paths.append(str(root / "d" / "0.bin"))  # absolute paths work too
    progress: list[tuple[int, int]] = []
    before = len(_traffic(daytona_server, sandbox))
    results = sandbox.download_files(paths, progress=lambda done, total: progress.append((done, total)))
    assert [r.path for r in results] == paths
    assert [r.content for r in results] == [*HOSTILE_CONTENTS, HOSTILE_CONTENTS[0]]
    assert all(r.error is None for r in results)
    assert _traffic(daytona_server, sandbox)[before:] == ["files/bulk-download"]
    assert progress[-1][0] == sum(map(len, HOSTILE_CONTENTS)) + len(HOSTILE_CONTENTS[0])


def test_download_errors_are_per_file_in_order_with_duplicates(
    sandbox: DaytonaSandbox, daytona_server: FakeDaytonaServer
) -> None:
    root = daytona_server.root / sandbox.id
    (root / "here.txt").write_bytes(b"here")
    (root / "a-dir").mkdir()
    paths = ["here.txt", "missing.txt", "a-dir", "", "here.txt", "missing.txt"]
    results = sandbox.download_files(paths)
    assert [r.path for r in results] == paths
    assert [r.error for r in results] == [
        None,
        "file_not_found",
        "is_directory",
        "invalid_path",
        None,
        "file_not_found",
    ]
    assert results[0].content == results[4].content == b"here"


def test_upload_survives_a_failed_bulk_request(
    sandbox: DaytonaSandbox, daytona_server: FakeDaytonaServer
) -> None:
    """A bulk request that fails as a whole (here a 503) falls back to execute for every file."""
    daytona_server.fail_next(503, path_contains="/files/bulk-upload")
    results = sandbox.upload_files([("fallback/a.txt", b"A"), ("fallback/b.txt", b"B")])
    assert [r.error for r in results] == [None, None]
    assert sandbox.read_bytes("fallback/a.txt") == b"A"
    daytona_server.fail_next(503, path_contains="/files/bulk-download")
    downloaded = sandbox.download_files(["fallback/b.txt", "fallback/none"])
    assert [(r.content, r.error) for r in downloaded] == [(b"B", None), (None, "file_not_found")]


def test_transfers_of_a_large_file(sandbox: DaytonaSandbox) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)  # several times max_command_bytes
    assert sandbox.upload_files([("big/blob.bin", data)])[0].error is None
    assert sandbox.read_bytes("big/blob.bin") == data
    (result,) = sandbox.download_files(["big/blob.bin"])
    assert result.content == data


def test_bad_upload_source_is_a_per_file_error(sandbox: DaytonaSandbox) -> None:
    text_file = io.StringIO("text mode")
    results = sandbox.upload_files([("text.txt", text_file), ("good.txt", b"good")])  # type: ignore[list-item]
    assert results[0].error is not None and results[1].error is None
    with pytest.raises(errors.SandboxFileNotFoundError):
        sandbox.read_bytes("text.txt")


async def test_async_transfers(aprovider: DaytonaProvider, daytona_server: FakeDaytonaServer) -> None:
    sandbox = await aprovider.acreate(labels={"suite": "async-transfers"})
    (daytona_server.root / sandbox.id / "a-dir").mkdir()
    uploaded = await sandbox.aupload_files([("x/1.bin", b"\x00one"), ("a-dir", b"no"), ("x/2.bin", b"two")])
    assert [r.error for r in uploaded] == [None, "is_directory", None]
    downloaded = await sandbox.adownload_files(["x/2.bin", "x/none", "x/1.bin"])
    assert [(r.content, r.error) for r in downloaded] == [
        (b"two", None),
        (None, "file_not_found"),
        (b"\x00one", None),
    ]
    await aprovider.adelete(sandbox_id=sandbox.id)


def test_hostile_names_round_trip_through_the_native_api(
    sandbox: DaytonaSandbox, daytona_server: FakeDaytonaServer
) -> None:
    names = [name for name in HOSTILE_NAMES if isinstance(name, str)]
    files = [(f"hostile/{name}", name.encode("utf-8")) for name in names]
    before = len(_traffic(daytona_server, sandbox))
    assert [r.error for r in sandbox.upload_files(files)] == [None] * len(files)
    results = sandbox.download_files([path for path, _ in files])
    assert [(r.path, r.content) for r in results] == files
    assert _traffic(daytona_server, sandbox)[before:] == ["files/bulk-upload", "files/bulk-download"]
    assert sorted(e.name for e in sandbox.ls("hostile")) == sorted(names)


@pytest.fixture
def unprivileged(daytona_server: FakeDaytonaServer) -> Iterator[FakeDaytonaServer]:
    """The fake's daemon working as the sandbox's user would, without root's bypass."""
    daytona_server.unprivileged = True
    yield daytona_server
    daytona_server.unprivileged = False


def test_mode_bits_hold_for_the_sandbox_user(
    sandbox: DaytonaSandbox, unprivileged: FakeDaytonaServer
) -> None:
    """The daemon does everything as the sandbox's user, so commands and the
    file API alike are refused what the mode bits refuse, even when the tests
    run as root (the fake drops root's bypass). The sandbox starts no operation
    server (tests/providers/fake_users.py says why)."""
    sandbox.operation_server = False
    root = unprivileged.root / sandbox.id
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
        uploaded = sandbox.upload_files([("locked/new", b"x"), ("locked/deeper/new", b"x"), ("free", b"x")])
        assert [r.error for r in uploaded] == ["permission_denied", "permission_denied", None]
        assert not (root / "locked" / "new").exists() and not (root / "locked" / "deeper").exists()
    finally:
        (root / "locked").chmod(0o700)
