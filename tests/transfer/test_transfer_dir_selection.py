"""What ``upload_dir`` / ``download_dir`` take from a tree: ``exclude``
patterns, and the ``symlinks`` policy for links pointing outside it, both
ways, on a project tree with a virtualenv's absolute interpreter link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox_sdk import DirectoryTransferResult, errors
from sandbox_sdk.testing.faults import LimitedSandbox

#: A file outside every tree, the target of the escaping links.
OUTSIDE_TARGET = "outside-target.bin"


def project(top: Path, outside: Path) -> Path:
    """A project as a user has it: sources, caches, a git directory and a
    virtualenv whose interpreter links out of the tree."""
    (top / "src" / "__pycache__").mkdir(parents=True)
    (top / "src" / "app.py").write_text("print('app')\n")
    (top / "src" / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0pyc")
    (top / ".git").mkdir()
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (top / ".venv" / "bin").mkdir(parents=True)
    (top / ".venv" / "bin" / "python").symlink_to(outside / OUTSIDE_TARGET)  # as /usr/bin/python3
    (top / ".venv" / "bin" / "python3").symlink_to("python")  # inside by name, out through python
    (top / ".venv" / "lib64").symlink_to("lib")  # dangling, but inside
    (top / "etc").symlink_to(outside)  # a directory outside
    (top / "app-link").symlink_to("src/app.py")  # stays inside: kept as a link
    return top


def listing(top: Path) -> dict[str, str]:
    return {
        path.relative_to(top).as_posix(): "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        for path in sorted(top.rglob("*"))
    }


ESCAPING = [".venv/bin/python", ".venv/bin/python3", "etc"]
KEPT = {
    ".git": "dir",
    ".git/HEAD": "file",
    ".venv": "dir",
    ".venv/bin": "dir",
    ".venv/lib64": "link",
    "app-link": "link",
    "src": "dir",
    "src/__pycache__": "dir",
    "src/__pycache__/app.cpython-311.pyc": "file",
    "src/app.py": "file",
}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / OUTSIDE_TARGET).write_bytes(b"\x7fELF interpreter")
    return tmp_path / "outside"


def test_upload_dir_skips_links_pointing_out_and_reports_them(
    small: LimitedSandbox, root: Path, tmp_path: Path, outside: Path
) -> None:
    tree = project(tmp_path / "tree", outside)
    result = small.upload_dir(tree, "dest")
    assert result == DirectoryTransferResult(entries=len(KEPT), skipped=sorted(ESCAPING))
    assert listing(root / "dest") == KEPT
    assert os.readlink(root / "dest" / "app-link") == "src/app.py"


def test_exclude_leaves_out_every_match_with_its_contents(
    small: LimitedSandbox, root: Path, tmp_path: Path, outside: Path
) -> None:
    tree = project(tmp_path / "tree", outside)
    result = small.upload_dir(tree, "dest", exclude=[".git", "__pycache__", ".venv", "etc"])
    assert result.skipped == []
    assert listing(root / "dest") == {"app-link": "link", "src": "dir", "src/app.py": "file"}
    by_path = small.upload_dir(tree, "again", exclude=["src/*.py", ".*", "etc"])
    assert listing(root / "again") == {"app-link": "link", "src": "dir", "src/__pycache__": "dir",
                                       "src/__pycache__/app.cpython-311.pyc": "file"}  # fmt: skip
    assert by_path.entries == 4


def test_refuse_fails_the_upload_before_anything_is_sent(
    small: LimitedSandbox, root: Path, tmp_path: Path, outside: Path
) -> None:
    tree = project(tmp_path / "tree", outside)
    before = small.executed
    with pytest.raises(errors.InvalidPathError, match=r"\.venv/bin/python"):
        small.upload_dir(tree, "dest", symlinks="refuse")
    assert small.executed == before
    assert not (root / "dest").exists()


def test_copy_inside_copies_the_file_a_link_points_to(
    small: LimitedSandbox, root: Path, tmp_path: Path, outside: Path
) -> None:
    tree = project(tmp_path / "tree", outside)
    result = small.upload_dir(tree, "dest", symlinks="copy-inside")
    assert result.skipped == ["etc"]  # a directory outside is not copied
    for name in (".venv/bin/python", ".venv/bin/python3"):
        copied = root / "dest" / name
        assert not copied.is_symlink() and copied.read_bytes() == b"\x7fELF interpreter"


def test_download_dir_applies_the_same_selection_in_the_sandbox(
    small: LimitedSandbox, root: Path, tmp_path: Path, outside: Path
) -> None:
    project(root / "tree", outside)
    result = small.download_dir("tree", tmp_path / "back")
    assert result == DirectoryTransferResult(entries=len(KEPT), skipped=sorted(ESCAPING))
    assert listing(tmp_path / "back") == KEPT
    excluded = small.download_dir("tree", tmp_path / "slim", exclude=[".git", "__pycache__", ".venv", "etc"])
    assert listing(tmp_path / "slim") == {"app-link": "link", "src": "dir", "src/app.py": "file"}
    assert excluded.skipped == []
    small.download_dir("tree", tmp_path / "copied", symlinks="copy-inside")
    assert (tmp_path / "copied" / ".venv" / "bin" / "python").read_bytes() == b"\x7fELF interpreter"
    with pytest.raises(errors.InvalidPathError, match="outside the tree"):
        small.download_dir("tree", tmp_path / "refused", symlinks="refuse")
    assert not (tmp_path / "refused").exists()


async def test_async_twins_take_the_same_options(
    small: LimitedSandbox, root: Path, tmp_path: Path, outside: Path
) -> None:
    tree = project(tmp_path / "tree", outside)
    result = await small.aupload_dir(tree, "dest", exclude=[".git"])
    assert result.skipped == sorted(ESCAPING)
    back = await small.adownload_dir("dest", tmp_path / "back", exclude=["__pycache__"])
    assert listing(tmp_path / "back") == {
        name: kind for name, kind in KEPT.items() if not name.startswith((".git", "src/__pycache__"))
    }
    assert back.skipped == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"symlinks": "follow"}, "symlinks must be one of"),
        ({"exclude": ".git"}, "exclude must be a list"),
        ({"exclude": [""]}, "exclude must be a list"),
    ],
)
def test_bad_options_fail_before_any_round_trip(
    small: LimitedSandbox, tmp_path: Path, options: dict[str, object], message: str
) -> None:
    (tmp_path / "tree").mkdir()
    with pytest.raises(errors.InvalidArgumentError, match=message):
        small.upload_dir(tmp_path / "tree", "dest", **options)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError, match=message):
        small.download_dir("tree", tmp_path / "back", **options)  # type: ignore[arg-type]
    assert small.executed == 0
