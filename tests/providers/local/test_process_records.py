"""Process records another party shaped: a records directory another user of
the host made in advance in a shared scratch directory, and a record planted
for a process never started through the API. The local provider shares its
scratch directory with every user of the host, so it is where both happen.

Each test finds the records' layout from a genuine record (the directory the
supervisor wrote ``meta`` in), so it plants where the code under test looks."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import PIPE, errors
from sandbox_sdk.process import Process
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.remote import _runtime, proc
from tests.providers.local.test_processes import running

#: The uid another user of the host has (``nobody``).
OTHER_UID = 65534


@pytest.fixture
def shared(local: LocalSandbox, tmp_path: Path) -> Path:
    """A scratch directory like ``/tmp`` (world-writable, sticky) for ``local``."""
    scratch = tmp_path / "shared"
    scratch.mkdir()
    scratch.chmod(0o1777)
    local.scratch_dir = str(scratch)
    return scratch


def genuine_record(local: LocalSandbox, scratch: Path) -> Path:
    """The record of a process started and ended through the API: the
    directory its supervisor wrote ``meta`` in."""
    process = local.start("echo real")
    assert process.wait(timeout=60).stdout == "real\n"
    (meta,) = [path for path in scratch.rglob("meta") if not path.parent.name.startswith(".sbx-scripts")]
    return meta.parent


def wait_for_file(path: Path) -> str:
    """The text of ``path`` once a command wrote a line to it (bounded)."""
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.05)
    return path.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the other user's directory is made with chown")
def test_records_made_in_advance_by_another_user_are_not_used(
    local: LocalSandbox, shared: Path, tmp_path: Path
) -> None:
    """The other user makes the records' directories before root's first
    start, then swaps in a record of its own: a ``status.new`` symlink to a
    root-only file, its own output, and its lock held so the record looks
    supervised. Root's start either refuses the directory (a typed error) or
    keeps to its own: the root-only file is untouched, the output is real."""
    record = genuine_record(local, shared)
    layout = record.parent.relative_to(shared).parts  # the directories a start makes
    saved = {path.name: path.read_bytes() for path in record.iterdir() if path.is_file()}
    shutil.rmtree(shared / layout[0])
    made = shared
    for part in layout:
        made = made / part
        made.mkdir()
        made.chmod(0o777)
        os.chown(made, OTHER_UID, OTHER_UID)
    secret = tmp_path / "root-only"
    secret.write_text("root's secret\n")
    secret.chmod(0o600)

    go = local.root_dir / "go"
    command = "for i in $(seq 600); do [ -e go ] && break; sleep 0.05; done; echo real"
    try:
        process = local.start(command)
    except errors.SandboxPermissionError as exc:
        assert "private" in str(exc)
    else:
        with taken_over(made, saved, secret):
            go.touch()
            with contextlib.suppress(errors.ProcessNotFoundError):  # refusing the record is fine too
                assert process.wait(timeout=60).stdout == "real\n"
    assert secret.read_text() == "root's secret\n"
    assert secret.stat().st_uid == 0


@contextlib.contextmanager
def taken_over(directory: Path, saved: dict[str, bytes], secret: Path) -> Iterator[None]:
    """The other user's swap of each record in ``directory`` for one of its
    own (from the ``saved`` files of a genuine one), while the block runs."""
    locks: list[int] = []
    try:
        for record in list(directory.iterdir()):
            record.rename(record.with_name(record.name + ".taken"))
            record.mkdir()
            for name, data in saved.items():
                if name not in ("status", "lock"):
                    (record / name).write_bytes(b"evil!\n" if name == "out" else data)
            (record / "status.new").symlink_to(secret)
            locks.append(os.open(record / "lock", os.O_RDWR | os.O_CREAT, 0o666))
            fcntl.flock(locks[-1], fcntl.LOCK_EX)
            os.chown(record, OTHER_UID, OTHER_UID)
        yield
    finally:
        for lock in locks:
            os.close(lock)


@pytest.fixture
def victim(local: LocalSandbox) -> Iterator[int]:
    """A process started directly (not through ``start``), in a session of its own."""
    local.execute("setsid sh -c 'echo $$ > victim; exec sleep 60' </dev/null >/dev/null 2>&1 &")
    pid = int(wait_for_file(local.root_dir / "victim"))
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):  # a failing test may have let it be killed
            os.killpg(pid, signal.SIGKILL)


def plant(record: Path, victim: int) -> tuple[str, int]:
    """A record beside the genuine ``record``, as like it as can be, for
    ``victim``: its pid, its real start time and its parent as the
    supervisor, and its lock held. Its name, and the held lock's descriptor."""
    genuine = json.loads((record / "meta").read_bytes())
    name = str(victim) if record.name.isdigit() else secrets.token_hex(len(record.name) // 2)
    planted = record.with_name(name)
    planted.mkdir(mode=0o700)
    for path in record.iterdir():
        if path.is_file() and path.name not in ("meta", "status", "lock"):
            shutil.copyfile(path, planted / path.name)
    fields = Path(f"/proc/{victim}/stat").read_text().rpartition(")")[2].split()
    parent = int(fields[1])
    forged = {"pid": victim, "start": int(fields[19]), "supervisor": parent}
    parent_fields = Path(f"/proc/{parent}/stat").read_text().rpartition(")")[2].split()
    forged["supervisor_start"] = int(parent_fields[19])
    meta = {key: forged.get(key, value) for key, value in genuine.items()}
    (planted / "meta").write_text(json.dumps(meta))
    lock = os.open(planted / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return name, lock


def test_a_record_planted_for_another_process_is_refused(
    local: LocalSandbox, shared: Path, victim: int
) -> None:
    """Neither reattaching by its pid nor a kill through the planted record
    reaches a process that ``start`` did not start; it keeps running."""
    name, lock = plant(genuine_record(local, shared), victim)
    try:
        with pytest.raises(errors.ProcessNotFoundError):
            local.process(victim).kill(signal.SIGKILL)
        with pytest.raises(errors.ProcessNotFoundError, match="not started"):
            Process(local, victim, "sleep 60", name).kill(signal.SIGKILL)
        assert running(victim)
    finally:
        os.close(lock)


@pytest.mark.parametrize("pid", [None, -1, 0, "abc", 2**64, True, 1.5, "12"])
async def test_an_invalid_pid_is_a_typed_error(local: LocalSandbox, pid: object) -> None:
    with pytest.raises(errors.InvalidArgumentError):
        local.process(pid)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgumentError):
        await local.aprocess(pid)  # type: ignore[arg-type]


def test_a_record_whose_pid_was_reused_is_not_signalled(tmp_path: Path) -> None:
    """A record that is right in all but the start time (its pid has been
    given to another process since) signals nothing: here this process is
    the sleeper's parent and holds the record's lock, as its supervisor
    would, so the start time alone refuses it."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    handle = secrets.token_hex(16)
    args = {
        "scratch": base64.b64encode(os.fsencode(tmp_path)).decode(),
        "owner": "tester",
        "pid": sleeper.pid,
        "handle": handle,
        "signal": int(signal.SIGKILL),
        "grace": 0.0,
        "settle": 0.0,
    }
    path = os.path.join(proc.records(args), handle.encode())
    os.mkdir(path, 0o700)
    lock = os.open(os.path.join(path, b"lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    start = proc.start_time(sleeper.pid)
    assert start is not None
    meta = {
        "pid": sleeper.pid,
        "start": start - 1,
        "supervisor": os.getpid(),
        "supervisor_start": proc.start_time(os.getpid()),
    }
    proc.write_atomically(path, b"meta", json.dumps(meta).encode())
    try:
        with pytest.raises(_runtime.Fail, match="not started through this API") as refused:
            proc.send_signal(args, [])
        assert refused.value.code == "NO_PROCESS"
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
        os.close(lock)


def stdin_record(local: LocalSandbox, scratch: Path, process: Process) -> Path:
    """The record of ``process`` (started with a piped stdin): the directory
    whose ``meta`` names its pid."""
    for meta in scratch.rglob("meta"):
        if json.loads(meta.read_text()).get("pid") == process.pid:
            return meta.parent
    raise AssertionError(f"no record of process {process.pid}")


def test_a_piped_stdin_is_private_to_its_user(local: LocalSandbox, shared: Path) -> None:
    """The spool, lock and wake FIFO of a piped stdin are this user's alone
    (0600, in the 0700 record): another user of the host can neither write
    to the process's stdin nor read what was written to it."""
    process = local.start("cat", stdin=PIPE)
    try:
        record = stdin_record(local, shared, process)
        assert record.lstat().st_mode & 0o777 == 0o700
        for name, kind in [("stdin", stat.S_ISREG), ("stdin.lock", stat.S_ISREG), ("wake", stat.S_ISFIFO)]:
            st = (record / name).lstat()
            assert kind(st.st_mode) and st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid(), name
        process.write_stdin(b"secret\n")
        if os.geteuid() == 0:  # as another user (only root can become one here)
            for target, flags in [("wake", os.O_WRONLY | os.O_NONBLOCK), ("stdin", os.O_RDONLY)]:
                probe = f"import os; os.open({str(record / target)!r}, {flags})"
                tried = subprocess.run(
                    ["python3", "-c", probe], user=OTHER_UID, capture_output=True, text=True, check=False
                )
                assert "PermissionError" in tried.stderr, tried
    finally:
        process.kill()


def test_a_spool_swapped_for_a_symlink_is_not_written_through(
    local: LocalSandbox, shared: Path, tmp_path: Path
) -> None:
    """The spool is opened without following a symlink: one put in its
    place (by code running as the same user) gets nothing written through it."""
    bystander = tmp_path / "bystander"
    bystander.write_bytes(b"untouched")
    process = local.start("cat", stdin=PIPE)
    try:
        record = stdin_record(local, shared, process)
        (record / "stdin").unlink()
        (record / "stdin").symlink_to(bystander)
        with pytest.raises(errors.InvalidPathError, match="symbolic links"):  # ELOOP
            process.write_stdin(b"redirected")
        assert bystander.read_bytes() == b"untouched"
    finally:
        process.kill()
