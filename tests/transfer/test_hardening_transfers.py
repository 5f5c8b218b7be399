"""Issue 13's transfer findings: what a finished transfer staged is removed or
its failure reported; lost final replies are asked after; a refused tree
leaves nothing behind; a large batch under a short timeout reports exactly
what landed."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox_sdk import errors
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.faults import Fault, FaultySandbox, InjectedFault, LimitedSandbox
from tests.transfer.transfer_helpers import SMALL_COMMAND_BYTES, SMALL_OUTPUT_BYTES, scratch_entries

LIMITS = {"max_command_bytes": SMALL_COMMAND_BYTES, "max_output_bytes": SMALL_OUTPUT_BYTES}


class FailingFrom(LimitedSandbox):
    """Every ``execute()`` from the ``first``-th on raises, as a provider gone away."""

    def __init__(self, inner: LocalSandbox, first: int) -> None:
        super().__init__(inner, **LIMITS)
        self.first = first

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        if self._count() >= self.first:
            raise InjectedFault("injected fault: the provider is gone")
        return self._run(command, timeout)


@pytest.fixture
def local(tmp_path: Path) -> LocalSandbox:
    for name in ["box", "scratch"]:
        (tmp_path / name).mkdir()
    sandbox = LocalSandbox(tmp_path / "box")
    sandbox.scratch_dir = str(tmp_path / "scratch")
    return sandbox


def scratch(local: LocalSandbox) -> list[str]:
    return scratch_entries(Path(local.scratch_dir))


def calls_of_download_dir(local: LocalSandbox, tmp_path: Path) -> int:
    counted = LimitedSandbox(local, **LIMITS)
    counted.scratch_dir = local.scratch_dir
    counted.download_dir("tree", tmp_path / "first")
    return counted.executed


@pytest.fixture
def tree(local: LocalSandbox) -> None:
    local.write("tree/a.txt", "a" * 30_000)
    local.write("tree/sub/b.txt", "b")


@pytest.mark.usefixtures("tree")
def test_download_dir_retries_removing_its_archive(local: LocalSandbox, tmp_path: Path) -> None:
    last = calls_of_download_dir(local, tmp_path)
    sandbox = FaultySandbox(local, fault=Fault.RAISE, fail_at=last, **LIMITS)
    sandbox.scratch_dir = local.scratch_dir
    assert sandbox.download_dir("tree", tmp_path / "back").entries == 3
    assert sandbox.injected and scratch(local) == []


@pytest.mark.usefixtures("tree")
def test_download_dir_reports_an_archive_it_could_not_remove(local: LocalSandbox, tmp_path: Path) -> None:
    last = calls_of_download_dir(local, tmp_path)
    sandbox = FailingFrom(local, last)
    sandbox.scratch_dir = local.scratch_dir
    with pytest.raises(errors.SandboxError) as raised:
        sandbox.download_dir("tree", tmp_path / "back")
    assert "is left in the sandbox" in "".join(getattr(raised.value, "__notes__", []))
    assert (tmp_path / "back/sub/b.txt").read_text() == "b"
    assert len(scratch(local)) == 1


def test_upload_dir_refused_for_a_bad_tree_creates_nothing(local: LocalSandbox, tmp_path: Path) -> None:
    tree = tmp_path / "hostile"
    tree.mkdir()
    (tree / "out").symlink_to("../../../etc")
    with pytest.raises(errors.InvalidPathError):
        local.upload_dir(tree, "new/target", symlinks="refuse")
    assert not (local.root_dir / "new").exists()
    assert scratch(local) == []
    skipped = local.upload_dir(tree, "new/target")  # the default leaves the link out, and says so
    assert skipped.skipped == ["out"]
    assert os.listdir(local.root_dir / "new/target") == []


def a_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "sub" / "empty").mkdir(parents=True)
    (tree / "sub" / "data.bin").write_bytes(bytes(range(256)) * 100)
    (tree / "link").symlink_to("sub/data.bin")
    return tree


def test_upload_dir_asks_whether_a_lost_extract_landed(local: LocalSandbox, tmp_path: Path) -> None:
    tree = a_tree(tmp_path)
    clean = FaultySandbox(local, fault=Fault.LOST_REPLY, fail_at=None, **LIMITS)
    clean.scratch_dir = local.scratch_dir
    expected = clean.upload_dir(tree, "clean")
    lost = FaultySandbox(local, fault=Fault.LOST_REPLY, fail_at=clean.executed, **LIMITS)
    lost.scratch_dir = local.scratch_dir
    assert lost.upload_dir(tree, "copy") == expected
    assert lost.injected and lost.executed == clean.executed + 1
    assert (local.root_dir / "copy/sub/data.bin").read_bytes() == (tree / "sub/data.bin").read_bytes()
    assert scratch(local) == []


def test_upload_dir_whose_extract_did_not_run_still_fails(local: LocalSandbox, tmp_path: Path) -> None:
    tree = a_tree(tmp_path)
    clean = FaultySandbox(local, fault=Fault.RAISE, fail_at=None, **LIMITS)
    clean.scratch_dir = local.scratch_dir
    clean.upload_dir(tree, "clean")
    never = FaultySandbox(local, fault=Fault.RAISE, fail_at=clean.executed, **LIMITS)
    never.scratch_dir = local.scratch_dir
    with pytest.raises(errors.SandboxError):
        never.upload_dir(tree, "copy")
    assert not (local.root_dir / "copy").exists()
    assert scratch(local) == []


BIG_OLD = "o" * 20_000
BIG_NEW = "n" * 20_000


def staged_edit(local: LocalSandbox, fault: Fault, fail_at: int | None) -> tuple[FaultySandbox, int]:
    """A staged ``replace_all`` edit (texts over the command size) of a fresh file."""
    local.write("edited.txt", f"{BIG_OLD}|{BIG_OLD}", overwrite=True)
    sandbox = FaultySandbox(local, fault=fault, fail_at=fail_at, **LIMITS)
    sandbox.scratch_dir = local.scratch_dir
    return sandbox, sandbox.edit("edited.txt", BIG_OLD, BIG_NEW, replace_all=True).replacements


@pytest.mark.parametrize("fault", [Fault.LOST_REPLY, Fault.RAISE], ids=lambda f: f.value)
def test_a_staged_edit_asks_whether_its_lost_final_call_committed(local: LocalSandbox, fault: Fault) -> None:
    clean, count = staged_edit(local, fault, None)
    assert count == 2 and scratch(local) == []
    edit_call = clean.executed - 1  # the last call removes the count the edit left
    for fail_at in range(1, clean.executed + 1):
        try:
            sandbox, count = staged_edit(local, fault, fail_at)
        except errors.SandboxError:
            assert (fault, fail_at) != (Fault.LOST_REPLY, edit_call), "a committed edit reported failed"
            assert local.read_bytes("edited.txt") == f"{BIG_OLD}|{BIG_OLD}".encode(), f"call {fail_at}"
        else:
            assert count == 2 and sandbox.injected
            assert local.read_bytes("edited.txt") == f"{BIG_NEW}|{BIG_NEW}".encode(), f"call {fail_at}"
        assert scratch(local) == [], f"call {fail_at}: {scratch(local)}"


def test_a_staged_single_edit_whose_reply_was_lost_reports_its_one_replacement(local: LocalSandbox) -> None:
    local.write("single.txt", f"{BIG_OLD}|tail")
    clean = FaultySandbox(local, fault=Fault.LOST_REPLY, fail_at=None, **LIMITS)
    clean.scratch_dir = local.scratch_dir
    clean.edit("single.txt", BIG_OLD, BIG_NEW)
    local.write("single.txt", f"{BIG_OLD}|tail", overwrite=True)
    lost = FaultySandbox(local, fault=Fault.LOST_REPLY, fail_at=clean.executed, **LIMITS)
    lost.scratch_dir = local.scratch_dir
    assert lost.edit("single.txt", BIG_OLD, BIG_NEW).replacements == 1
    assert local.read_bytes("single.txt") == f"{BIG_NEW}|tail".encode()
    assert lost.injected and scratch(local) == []


class CutShort(LimitedSandbox):
    """Runs every command with a timeout of ``seconds``, as a provider whose
    call timed out part-way: the command is killed wherever it was."""

    def __init__(self, inner: LocalSandbox, seconds: float) -> None:
        super().__init__(inner, max_command_bytes=inner.limits.max_command_bytes, max_output_bytes=1 << 20)
        self.seconds = seconds
        self.cut = False

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        if self.cut:
            return self._run(command, timeout)
        self.cut = True
        return self._run(command, self.seconds)


def tiny_files(count: int) -> list[tuple[str, bytes]]:
    return [(f"many/f{i:05}", b"%d" % i) for i in range(count)]


def test_a_batch_killed_part_way_reports_exactly_what_landed(local: LocalSandbox) -> None:
    files = tiny_files(3000)
    for attempt, seconds in enumerate([0.3, 0.6, 1.2, 2.4]):  # a slower machine needs longer to land any
        sandbox = CutShort(local, seconds=seconds)
        sandbox.scratch_dir = local.scratch_dir
        results = sandbox.upload_files([(f"{attempt}/{path}", data) for path, data in files])
        for (path, data), result in zip(files, results, strict=True):
            target = local.root_dir / f"{attempt}/{path}"
            assert target.read_bytes() == data if result.error is None else not target.exists(), path
        assert list((local.root_dir / str(attempt)).rglob(".sbx-*")) == []
        landed = sum(result.error is None for result in results)
        if 0 < landed < len(files):
            return
    pytest.fail("the batch was never cut part-way")


def test_a_batch_whose_reply_was_lost_reports_every_item_landed(local: LocalSandbox) -> None:
    sandbox = FaultySandbox(local, fault=Fault.LOST_REPLY, fail_at=1, **LIMITS)
    results = sandbox.upload_files(tiny_files(20))
    assert sandbox.injected and [r.error for r in results] == [None] * 20


def test_a_batch_is_packed_by_the_files_its_timeout_leaves_time_to_write(local: LocalSandbox) -> None:
    sandbox = LimitedSandbox(
        local, max_command_bytes=local.limits.max_command_bytes, max_output_bytes=1 << 20
    )
    sandbox.limits = replace(sandbox.limits, operation_timeout=1.0)
    assert [r.error for r in sandbox.upload_files(tiny_files(100))] == [None] * 100
    assert sandbox.executed == 4  # 25 files a command: 20 ms each against half the timeout


def test_a_local_source_not_a_regular_file_is_refused_alone(local: LocalSandbox, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    results = local.upload_files([("from-fifo", str(fifo)), ("from-dir", str(tmp_path)), ("ok", b"ok")])
    assert [r.path for r in results] == ["from-fifo", "from-dir", "ok"]
    assert "not a regular file" in (results[0].error or "")
    assert "is a directory" in (results[1].error or "")
    assert results[2].error is None and not (local.root_dir / "from-fifo").exists()


def plant(directory: Path, name: str, age: float) -> Path:
    path = directory / name
    path.write_bytes(b"left behind")
    os.utime(path, (time.time() - age, time.time() - age))
    return path


@pytest.mark.usefixtures("tree")
def test_transfers_sweep_staging_files_older_than_a_day(local: LocalSandbox, tmp_path: Path) -> None:
    day = 24 * 3600
    scratch_dir, dest_dir = Path(local.scratch_dir), local.root_dir / "tree"
    stale = [plant(scratch_dir, ".sbx-download-x.tar", day + 60), plant(dest_dir, ".sbx-x.tmp", day + 60)]
    fresh = [plant(scratch_dir, ".sbx-upload-y.tar", 60), plant(dest_dir, ".sbx-y.tmp", 60)]
    kept = plant(dest_dir, ".sbx", day + 60)  # not a staging name
    (scratch_dir / ".sbx-locks-0").mkdir()
    links = {age: scratch_dir / f".sbx-{age}.lnk" for age in (day + 60, 60)}  # upload links
    for age, link in links.items():
        link.symlink_to(dest_dir / "gone.tmp")
        os.utime(link, (time.time() - age, time.time() - age), follow_symlinks=False)
    small = LimitedSandbox(local, **LIMITS)
    small.scratch_dir = local.scratch_dir
    small.download_dir("tree", tmp_path / "back")  # the archive's directory
    small.write("tree/big.bin", os.urandom(40_000))  # staged: the destination's directory
    assert [path.exists() for path in stale] == [False, False]
    assert [path.exists() for path in [*fresh, kept, scratch_dir / ".sbx-locks-0"]] == [True] * 4
    assert [link.is_symlink() for link in links.values()] == [False, True]
