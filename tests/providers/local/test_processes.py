"""The local provider's part of the process model: an interrupted call
(a cancelled ``aexecute`` or one-trip ``arun``, Ctrl-C in ``execute``) kills
the command's whole group before it returns, and a host process killed by a
signal exits 128+N. Each test checks that a file the command would write
later never appears, or (Ctrl-C) that the command's processes are gone."""

from __future__ import annotations

import _thread
import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from sandbox_sdk.provider_kit import run_process
from sandbox_sdk.providers.local import LocalSandbox

#: Writes ``late`` after two seconds, from a background child as well as the shell.
LATE_WRITER = "(sleep 2; touch late-child) & sleep 2; touch late"


def assert_nothing_written_later(root: Path) -> None:
    time.sleep(3)
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("late")) == []


CALLS: dict[str, Callable[[LocalSandbox], Awaitable[object]]] = {
    "aexecute": lambda local: local.aexecute(LATE_WRITER),
    "arun": lambda local: local.arun(LATE_WRITER),
    "arun-env": lambda local: local.arun(LATE_WRITER, env={"A": "1"}),
}


@pytest.mark.parametrize("call", CALLS)
async def test_an_anyio_cancel_scope_kills_the_command(local: LocalSandbox, call: str) -> None:
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        await CALLS[call](local)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 2
    assert_nothing_written_later(local.root_dir)


@pytest.mark.parametrize("call", CALLS)
async def test_asyncio_wait_for_kills_the_command(local: LocalSandbox, call: str) -> None:
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(CALLS[call](local), 0.5)
    assert_nothing_written_later(local.root_dir)


#: Records the pids of its shell and of a background child, then would run a minute.
LONG_RUNNER = "(sleep 60; touch late-child) & echo $$ $! > pids; sleep 60; touch late"


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def interrupt_once_started(pids: Path, stop: threading.Event) -> None:
    """Ctrl-C in the main thread once the command has written ``pids`` (at once after
    30 s without): a fixed delay could fall after the end of a command slowed by load."""
    deadline = time.monotonic() + 30
    while not (pids.exists() and pids.read_text().endswith("\n")):
        if stop.wait(0.05) or time.monotonic() > deadline:
            break
    if not stop.is_set():
        _thread.interrupt_main()


@pytest.mark.usefixtures("python_sigint")
@pytest.mark.parametrize("call", ["execute", "run"])
def test_ctrl_c_kills_the_command(local: LocalSandbox, call: str) -> None:
    pids, stop = local.root_dir / "pids", threading.Event()
    interrupter = threading.Thread(target=interrupt_once_started, args=(pids, stop))
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            getattr(local, call)(LONG_RUNNER)
    finally:
        stop.set()
        interrupter.join()
    shell, child = (int(pid) for pid in pids.read_text().split())
    deadline = time.monotonic() + 30
    while running(shell) or running(child):  # SIGKILLed, they may take a moment to end
        assert time.monotonic() < deadline, "the interrupted command still runs"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("command", "exit_code"), [("kill -TERM $$", 143), ("kill -KILL $$", 137), ("exit 3", 3)]
)
def test_a_host_process_exits_128_plus_its_signal(tmp_path: Path, command: str, exit_code: int) -> None:
    response = run_process(["bash", "-c", command], cwd=tmp_path, env=None, timeout=10, max_output_bytes=100)
    assert (response.exit_code, response.timed_out) == (exit_code, False)


@pytest.mark.parametrize("followed", [False, True], ids=["one-trip", "followed"])
def test_a_command_longer_than_one_argument(local: LocalSandbox, followed: bool) -> None:
    """Over 96 KiB a command reaches bash in a file it sources (Linux caps one argument at 128 KiB)."""
    chunk = "x" * 64 * 1024
    command = "printf %s " + " ".join([chunk] * 16)
    result = local.run(command, on_stdout=(lambda text: None) if followed else None)
    assert (result.exit_code, result.stdout) == (0, chunk * 16)
