"""A local sandbox's operation server stops when the program that started it
exits (providers/local/_servers.py), instead of lingering for
``operation_server_idle`` seconds: tried with real programs that start one
and exit, each with a scratch directory of its own (so a server of its own)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_operation_server import alive, port_file, server_pid, wait_until

#: A program with a local sandbox that starts a server (its second operation does),
#: has it serve (the third), prints the server's pid, waits for a line, then ends
#: as its argument says: ``exit`` (normally), ``_exit`` (no exit hooks run) or
#: ``fork`` (a forked child exits normally first; then the program does).
PROGRAM = """
import os, sys
from sandbox_sdk.providers.local import LocalSandbox

root, scratch, end = sys.argv[1:]
sandbox = LocalSandbox(root)
sandbox.scratch_dir = scratch
for n in range(3):
    sandbox.write(f"f{n}.txt", "x", overwrite=True)
port = os.path.join(scratch, ".sbx-scripts-%d" % os.getuid())
(name,) = [n for n in os.listdir(port) if n.endswith(".port")]
print(open(os.path.join(port, name)).read().split()[2], flush=True)
if end == "fork":
    child = os.fork()
    if child == 0:
        sys.exit(0)  # a normal exit: the exit hooks run in the child too
    os.waitpid(child, 0)
    print("child gone", flush=True)
sys.stdin.readline()
del sandbox  # the record outlives the sandbox object
if end == "_exit":
    os._exit(0)
"""


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "scratch"
    path.mkdir()
    yield path
    if port_file(path).exists():  # a server a failed test left behind
        with contextlib.suppress(ProcessLookupError, IndexError, ValueError):
            os.kill(server_pid(path), signal.SIGTERM)


def start(tmp_path: Path, scratch: Path, end: str) -> tuple[subprocess.Popen[str], int]:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    program = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(root), str(scratch), end],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert program.stdout is not None
    pid = int(program.stdout.readline())
    assert alive(pid)
    return program, pid


def finish(program: subprocess.Popen[str]) -> None:
    assert program.stdin is not None
    program.stdin.write("\n")
    program.stdin.close()
    assert program.wait(timeout=60) == 0


def test_the_server_stops_when_the_program_that_started_it_exits(tmp_path: Path, scratch: Path) -> None:
    program, pid = start(tmp_path, scratch, "exit")
    finish(program)
    wait_until(lambda: not alive(pid), "the server to exit")
    assert not port_file(scratch).exists()


def test_without_exit_hooks_it_lingers_as_before(tmp_path: Path, scratch: Path) -> None:
    """``os._exit`` (or a kill) runs no exit hook: the server then waits out
    its idle time, as documented; this is also what the test above would see
    without the hook."""
    program, pid = start(tmp_path, scratch, "_exit")
    finish(program)
    assert alive(pid)
    assert server_pid(scratch) == pid


def test_a_forked_child_leaves_the_parents_server_alone(tmp_path: Path, scratch: Path) -> None:
    program, pid = start(tmp_path, scratch, "fork")
    assert program.stdout is not None
    assert program.stdout.readline() == "child gone\n"
    assert alive(pid)
    assert server_pid(scratch) == pid
    finish(program)
    wait_until(lambda: not alive(pid), "the server to exit")


def test_a_program_that_only_used_a_server_leaves_it_running(tmp_path: Path, scratch: Path) -> None:
    """The server belongs to the program that started it: a second program
    served by it (it started none) exits without stopping it."""
    first, pid = start(tmp_path, scratch, "_exit")
    second, served_by = start(tmp_path, scratch, "exit")
    assert served_by == pid
    finish(second)
    assert alive(pid)
    assert port_file(scratch).exists()
    finish(first)
