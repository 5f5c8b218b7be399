"""Scripts installed in the sandbox once and imported afterwards
(docs/protocol.md, "The command"): the cases the conformance suite's
``test_scripts_are_installed_once_then_imported_and_repaired`` does not reach.
Real ``bash`` and ``python3`` processes throughout."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox_sdk import errors, protocol
from sandbox_sdk.base import BaseSandbox
from sandbox_sdk.models import ExecuteResponse
from sandbox_sdk.providers.local import LocalSandbox
from sandbox_sdk.testing.recording import RecordingSandbox

STAT_DOT = {"op": "stat", "path": protocol.encode_path(".")}
SCRIPT = protocol.shipped("ls")
#: A command that leaves its script out is smaller than this; one that carries it, larger.
OMITTED_BYTES = 2048


@pytest.fixture(autouse=True)
def without_operation_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count the bytes of the commands that install and run a
    script with ``python3``; tests/test_operation_server.py has the server's
    commands, and the conformance kit's ``test_scripts_are_installed_once_then_imported_and_repaired``
    both together."""
    monkeypatch.setattr(BaseSandbox, "operation_server", False)


def scripts_dir(scratch: Path) -> Path:
    return scratch / (protocol.SCRIPTS_DIR % os.getuid())


def sandbox_with_scratch(root: Path, scratch: Path) -> LocalSandbox:
    root.mkdir(exist_ok=True)
    sandbox = LocalSandbox(root)
    sandbox.scratch_dir = str(scratch)
    return sandbox


def stat_dot(command: str, nonce: str, cwd: Path) -> str:
    """The type ``stat .`` reports, from a command run by ``bash`` in ``cwd``."""
    done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=False)
    response = ExecuteResponse(output=done.stdout + done.stderr, exit_code=done.returncode)
    value, _ = protocol.parse_result(response, nonce, "stat")
    return str(value["type"])


def test_the_first_command_installs_the_script_and_imports_it(tmp_path: Path) -> None:
    sandbox = sandbox_with_scratch(tmp_path / "root", tmp_path)
    assert sandbox.stat(".").type == "dir"
    installed = scripts_dir(tmp_path) / f"{SCRIPT.name}.py"
    assert installed.read_text("utf-8") == protocol.shipped_source("ls")
    assert [p.name.split(".")[0] for p in (scripts_dir(tmp_path) / "__pycache__").iterdir()] == [SCRIPT.name]
    assert scripts_dir(tmp_path).stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in scripts_dir(tmp_path).iterdir()) == ["__pycache__", installed.name]


@pytest.mark.parametrize("case", ["missing scratch", "others may write", "symlink"])
def test_a_scripts_directory_that_is_not_safely_ours_is_never_used(tmp_path: Path, case: str) -> None:
    """The script still runs, from the command; nothing is imported from (or
    installed in) a directory another user could have changed, even a
    correct copy of the script (the one that would pass the CRC check)."""
    scratch = tmp_path / "scratch"
    planted = scripts_dir(scratch) / f"{SCRIPT.name}.py"
    if case != "missing scratch":
        target = tmp_path / "elsewhere" if case == "symlink" else scripts_dir(scratch)
        target.mkdir(parents=True)
        if case == "symlink":
            scratch.mkdir()
            scripts_dir(scratch).symlink_to(target)
        else:
            target.chmod(0o777)
        planted.write_text(protocol.shipped_source("ls"), "utf-8")
        planted_at = planted.stat().st_mtime_ns
    sandbox = sandbox_with_scratch(tmp_path / "root", scratch)
    sandbox.write("a.txt", "text\n")
    assert sandbox.read("a.txt").content == "text\n"
    assert sandbox.stat("a.txt").size == 5
    if case == "missing scratch":
        assert not scratch.exists()
    else:
        assert sorted(p.name for p in planted.parent.iterdir()) == [planted.name], "no install, no bytecode"
        assert planted.stat().st_mtime_ns == planted_at


def test_concurrent_first_calls_from_threads_and_processes_all_succeed(tmp_path: Path) -> None:
    """Each installer writes a file of its own and renames it into place, so a
    racing reader sees the whole script or none (and then runs its own copy)."""
    commands = [
        protocol.build_command("ls", STAT_DOT, scripts_dir=protocol.scripts_dir_in(str(tmp_path)))
        for _ in range(6)
    ]
    processes = [
        (subprocess.Popen(["bash", "-c", command], cwd=tmp_path, stdout=subprocess.PIPE, text=True), nonce)
        for command, nonce in commands
    ]
    sandbox = sandbox_with_scratch(tmp_path / "root", tmp_path)
    with ThreadPoolExecutor(6) as pool:
        types = list(pool.map(lambda _: sandbox.stat(".").type, range(12)))
    for process, nonce in processes:
        output, _ = process.communicate(timeout=60)
        response = ExecuteResponse(output=output, exit_code=process.returncode)
        types.append(protocol.parse_result(response, nonce, "stat")[0]["type"])
    assert types == ["dir"] * 18
    installed = scripts_dir(tmp_path) / f"{SCRIPT.name}.py"
    assert installed.read_text("utf-8") == protocol.shipped_source("ls")
    assert sorted(p.name for p in scripts_dir(tmp_path).iterdir()) == ["__pycache__", installed.name]


def test_a_script_removed_between_its_check_and_its_import_runs_from_the_command(tmp_path: Path) -> None:
    """The bootstrap's own race: the checked file is gone when ``import``
    looks for it (``__import__`` wrapped to remove it first, standing in for a
    user's ``rm -rf`` at that moment); the script has not started, so the
    bootstrap runs the packed copy and installs it again."""
    command, nonce = protocol.build_command(
        "ls", STAT_DOT, scripts_dir=protocol.scripts_dir_in(str(tmp_path))
    )
    assert stat_dot(command, nonce, tmp_path) == "dir"  # installed
    installed = scripts_dir(tmp_path) / f"{SCRIPT.name}.py"
    removing = (
        "import builtins,posix\n"
        "real,gone=builtins.__import__,[]\n"
        "def removing(name,*args,**kwargs):\n"
        " if name.startswith('sbx_') and not gone:\n"
        "  gone.append(name)\n"
        f"  posix.unlink({str(installed)!r})\n"
        " return real(name,*args,**kwargs)\n"
        "builtins.__import__=removing\n"
        f"exec({protocol.BOOTSTRAP!r})\n"
    )
    command, nonce = protocol.build_command(
        "ls", STAT_DOT, scripts_dir=protocol.scripts_dir_in(str(tmp_path))
    )
    wrapped = command.replace(shlex.quote(protocol.BOOTSTRAP), shlex.quote(removing), 1)
    assert wrapped != command
    assert stat_dot(wrapped, nonce, tmp_path) == "dir"
    assert installed.read_text("utf-8") == protocol.shipped_source("ls")


def test_a_client_leaves_out_a_script_it_has_seen_run(tmp_path: Path) -> None:
    """Once a command carrying the script ran it, the client's next commands
    of that script carry only the bootstrap; the result is the same."""
    sandbox = RecordingSandbox(sandbox_with_scratch(tmp_path / "root", tmp_path))
    sandbox.scratch_dir = str(tmp_path)
    assert [sandbox.stat(".").type for _ in range(3)] == ["dir"] * 3
    first, *later = sandbox.reset()
    assert first.command_bytes > len(SCRIPT.packed)
    assert len(later) == 2 and all(trip.command_bytes < OMITTED_BYTES for trip in later)


@pytest.mark.parametrize("case", ["copy removed", "scratch unwritable"])
def test_a_missing_copy_costs_one_more_round_trip_then_the_script_travels(tmp_path: Path, case: str) -> None:
    """A command that left the script out finds no copy: the bootstrap says so
    before the script starts, the client sends the command again in full, and
    from then on always does (a scratch directory nothing can be installed in
    costs that one round trip per script)."""
    scratch = tmp_path / ("scratch" if case == "copy removed" else "missing")
    if case == "copy removed":
        scratch.mkdir()
    sandbox = RecordingSandbox(sandbox_with_scratch(tmp_path / "root", scratch))
    sandbox.scratch_dir = str(scratch)
    sandbox.write("a.txt", "x\n")
    assert sandbox.read("a.txt").content == "x\n"
    if case == "copy removed":
        shutil.rmtree(scripts_dir(scratch))
    sandbox.reset()
    assert sandbox.read("a.txt").content == "x\n"
    omitted, resent = sandbox.reset()
    assert omitted.command_bytes < OMITTED_BYTES < resent.command_bytes
    assert sandbox.read("a.txt").content == "x\n"
    [again] = sandbox.reset()
    assert again.command_bytes > OMITTED_BYTES


class Gathered(RecordingSandbox):
    """Once ``armed``, holds its next ``parties`` calls until all have
    arrived (their commands were all built before any ran), and holds a
    command that carries the script until those ``parties`` calls have all
    run (so no resend installs the script again before one of them looks
    for it, however the threads are scheduled)."""

    def __init__(self, inner: LocalSandbox, parties: int) -> None:
        super().__init__(inner)
        self.scratch_dir = inner.scratch_dir
        self.barrier = threading.Barrier(parties)
        self.held = 0
        self.ran = 0
        self.all_ran = threading.Event()
        self.armed = False
        self.lock = threading.Lock()

    def execute(self, command: str, *, timeout: float | None = None) -> ExecuteResponse:
        with self.lock:
            self.held += self.armed
            hold = self.armed and self.held <= self.barrier.parties
        if hold:
            self.barrier.wait(timeout=60)
        elif self.armed and len(command) > OMITTED_BYTES:
            self.all_ran.wait(timeout=60)
        try:
            return super().execute(command, timeout=timeout)
        finally:
            if hold:
                with self.lock:
                    self.ran += 1
                    if self.ran == self.barrier.parties:
                        self.all_ran.set()


def test_concurrent_calls_that_all_find_the_copy_gone_are_each_sent_again(tmp_path: Path) -> None:
    """Six calls built while the script was known installed, all run after
    its copy was removed: each is sent again in full, and each succeeds."""
    sandbox = sandbox_with_scratch(tmp_path / "root", tmp_path)
    gathered = Gathered(sandbox, parties=6)
    assert gathered.stat(".").type == "dir"  # installs the script, and the client knows it
    shutil.rmtree(scripts_dir(tmp_path))
    gathered.armed = True
    with ThreadPoolExecutor(6) as pool:
        assert list(pool.map(lambda _: gathered.stat(".").type, range(6))) == ["dir"] * 6
    trips = gathered.reset()[1:]
    assert sorted(trip.command_bytes < OMITTED_BYTES for trip in trips) == [False] * 6 + [True] * 6


@pytest.mark.parametrize("scratch", ["", "tmp", "./tmp"])
def test_a_relative_scratch_dir_is_refused_before_any_round_trip(tmp_path: Path, scratch: str) -> None:
    """``""`` would install the scripts in ``/``, a relative one wherever a command starts."""
    recording = RecordingSandbox(LocalSandbox(tmp_path))
    recording.scratch_dir = scratch
    with pytest.raises(errors.InvalidArgumentError, match="scratch_dir must be an absolute path"):
        recording.ls(".")
    assert recording.trips == []
    assert os.listdir(tmp_path) == []
