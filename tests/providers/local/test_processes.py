"""The local provider's part of the process model: an interrupted call
(a cancelled ``aexecute`` or one-trip ``arun``, Ctrl-C in ``execute``) kills
the command's whole group before it returns, and a host process killed by a
signal exits 128+N. Each interrupting test waits until the command has
started (it writes its pids) and then until its processes are gone: no
fixed delay, which load could make fall before the start or after the end."""

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

#: Records the pids of its shell and of a background child, then would run a minute.
LONG_RUNNER = "(sleep 60; touch late-child) & echo $$ $! > pids; sleep 60; touch late"
#: Longest a test waits for the command to start, or for its processes to end once interrupted.
WAIT_SECONDS = 30.0

CALLS: dict[str, Callable[[LocalSandbox], Awaitable[object]]] = {
    "aexecute": lambda local: local.aexecute(LONG_RUNNER),
    "arun": lambda local: local.arun(LONG_RUNNER),
    "arun-env": lambda local: local.arun(LONG_RUNNER, env={"A": "1"}),
}


def started(pids: Path) -> bool:
    """Whether the command has written its pids (the whole line)."""
    return pids.exists() and pids.read_text().endswith("\n")


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def assert_gone(pids: Path) -> None:
    """The interrupted command's shell and background child end (SIGKILLed, they
    may take a moment), and neither got to write what it would have later."""
    shell, child = (int(pid) for pid in pids.read_text().split())
    deadline = time.monotonic() + WAIT_SECONDS
    while running(shell) or running(child):
        assert time.monotonic() < deadline, "the interrupted command still runs"
        time.sleep(0.1)
    assert sorted(p.name for p in pids.parent.iterdir() if p.name.startswith("late")) == []


async def until_started(pids: Path) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        while not started(pids):
            await anyio.sleep(0.05)


@pytest.mark.parametrize("call", CALLS)
async def test_an_anyio_cancel_scope_kills_the_command(local: LocalSandbox, call: str) -> None:
    pids = local.root_dir / "pids"

    async def cancel_once_started(scope: anyio.CancelScope) -> None:
        await until_started(pids)
        scope.cancel()

    async with anyio.create_task_group() as group:
        with anyio.CancelScope() as scope:
            group.start_soon(cancel_once_started, scope)
            await CALLS[call](local)
    assert scope.cancelled_caught
    assert_gone(pids)


@pytest.mark.parametrize("call", CALLS)
async def test_an_asyncio_cancellation_kills_the_command(local: LocalSandbox, call: str) -> None:
    """What ``asyncio.wait_for`` does at its timeout: cancel the task."""
    pids = local.root_dir / "pids"
    task = asyncio.ensure_future(CALLS[call](local))
    await until_started(pids)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_gone(pids)


def interrupt_once_started(pids: Path, stop: threading.Event) -> None:
    """Ctrl-C in the main thread once the command has written ``pids`` (at once after
    30 s without): a fixed delay could fall after the end of a command slowed by load."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not started(pids):
        if stop.wait(0.05) or time.monotonic() > deadline:
            break
    if not stop.is_set():
        _thread.interrupt_main()


@pytest.mark.usefixtures("python_sigint")
@pytest.mark.parametrize("call", ["execute", "run"])
def test_ctrl_c_kills_the_command(local: LocalSandbox, call: str) -> None:
    pids, stop = local.root_dir / "pids", threading.Event()
    interrupter = threading.Thread(target=interrupt_once_started, args=(pids, stop), daemon=True)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            getattr(local, call)(LONG_RUNNER)
    finally:
        stop.set()
        interrupter.join()
    assert_gone(pids)


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
