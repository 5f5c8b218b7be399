"""ls and glob send their entries as compressed columns: the output of a
listing is no larger than 1.2x what deepagents' ``BaseSandbox`` prints for
the same listing (one JSON object per entry with only the path and whether it
is a directory), although ours also carries size, mtime and mode. Sizes, not
times: they do not vary with load."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

from sandbox_sdk import FileInfo
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.recording import RecordingSandbox


def reference_output(paths: list[str]) -> int:
    """Bytes deepagents 0.7 prints for these entries (``_build_ls_cmd``, and
    the glob script's ``_emit``: ``json.dumps`` of path and ``is_dir``, a line each)."""
    return sum(len(json.dumps({"path": p, "is_dir": False})) + 1 for p in paths)


def recorded(tmp_path: Path) -> RecordingSandbox:
    sandbox = RecordingSandbox(LocalSandbox(tmp_path))
    sandbox.limits = replace(sandbox.limits, max_output_bytes=1024 * 1024)  # a typical remote provider's
    return sandbox


def output_bytes(sandbox: RecordingSandbox) -> int:
    trips = sandbox.reset()
    assert len(trips) == 1
    return trips[0].output_bytes


def test_ls_of_1000_entries(tmp_path: Path) -> None:
    folder = tmp_path / "listing"
    folder.mkdir()
    for i in range(1000):
        (folder / f"entry_{i:04d}.txt").write_bytes(b"x" * (i % 97))
    sandbox = recorded(tmp_path)
    entries = sandbox.ls(str(folder))
    ours = output_bytes(sandbox)
    assert len(entries) == 1000
    assert ours <= 1.2 * reference_output([e.path for e in entries])
    assert entries[5] == expected(str(folder / "entry_0005.txt"))


def test_glob_of_2000_files(tmp_path: Path) -> None:
    for d in range(20):
        (tmp_path / f"pkg_{d:02d}").mkdir()
        for i in range(100):
            (tmp_path / f"pkg_{d:02d}" / f"module_{i:03d}.py").touch()
    sandbox = recorded(tmp_path)
    result = sandbox.glob("**/*.py")
    ours = output_bytes(sandbox)
    assert len(result.matches) == 2000 and not result.truncated
    assert ours <= 1.2 * reference_output([m.path for m in result.matches])
    assert result.matches[101] == expected("pkg_01/module_001.py", tmp_path)


def test_names_that_are_not_utf8_and_every_type_come_back_as_they_are(tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    bad = os.fsdecode(b"bad-\xff\xfe")
    (folder / bad).write_bytes(b"12345")
    (folder / 'caf\u00e9 "quoted"\n').write_text("x")
    (folder / "sub").mkdir()
    (folder / "link").symlink_to("sub")
    os.mkfifo(folder / "fifo")
    (folder / "ro").touch(mode=0o444)
    sandbox = LocalSandbox(tmp_path)
    listed = sandbox.ls("odd")
    names = sorted(os.listdir(folder), key=os.fsencode)
    assert [e.path for e in listed] == [f"odd/{n}" for n in names]
    assert listed == [expected(f"odd/{n}", tmp_path) for n in names]
    assert {e.name: e.type for e in listed}[bad] == "file"
    assert sorted(m.path for m in sandbox.glob("*", "odd").matches) == sorted(f"odd/{n}" for n in names)


def expected(path: str, root: Path | None = None) -> FileInfo:
    st = os.lstat(root / path if root else path)
    kind = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink"}.get(
        stat.S_IFMT(st.st_mode), "other"
    )
    return FileInfo(
        path=path,
        name=os.path.basename(path.rstrip("/")),
        type=kind,  # type: ignore[arg-type]
        size=st.st_size,
        mtime=st.st_mtime,
        mode=stat.S_IMODE(st.st_mode),
    )
