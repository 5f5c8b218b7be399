"""Workspace snapshots (docs/state.md) under faults and hostile stores: an
interrupted snapshot leaves no manifest, an interrupted restore leaves the
old files or the new ones, and a store or manifest that lies is refused
before the sandbox changes. The contract itself is in the conformance kit
(``test_a_snapshot_restores_the_files_exactly`` and its neighbours)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from sandbox_sdk import DirectorySnapshotStore, errors
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.remote import fs
from sandbox_sdk.snapshots import check_paths
from sandbox_sdk.testing.faults import Fault
from tests.transfer.transfer_helpers import faulty

OLD = {"a.txt": b"old a\n", "keep/b.txt": b"old b\n"}
NEW = {"a.txt": b"new a\n", "keep/b.txt": b"new b\n", "keep/c.txt": b"new c\n" * 4000}


def plant(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and ".sbx-" not in str(path)
    }


@pytest.fixture
def store(tmp_path: Path) -> DirectorySnapshotStore:
    return DirectorySnapshotStore(tmp_path / "store")


@pytest.mark.parametrize("fault", [Fault.RAISE, Fault.LOST_REPLY, Fault.CORRUPT], ids=lambda f: f.value)
def test_an_interrupted_snapshot_leaves_no_manifest(
    local: LocalSandbox, store: DirectorySnapshotStore, fault: Fault
) -> None:
    plant(local.root_dir / "work", NEW)
    probe = faulty(local, fault, None)
    probe.snapshot(["work"], store=DirectorySnapshotStore(store.root.parent / "probe"))
    for fail_at in range(1, probe.executed + 1):
        try:
            taken = faulty(local, fault, fail_at).snapshot(["work"], store=store)
        except (errors.SandboxError, ConnectionError):
            assert store.ids() == [], f"call {fail_at}"
        else:  # the fault hit a clean-up the snapshot does not depend on
            assert store.load(taken.id).files == len(NEW), f"call {fail_at}"
            (store.root / "snapshots" / f"{taken.id}.json").unlink()
    assert local.snapshot(["work"], store=store).files == len(NEW)


@pytest.mark.parametrize("fault", [Fault.RAISE, Fault.TIMEOUT, Fault.LOST_REPLY], ids=lambda f: f.value)
def test_an_interrupted_restore_leaves_the_old_files_or_the_new(
    local: LocalSandbox, store: DirectorySnapshotStore, fault: Fault
) -> None:
    work = local.root_dir / "work"
    plant(work, NEW)
    snapshot = local.snapshot(["work"], store=store)
    probe = faulty(local, fault, None)
    probe.restore(snapshot, store=store)
    for fail_at in range(1, probe.executed + 1):
        for path in sorted(work.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        plant(work, OLD)
        with contextlib.suppress(errors.SandboxError, ConnectionError):
            faulty(local, fault, fail_at).restore(snapshot, store=store)
        assert files_under(work) in (OLD, NEW), f"call {fail_at}"
        assert [p.name for p in local.root_dir.iterdir() if p.name.startswith(".sbx-restore")] == []


def test_a_manifest_naming_a_path_outside_its_root_is_refused(
    local: LocalSandbox, store: DirectorySnapshotStore
) -> None:
    plant(local.root_dir / "work", OLD)
    snapshot = local.snapshot(["work"], store=store)
    manifest = store.root / "snapshots" / f"{snapshot.id}.json"
    body = json.loads(manifest.read_text())
    body["entries"][1]["path"] = "../escaped"
    manifest.write_text(json.dumps(body))
    with pytest.raises(errors.SnapshotDamagedError, match="does not match its id"):
        local.restore(snapshot.id, store=store)
    assert files_under(local.root_dir / "work") == OLD
    assert not (local.root_dir / "escaped").exists()


def test_a_store_that_is_a_symlink_or_not_ours_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(errors.SandboxPermissionError, match="not a directory of this user's"):
        DirectorySnapshotStore(tmp_path / "link")
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)
    DirectorySnapshotStore(loose)
    assert oct(loose.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize(
    ("paths", "error"),
    [
        ("work", errors.InvalidArgumentError),
        ([], errors.InvalidArgumentError),
        (["/etc"], errors.InvalidPathError),
        (["../up"], errors.InvalidPathError),
        (["a", "a/b"], errors.InvalidArgumentError),
        ([".", "a"], errors.InvalidArgumentError),
        (["a", "./a"], errors.InvalidArgumentError),
    ],
)
def test_snapshot_paths_are_checked_before_any_round_trip(paths: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_paths(paths)  # type: ignore[arg-type]


def test_a_tree_that_cannot_be_swapped_in_one_step_is_moved_in_entry_by_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``renameat2`` cannot exchange (a mount point: ``EBUSY``), the
    script moves the old entries aside and the new ones in."""
    target, staged = tmp_path / "target", tmp_path / ".sbx-restore-x"
    plant(target, OLD)
    plant(staged, NEW)
    monkeypatch.setattr(fs, "exchange", lambda a, b: False)
    args = {"path": os.fsencode(target), "staged": os.fsencode(staged), "inside": False}
    monkeypatch.setattr(fs, "path_arg", lambda given, key="path": given[key])
    fs.replace_tree(args, [])
    assert files_under(target) == NEW
    assert not staged.exists()
