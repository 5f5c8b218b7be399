"""Directory round trips, and hostile archives refused on both sides."""

from __future__ import annotations

import io
import os
import secrets
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox_sdk import BaseSandbox, errors, protocol
from sandbox_sdk._calls import EXTRACT_ARCHIVE
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import LimitedSandbox

from .transfer_helpers import SMALL_COMMAND_BYTES, SMALL_OUTPUT_BYTES, leftovers, scratch_entries

Snapshot = dict[str, tuple[str, int, bytes]]


def snapshot(top: Path) -> Snapshot:
    """Every entry below ``top``: type, permission bits, content or link target."""
    entries: Snapshot = {}
    for path in sorted(top.rglob("*")):
        st = path.lstat()
        rel = path.relative_to(top).as_posix()
        if stat.S_ISLNK(st.st_mode):
            entries[rel] = ("link", 0, os.fsencode(os.readlink(path)))
        elif stat.S_ISDIR(st.st_mode):
            entries[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
        else:
            entries[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return entries


@pytest.fixture(params=["tarfile-filters", "no-tarfile-filters"])
def client_python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The client's extraction with ``tarfile.data_filter``, and as on Python
    before 3.11.4 (Debian 12's 3.11.2), which lacks it."""
    if request.param == "no-tarfile-filters":
        monkeypatch.delattr(tarfile, "data_filter")
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    top = tmp_path / "tree"
    (top / "src" / "pkg" / "deep" / "deeper").mkdir(parents=True)
    (top / "empty").mkdir()
    (top / "src" / "empty-too").mkdir()
    (top / "ünïcødé 日本").mkdir()
    (top / "ünïcødé 日本" / "файл €.txt").write_text("unicode names\n", encoding="utf-8")
    (top / "src" / "pkg" / "__init__.py").write_text("")
    (top / "src" / "pkg" / "deep" / "deeper" / "data.bin").write_bytes(bytes(range(256)) * 300)
    (top / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (top / "run.sh").chmod(0o755)
    (top / "secret.txt").write_text("private\n")
    (top / "secret.txt").chmod(0o600)
    (top / "group.txt").write_text("group-readable\n")
    (top / "group.txt").chmod(0o640)
    (top / "src" / "pkg" / "deep").chmod(0o750)
    (top / "empty").chmod(0o700)
    (top / ".hidden").write_bytes(b"\0hidden\xff")
    (top / "link-to-run").symlink_to("run.sh")
    (top / "src" / "pkg" / "up-link").symlink_to("../../run.sh")
    return top


def test_directory_round_trip(
    small: LimitedSandbox, root: Path, tree: Path, tmp_path: Path, client_python: str
) -> None:
    expected = snapshot(tree)
    assert small.upload_dir(tree, "copy/of/tree").entries == len(expected)
    assert snapshot(root / "copy" / "of" / "tree") == expected
    assert small.download_dir("copy/of/tree", tmp_path / "back").entries == len(expected)
    assert snapshot(tmp_path / "back") == expected
    assert leftovers(root, tmp_path) == []


async def test_async_directory_round_trip(
    small: LimitedSandbox, root: Path, tree: Path, tmp_path: Path
) -> None:
    expected = snapshot(tree)
    assert (await small.aupload_dir(tree, "copy")).entries == len(expected)
    assert snapshot(root / "copy") == expected
    assert (await small.adownload_dir("copy", tmp_path / "back")).entries == len(expected)
    assert snapshot(tmp_path / "back") == expected


def test_directory_progress(small: LimitedSandbox, tree: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    small.upload_dir(tree, "copy", progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1] > 0
    seen.clear()
    small.download_dir("copy", tmp_path / "back", progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1][0] == seen[-1][1] > 0


def test_directory_errors(small: LimitedSandbox, root: Path, tmp_path: Path) -> None:
    (root / "a-file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        small.upload_dir(tmp_path / "missing", "x")
    with pytest.raises(FileNotFoundError):
        small.download_dir("missing", tmp_path / "back")
    with pytest.raises(NotADirectoryError):
        small.download_dir("a-file", tmp_path / "back")


# -- hostile archives ------------------------------------------------------------------------


def _member(tar: tarfile.TarFile, name: str, *, link: str | None = None, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    if link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = link
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _hardlink(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE
    info.linkname = target
    tar.addfile(info)


def _write_through_symlink(tar: tarfile.TarFile) -> None:
    _member(tar, "link", link=".")
    _member(tar, "link/../escaped.txt")


def _chained_symlinks(tar: tarfile.TarFile) -> None:
    # Each link alone stays inside; together x resolves to the target's parent.
    _member(tar, "x", link="y/..")
    _member(tar, "y", link=".")
    _member(tar, "x/escaped.txt")


#: Where an archive's absolute member would land if it escaped: a name of this run's own,
#: so a concurrent run (or another worker) never sees it.
ABSOLUTE_ESCAPE = f"/tmp/sbx-absolute-escape-{secrets.token_hex(8)}.txt"

HOSTILE: dict[str, Callable[[tarfile.TarFile], None]] = {
    "dotdot": lambda t: _member(t, "../escaped.txt"),
    "nested-dotdot": lambda t: _member(t, "ok/../../escaped.txt"),
    "absolute": lambda t: _member(t, ABSOLUTE_ESCAPE),
    "symlink-absolute": lambda t: _member(t, "link", link="/etc"),
    "symlink-up": lambda t: _member(t, "link", link="../../.."),
    "write-through-symlink": _write_through_symlink,
    "chained-symlinks": _chained_symlinks,
    "hardlink-out": lambda t: _hardlink(t, "hard", "../outside.txt"),
    "device": lambda t: _device(t, "null"),
}


def _device(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.CHRTYPE
    info.devmajor, info.devminor = 1, 3
    tar.addfile(info)


def hostile_tar(kind: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _member(tar, "innocent.txt", data=b"harmless")
        HOSTILE[kind](tar)
    return buffer.getvalue()


class TamperingSandbox(LimitedSandbox):
    """A compromised sandbox: every directory archive it makes is replaced by ``archive``."""

    def __init__(self, inner: LocalSandbox, archives: Path, archive: bytes) -> None:
        super().__init__(inner, max_command_bytes=SMALL_COMMAND_BYTES, max_output_bytes=SMALL_OUTPUT_BYTES)
        self.archives = archives
        self.archive = archive

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        response = super().execute(command, timeout=timeout)
        for made in self.archives.glob(".sbx-download-*.tar"):
            made.write_bytes(self.archive)
        return response


@pytest.fixture
def archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private archive directory for the sandbox side (instead of the shared /tmp)."""
    path = tmp_path / "archives"
    path.mkdir()
    monkeypatch.setattr(BaseSandbox, "scratch_dir", str(path))
    return path


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_download_dir_refuses_hostile_archive(
    local: LocalSandbox, root: Path, tmp_path: Path, archives: Path, kind: str, client_python: str
) -> None:
    (root / "victim").mkdir()
    (root / "victim" / "plain.txt").write_bytes(b"plain")
    client = tmp_path / "client" / "nest" / "target"
    sandbox = TamperingSandbox(local, archives, hostile_tar(kind))
    with pytest.raises(errors.InvalidPathError):
        sandbox.download_dir("victim", client)
    written = [p for p in (tmp_path / "client").rglob("*") if p.is_file() or p.is_symlink()]
    assert written == [], "nothing may be written when an archive is refused"
    assert not (tmp_path / "client" / "nest" / "escaped.txt").exists()
    assert not Path(ABSOLUTE_ESCAPE).exists()
    assert scratch_entries(archives) == []


def test_download_dir_refuses_symlink_pointing_out_of_the_sandbox_tree(
    small: LimitedSandbox, root: Path, tmp_path: Path
) -> None:
    (root / "tree").mkdir()
    (root / "tree" / "ok.txt").write_bytes(b"fine")
    (root / "tree" / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(errors.InvalidPathError):
        small.download_dir("tree", tmp_path / "back", symlinks="refuse")
    assert not (tmp_path / "back").exists()


def test_download_dir_refuses_writing_through_an_existing_local_symlink(
    small: LimitedSandbox, root: Path, tmp_path: Path, client_python: str
) -> None:
    (root / "tree" / "out").mkdir(parents=True)
    (root / "tree" / "out" / "planted.txt").write_bytes(b"planted")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "back").mkdir()
    (tmp_path / "back" / "out").symlink_to(outside)
    with pytest.raises(errors.InvalidPathError):
        small.download_dir("tree", tmp_path / "back")
    assert list(outside.iterdir()) == []


def test_download_dir_refuses_a_link_leaving_through_an_existing_local_symlink(
    local: LocalSandbox, tmp_path: Path, archives: Path, client_python: str
) -> None:
    """``x -> d/..`` stays inside by name, but ``d`` is already a symlink on the
    client's disk: followed, ``x`` would point out of the target."""
    outside = tmp_path / "outside" / "inner"
    outside.mkdir(parents=True)
    target = tmp_path / "back"
    target.mkdir()
    (target / "d").symlink_to(outside)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _member(tar, "x", link="d/..")
    (local.root_dir / "tree").mkdir()
    sandbox = TamperingSandbox(local, archives, buffer.getvalue())
    with pytest.raises(errors.InvalidPathError):
        sandbox.download_dir("tree", target)
    assert sorted(p.name for p in target.iterdir()) == ["d"]


def _extract_in_sandbox(sandbox: LimitedSandbox, archive: bytes, target: str) -> None:
    staged = "/".join([str(sandbox.inner.root_dir), "staged.tar"])  # type: ignore[attr-defined]
    sandbox.upload_files([(staged, archive)])
    args = {"archive": protocol.encode_path(staged), "path": protocol.encode_path(target)}
    sandbox._drive(iter(EXTRACT_ARCHIVE(args, what="extract")))


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_sandbox_refuses_hostile_archive(small: LimitedSandbox, root: Path, kind: str) -> None:
    target = root / "nest" / "target"
    with pytest.raises(errors.InvalidPathError):
        _extract_in_sandbox(small, hostile_tar(kind), str(target))
    written = [p for p in root.rglob("*") if p.is_file() or p.is_symlink()]
    assert written == [], "nothing may be extracted when an archive is refused"
    assert not Path(ABSOLUTE_ESCAPE).exists()


def test_upload_dir_refuses_a_local_symlink_pointing_out(
    small: LimitedSandbox, root: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ok.txt").write_bytes(b"ok")
    (tree / "hosts").symlink_to("/etc/hosts")
    with pytest.raises(errors.InvalidPathError):
        small.upload_dir(tree, "dest", symlinks="refuse")
    assert not (root / "dest" / "ok.txt").exists()


def test_upload_dir_refuses_writing_through_a_sandbox_symlink(
    small: LimitedSandbox, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside-the-target"
    outside.mkdir()
    (root / "dest").mkdir()
    (root / "dest" / "sub").symlink_to(outside)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "planted.txt").write_bytes(b"planted")
    with pytest.raises(errors.InvalidPathError):
        small.upload_dir(tree, "dest")
    assert list(outside.iterdir()) == []
